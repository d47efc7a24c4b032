"""Hardware profiles: one YAML file per hardware name, validated with file:line in every error.

A profile says how to reach or launch the service, which engine adapter speaks to it, which
context lengths to sweep, and the defaults the measurement and the gate use."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import yaml

from perftests.errors import ConfigError, UnknownProfileError

BUILTIN_DIR = Path(__file__).parent / "profiles"
PATH_ENV = "PERFTESTS_PROFILE_PATH"  # extra directories, os.pathsep-separated, searched first


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 300.0
    shutdown_grace_s: float = 10.0


@dataclass(frozen=True)
class ServiceSpec:
    engine: str
    url: str | None = None  # attach here unless --service-url overrides
    launch: LaunchSpec | None = None
    health_path: str = "/health"
    api_key_env: str | None = None
    admin_api_key_env: str | None = None  # SGLang 0.5.23 --admin-api-key: /flush_cache wants it
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 600.0
    model: str | None = None


@dataclass(frozen=True)
class SweepSpec:
    contexts: tuple[int, ...]
    short_tokens: int = 8
    long_tokens: int = 264


@dataclass(frozen=True)
class GateDefaults:
    repeats: int = 5
    warmup: int = 1
    tolerance: float = 0.05  # relative drop allowed before a point can fail
    baseline: str | None = None
    reruns: int = 2  # extra launches (attached: rounds) while a point is inconclusive
    inconclusive: str = "pass"  # pass (with a warning) | fail: what a still-inconclusive curve does
    fingerprint_mismatch: str = "warn"  # warn | fail: a run on other hardware than the baseline's
    launches: int = 1  # launches per gate run: each a fresh service, the unit of replication
    refresh_launches: int = 5  # launches per baseline refresh
    launch_noise: float = 0.05  # between-launch sd of log tok/s assumed where none is measured
    # Between-launch sd of log(tok/s at ctx / tok/s at the shortest ctx of the same launch);
    # None: launch_noise (the uniform part of the swing cancels, so this is an upper bound).
    shape_noise: float | None = None
    machine_tolerance: float = 0.15  # how far the machine control may sit outside the baseline's
    # Sessions (refreshes) a baseline refresh keeps, this one included: 1 replaces the stored
    # curve; more keep its launches as earlier sessions (machines, days) beside this one's.
    pool_sessions: int = 1
    # Between-session sd of log tok/s assumed beside a pooled baseline's measured one; None:
    # launch_noise.
    session_noise: float | None = None
    control: bool = True  # run the machine control before and after each launch


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    service: ServiceSpec
    sweep: SweepSpec
    defaults: GateDefaults

    def baseline_path(self, root: Path) -> Path:
        """The baseline file: `defaults.baseline`, else baselines/<name>.yaml, under `root`."""
        path = Path(self.defaults.baseline or f"baselines/{self.name}.yaml")
        return path if path.is_absolute() else root / path


def parse_contexts(text: str, flag: str) -> tuple[int, ...]:
    """`64,1024,4096` from a command line; errors name the flag."""
    try:
        values = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag}: expected integers separated by commas, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise ConfigError(f"{flag}: context lengths must be positive, got {text!r}")
    return values


def search_path(extra: list[Path] | None = None) -> list[Path]:
    dirs = list(extra or [])
    dirs += [Path(p) for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p]
    dirs.append(BUILTIN_DIR)
    return dirs


def available(extra: list[Path] | None = None) -> dict[str, Path]:
    """Known profile names and their files; an earlier directory shadows a later one."""
    found: dict[str, Path] = {}
    for d in reversed(search_path(extra)):
        if d.is_dir():
            found.update({p.stem: p for p in sorted(d.glob("*.yaml"))})
    return dict(sorted(found.items()))


def load(name_or_path: str, extra: list[Path] | None = None) -> Profile:
    """Load a profile by hardware name (or by path to a YAML file)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return parse_file(p)
    known = available(extra)
    if name_or_path not in known:
        names = ", ".join(known) or "(none)"
        raise UnknownProfileError(f"unknown hardware profile '{name_or_path}'; known: {names}")
    return parse_file(known[name_or_path])


# -- parsing with line numbers ------------------------------------------------------------


class _Doc:
    """The parsed data plus a map from field path to line, for errors a user can act on."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            line = f":{mark.line + 1}" if mark else ""
            raise ConfigError(f"{path}{line}: malformed YAML: {e.problem}") from None
        self.lines: dict[str, int] = {}
        if node is not None:
            self._index(node, "")
        if not isinstance(self.data, dict):
            raise ConfigError(f"{path}:1: a profile must be a mapping of fields")

    def _index(self, node: yaml.Node, prefix: str) -> None:
        self.lines.setdefault(prefix, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                self.lines[key] = k.start_mark.line + 1
                self._index(v, key)

    def error(self, key: str, msg: str) -> ConfigError:
        line = self.lines.get(key)
        while line is None and "." in key:
            key_parent = key.rsplit(".", 1)[0]
            line = self.lines.get(key_parent)
            key = key_parent
        return ConfigError(f"{self.path}:{line or 1}: field '{key}': {msg}")

    def get(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, positive: bool = False
    ) -> Any:
        cur: Any = self.data
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                if default is ...:
                    raise self.error(key, "is required")
                return default
            cur = cur[part]
        if cur is None and default is not ... and default is None:
            return None
        # bool is an int in Python; a YAML `true` where a number belongs is a mistake.
        if not isinstance(cur, kind) or (isinstance(cur, bool) and bool not in _as_tuple(kind)):
            raise self.error(key, f"expected {_kind_name(kind)}, got {type(cur).__name__} {cur!r}")
        if positive and cur <= 0:  # type: ignore[operator]  # a number, checked above
            raise self.error(key, f"must be positive, got {cur!r}")
        return cur

    def check_keys(self, prefix: str, allowed: set[str]) -> None:
        cur = self.data if not prefix else self.get(prefix, dict, {})
        for k in cur or {}:
            if k not in allowed:
                key = f"{prefix}.{k}" if prefix else str(k)
                raise self.error(key, f"unknown field; expected one of {sorted(allowed)}")


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        bool: "true or false",
    }
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


def _choice(doc: _Doc, key: str, allowed: tuple[str, ...], default: str) -> str:
    value = doc.get(key, str, default)
    if value not in allowed:
        raise doc.error(key, f"expected one of {', '.join(allowed)}, got {value!r}")
    return value


@overload
def _fraction(doc: _Doc, key: str, default: float) -> float: ...
@overload
def _fraction(doc: _Doc, key: str, default: None) -> float | None: ...
def _fraction(doc: _Doc, key: str, default: float | None) -> float | None:
    raw = doc.get(key, (int, float), default)
    if raw is None:
        return None
    value = float(raw)
    if not 0 < value < 1:
        raise doc.error(key, f"must be a fraction between 0 and 1, got {value}")
    return value


def parse_file(path: Path) -> Profile:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read profile: {e.strerror}") from None
    doc = _Doc(path, text)
    from perftests.engines import ADAPTERS  # late: engines import httpx, profiles need not

    doc.check_keys("", {"name", "description", "engine", "service", "sweep", "defaults"})
    doc.check_keys(
        "service",
        {"url", "launch", "health_path", "api_key_env", "admin_api_key_env", "timeouts", "model"},
    )
    doc.check_keys("service.launch", {"argv", "env", "startup_timeout_s", "shutdown_grace_s"})
    doc.check_keys("service.timeouts", {"connect_s", "request_s"})
    doc.check_keys("sweep", {"contexts", "short_tokens", "long_tokens"})
    doc.check_keys(
        "defaults",
        {
            "repeats",
            "warmup",
            "tolerance",
            "baseline",
            "reruns",
            "inconclusive",
            "fingerprint_mismatch",
            "launches",
            "refresh_launches",
            "launch_noise",
            "shape_noise",
            "machine_tolerance",
            "control",
            "pool_sessions",
            "session_noise",
        },
    )

    name = doc.get("name", str, path.stem)
    if name != path.stem:
        raise doc.error("name", f"'{name}' differs from the file name '{path.stem}'")
    engine = doc.get("engine", str)
    if engine not in ADAPTERS:
        raise doc.error("engine", f"unknown engine '{engine}'; known: {', '.join(ADAPTERS)}")

    launch = None
    if doc.get("service.launch", dict, None) is not None:
        argv = doc.get("service.launch.argv", list)
        if not argv or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv):
            raise doc.error("service.launch.argv", "expected a non-empty list of strings")
        env = doc.get("service.launch.env", dict, {})
        if not all(isinstance(v, (str, int, float)) for v in env.values()):
            raise doc.error("service.launch.env", "values must be strings")
        launch = LaunchSpec(
            argv=tuple(str(a) for a in argv),
            env={str(k): str(v) for k, v in env.items()},
            startup_timeout_s=float(
                doc.get("service.launch.startup_timeout_s", (int, float), 300, positive=True)
            ),
            shutdown_grace_s=float(
                doc.get("service.launch.shutdown_grace_s", (int, float), 10, positive=True)
            ),
        )
    url = doc.get("service.url", str, None)
    if launch is None and url is None:
        raise doc.error("service", "needs 'launch' or 'url' (or pass --service-url)")
    health = doc.get("service.health_path", str, "/health")
    if not health.startswith("/"):
        raise doc.error("service.health_path", f"must start with '/', got {health!r}")
    service = ServiceSpec(
        engine=engine,
        url=url,
        launch=launch,
        health_path=health,
        api_key_env=doc.get("service.api_key_env", str, None),
        admin_api_key_env=doc.get("service.admin_api_key_env", str, None),
        connect_timeout_s=float(doc.get("service.timeouts.connect_s", (int, float), 5.0, positive=True)),
        request_timeout_s=float(doc.get("service.timeouts.request_s", (int, float), 600.0, positive=True)),
        model=doc.get("service.model", str, None),
    )

    contexts = doc.get("sweep.contexts", list)
    if not contexts or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in contexts):
        raise doc.error("sweep.contexts", f"expected a non-empty list of positive integers, got {contexts!r}")
    if len(set(contexts)) != len(contexts):
        raise doc.error("sweep.contexts", "has duplicates")
    short = doc.get("sweep.short_tokens", int, 8, positive=True)
    long = doc.get("sweep.long_tokens", int, 264, positive=True)
    if long <= short:
        raise doc.error("sweep.long_tokens", f"must exceed short_tokens ({short}), got {long}")
    sweep = SweepSpec(contexts=tuple(sorted(contexts)), short_tokens=short, long_tokens=long)

    tol = float(doc.get("defaults.tolerance", (int, float), 0.05))
    if not 0 < tol < 1:
        raise doc.error("defaults.tolerance", f"must be a fraction between 0 and 1, got {tol}")
    defaults = GateDefaults(
        repeats=doc.get("defaults.repeats", int, 5, positive=True),
        warmup=doc.get("defaults.warmup", int, 1),
        tolerance=tol,
        baseline=doc.get("defaults.baseline", str, None),
        reruns=doc.get("defaults.reruns", int, 2),
        inconclusive=_choice(doc, "defaults.inconclusive", ("pass", "fail"), "pass"),
        fingerprint_mismatch=_choice(doc, "defaults.fingerprint_mismatch", ("warn", "fail"), "warn"),
        launches=doc.get("defaults.launches", int, 1, positive=True),
        refresh_launches=doc.get("defaults.refresh_launches", int, 5, positive=True),
        launch_noise=_fraction(doc, "defaults.launch_noise", 0.05),
        shape_noise=_fraction(doc, "defaults.shape_noise", None),
        machine_tolerance=_fraction(doc, "defaults.machine_tolerance", 0.15),
        control=doc.get("defaults.control", bool, True),
        pool_sessions=doc.get("defaults.pool_sessions", int, 1, positive=True),
        session_noise=_fraction(doc, "defaults.session_noise", None),
    )
    if defaults.reruns < 0 or defaults.warmup < 0:
        raise doc.error(
            "defaults.reruns" if defaults.reruns < 0 else "defaults.warmup", "must not be negative"
        )
    return Profile(
        name=name,
        path=path,
        description=doc.get("description", str, ""),
        service=service,
        sweep=sweep,
        defaults=defaults,
    )
