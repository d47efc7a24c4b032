"""One run's configuration, validated once before anything is launched: the profile with the
options' overrides, the policies, the API key's variable, the cache mode against the adapter's
capabilities, and the baseline file (read and checked here, so a truncated file or a machine
the profile refuses is an error before a 10-minute model load, not after)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from perftests import baseline as bl
from perftests import profiles
from perftests.engines import ADAPTERS
from perftests.errors import ConfigError
from perftests.machine import fingerprint
from perftests.measure import CacheMode
from perftests.options import DEFAULT_HW
from perftests.outcome import Policy
from perftests.profiles import Profile
from perftests.prompts import Mode
from perftests.service import api_key_from_env

Mode_ = Literal["gate", "sweep", "ab"]  # gate: a baseline is required (or written); sweep: optional;
# ab: none is read (an A/B judges B against A, so a stored file can neither help nor block it)


@dataclass(frozen=True)
class Settings:
    """What each launch measures; defaults come from the profile, options override them."""

    contexts: tuple[int, ...]
    repeats: int
    warmup: int
    short_tokens: int
    long_tokens: int
    cache_mode: CacheMode = "warm"
    prompt_mode: Mode = "corpus"
    seed: int = 0
    max_retries: int = 3
    stream_check: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "contexts": list(self.contexts)}


@dataclass(frozen=True)
class RunConfig:
    profile: Profile
    settings: Settings
    tolerance: float
    reruns: int  # extra launches (rounds) while a point is inconclusive
    launches: int  # launches (rounds) the run starts with
    policy: Policy
    launch_noise: float
    machine_tolerance: float
    control: bool
    baseline_path: Path
    baseline: bl.Baseline | None  # the stored file, checked; None if there is none
    provisional_source: bl.Baseline | None = None  # --provisional-from's curve
    update: bool = False
    reason: str | None = None
    service_url: str | None = None
    api_key_env: str | None = None
    log_dir: Path = Path(".perftests/logs")
    target: str = ""  # label of this service when a run measures several
    warnings: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)  # said, not warned: which baseline, why
    shape_noise: float = 0.05  # prior sd of a within-launch quotient (profiles.GateDefaults)
    pool_sessions: int = 1  # sessions a refresh keeps, itself included (1: replace)
    session_noise: float = 0.05  # prior between-session sd beside a pooled baseline's

    @property
    def attached(self) -> bool:
        return bool(self.service_url or self.profile.service.url)

    def for_target(self, target: str, url: str | None) -> RunConfig:
        return replace(self, target=target, service_url=url)

    def with_overrides(self, *, repeats: int | None = None, warmup: int | None = None) -> RunConfig:
        s = self.settings
        return replace(
            self,
            settings=replace(
                s,
                repeats=s.repeats if repeats is None else repeats,
                warmup=s.warmup if warmup is None else warmup,
            ),
        )


def project_root(start: Path) -> Path:
    """Where relative baseline paths of profiles resolve: the nearest ancestor of `start` with a
    pyproject.toml, pytest.ini, tox.ini or setup.cfg (as pytest finds its rootdir), else start.
    Both the plugin (from its rootdir) and the CLI (from the working directory) use this."""
    start = start.resolve()
    for d in (start, *start.parents):
        if any((d / f).is_file() for f in ("pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg")):
            return d
    return start


def _nonneg(values: Mapping[str, Any], key: str, flag: str, default: int, *, positive: bool = False) -> int:
    v = values.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < (1 if positive else 0):
        raise ConfigError(
            f"{flag}: expected {'a positive' if positive else 'a non-negative'} integer, got {v!r}"
        )
    return v


def _load_baseline(path: Path, what: str) -> bl.Baseline | None:
    try:
        return bl.load(path)
    except FileNotFoundError:
        return None
    except ConfigError as e:
        raise ConfigError(f"{what}: {e}") from None


def missing_baseline(profile: Profile, path: Path) -> str:
    hw = profile.name
    return (
        f"no baseline for hardware '{hw}' at {path}. Create it with:\n"
        f'  pytest perftests --hw {hw} --update-baselines --reason "first baseline for {hw}"\n'
        f"or judge against another hardware's curve scaled to this one with "
        f"--provisional-from OTHER"
    )


def resolve(
    values: Mapping[str, Any], root: Path, *, mode: Mode_ = "gate", engine: str | None = None
) -> RunConfig:
    """Validate the options of a run against its profile; every error names the flag or file."""
    v = values
    extra = [Path(d) for d in v.get("profile_dir") or []]
    profile = profiles.load(v.get("hw") or DEFAULT_HW, extra)
    if engine:
        if engine not in ADAPTERS:
            raise ConfigError(f"--engine: unknown engine {engine!r}; known: {', '.join(ADAPTERS)}")
        profile = replace(profile, service=replace(profile.service, engine=engine))
    d = profile.defaults
    contexts = profile.sweep.contexts
    if v.get("contexts"):
        contexts = profiles.parse_contexts(str(v["contexts"]), "--perf-contexts")
    cache_mode: CacheMode = v.get("cache_mode") or "warm"
    from perftests.engines import check_cache_mode

    try:
        check_cache_mode(ADAPTERS[profile.service.engine], cache_mode)
    except ConfigError as e:
        raise ConfigError(f"{profile.path}: {e}") from None
    settings = Settings(
        contexts=contexts,
        repeats=_nonneg(v, "repeats", "--perf-repeats", d.repeats, positive=True),
        warmup=_nonneg(v, "warmup", "--perf-warmup", d.warmup),
        short_tokens=profile.sweep.short_tokens,
        long_tokens=profile.sweep.long_tokens,
        cache_mode=cache_mode,
        prompt_mode=v.get("prompt") or "corpus",
        seed=_nonneg(v, "seed", "--perf-seed", 0),
        stream_check=bool(v.get("stream_check")),
    )
    tol = v.get("tolerance")
    tol = d.tolerance if tol is None else tol
    if not 0 < tol < 1:
        raise ConfigError(f"--perf-tolerance: expected a fraction between 0 and 1, got {tol}")
    update = bool(v.get("update_baselines"))
    reason = (v.get("reason") or "").strip() or None
    if update and not reason:
        raise ConfigError('--update-baselines needs --reason "why the baseline changes"')
    urls = list(v.get("service_url") or [])
    if update and len(urls) > 1:
        raise ConfigError(
            "--update-baselines writes one hardware's baseline from one service: give a single --service-url"
        )
    attached = bool(urls or profile.service.url)
    if not attached and profile.service.launch is not None:
        adapter = ADAPTERS[profile.service.engine]
        if problems := adapter.launch_problems(profile.service.launch.argv):
            raise ConfigError(f"{profile.path}: service.launch.argv: " + "; ".join(problems))
    # Attached, a refresh cannot relaunch: its rounds would not show launch noise, so it takes
    # the gate's count unless --perf-launches asks for more.
    launches = _nonneg(
        v,
        "launches",
        "--perf-launches",
        d.refresh_launches if update and not attached else d.launches,
        positive=True,
    )
    api_key_from_env(v.get("api_key_env") or profile.service.api_key_env)  # set, or say so now
    api_key_from_env(profile.service.admin_api_key_env)
    warnings: list[str] = []
    notes: list[str] = []
    machine = functools.cache(fingerprint)  # nvidia-smi: once per run at most, only where needed
    if v.get("baseline"):
        path = Path(v["baseline"])
    else:
        path = profile.baseline_path(project_root(root))
        if mode != "ab" and bl.variants(path):
            # A machine variant made on this kind of machine, where the profile's file was made
            # on another: a CI pool of two VM types keeps one curve per type.
            try:
                path, why = bl.for_machine(path, profile.name, machine(), refresh=update)
            except ConfigError as e:
                raise ConfigError(f"baseline: {e}") from None
            notes += [why] if why else []
    stored = None if mode == "ab" else _load_baseline(path, "baseline")
    if v.get("baseline") and stored is None and not update and mode == "sweep":
        raise ConfigError(f"--perf-baseline: no such file {path}")
    provisional = None
    if stored is None and v.get("provisional_from") and not update and mode != "ab":
        other = profiles.load(v["provisional_from"], extra)
        opath = other.baseline_path(project_root(root))
        provisional = _load_baseline(opath, "--perf-provisional-from")
        if provisional is None:
            raise ConfigError(f"--perf-provisional-from: no baseline at {opath}")
    if stored is None and provisional is None and mode == "gate" and not update:
        raise ConfigError(missing_baseline(profile, path))
    if stored is not None and not update:
        hint = None if v.get("baseline") else variant_hint(profile.name, path)
        warnings += _check_against(stored, path, settings, d.fingerprint_mismatch, machine(), hint)
    pool = _nonneg(v, "pool_sessions", "--perf-pool-sessions", d.pool_sessions, positive=True)
    if v.get("pool_sessions") is not None and not update:
        raise ConfigError("--perf-pool-sessions: only with --update-baselines (it says what a refresh keeps)")
    if update and pool > 1 and stored is not None:
        # Checked now, not after the launches: a refresh that could not be pooled is refused
        # before anything is measured.
        launch = profile.service.launch
        problems = bl.pool_problems(
            stored,
            settings=settings.to_dict(),
            contexts=settings.contexts,
            engine=profile.service.engine,
            launch_argv=list(launch.argv) if launch and not attached else None,
            machine=machine(),
        )
        if problems:
            raise ConfigError(
                f"--perf-pool-sessions {pool} (or the profile's pool_sessions): cannot pool with "
                f"{path}: " + "; ".join(problems) + " (refresh with --perf-pool-sessions 1 to replace it)"
            )
    cfg = RunConfig(
        profile=profile,
        settings=settings,
        tolerance=float(tol),
        reruns=_nonneg(v, "reruns", "--perf-reruns", d.reruns),
        launches=launches,
        policy=Policy(inconclusive=d.inconclusive),
        launch_noise=d.launch_noise,
        shape_noise=d.shape_noise if d.shape_noise is not None else d.launch_noise,
        machine_tolerance=d.machine_tolerance,
        control=d.control and not v.get("no_control"),
        baseline_path=path,
        baseline=stored,
        provisional_source=provisional,
        update=update,
        reason=reason,
        service_url=urls[0] if urls else None,
        api_key_env=v.get("api_key_env"),
        log_dir=Path(v.get("log_dir") or ".perftests/logs"),
        warnings=tuple(warnings),
        notes=tuple(notes),
        pool_sessions=pool if update else 1,
        session_noise=d.session_noise if d.session_noise is not None else d.launch_noise,
    )
    return cfg


def variant_hint(hw: str, path: Path) -> str:
    """How to give this kind of machine a curve of its own beside the profile's."""
    return (
        f"To gate on this kind of machine, make it a baseline beside that one: pytest perftests "
        f"--hw {hw} --update-baselines --perf-baseline {bl.variant_template(path)} "
        f'--reason "..."; runs on a machine like this one then judge against it.'
    )


def _check_against(
    b: bl.Baseline, path: Path, s: Settings, policy: str, machine: dict[str, Any], hint: str | None = None
) -> list[str]:
    """The fingerprint policy and the measuring settings, against the stored baseline."""
    out = []
    diffs = b.fingerprint_differences(machine)
    if diffs and b.provenance.get("machine"):
        msg = (
            f"THIS MACHINE IS NOT THE BASELINE'S ({path}): "
            + "; ".join(diffs)
            + ". Figures may differ for that reason alone."
            + (f" {hint}" if hint else "")
        )
        if policy == "fail":
            raise ConfigError(msg + " The profile sets fingerprint_mismatch: fail.")
        out.append(msg)
    mine = {"short_tokens": s.short_tokens, "long_tokens": s.long_tokens, "cache_mode": s.cache_mode}
    diff = [
        f"{k} {b.settings[k]} -> {val}"
        for k, val in mine.items()
        if b.settings.get(k) is not None and b.settings[k] != val
    ]
    if diff:
        out.append("this run measures differently from the baseline: " + ", ".join(diff))
    if b.launches < 2:
        out.append(
            f"the baseline {path} is one launch: its between-launch noise is the profile's "
            f"assumed launch_noise, not measured; refresh it with several launches"
        )
    return out
