"""Baseline curves: one human-diffable YAML file per hardware profile, with provenance and history.

Writes are atomic (temporary file in the same directory, fsync, rename) under an exclusive lock,
so an interrupted refresh leaves the old file byte-identical and two refreshes at once leave one
whole file, never a mix. Reads validate every value and name the file and field when one is bad."""

from __future__ import annotations

import dataclasses
import fcntl
import math
import os
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from perftests.control import ControlRange
from perftests.errors import ConfigError
from perftests.estimate import estimates, geomean, log_sd
from perftests.machine import hardware_key
from perftests.scaling import ScalingModel, fit_curve, split_band

if TYPE_CHECKING:
    from perftests.control.readings import Reading
    from perftests.measure import Point
    from perftests.record import RunRecord

SCHEMA = "perftests.baseline/2"
READABLE = ("perftests.baseline/1", SCHEMA)  # /1: one launch, no per-launch medians, no control
HISTORY_KEEP = 20


@dataclass(frozen=True)
class BaselinePoint:
    context: int
    tps: float
    tps_mad: float
    n: int
    acceptance_length: float | None = None
    step_ms: float | None = None
    launch_tps: tuple[float, ...] = ()  # each launch's median; empty in a one-launch /1 file
    # The session (one refresh: one machine, one day) of each launch, in a baseline pooled over
    # several refreshes (--perf-pool-sessions); empty: all launches are one session.
    launch_session: tuple[int, ...] = ()

    @property
    def launches(self) -> int:
        return max(1, len(self.launch_tps))

    def groups(self) -> list[tuple[float, ...]]:
        """The launch medians per session, oldest session first."""
        if not self.launch_session:
            return [self.launch_tps] if self.launch_tps else [(self.tps,)]
        out: dict[int, list[float]] = {}
        for s, x in zip(self.launch_session, self.launch_tps, strict=True):
            out.setdefault(s, []).append(x)
        return [tuple(out[s]) for s in sorted(out)]

    @property
    def sessions(self) -> int:
        return len(self.groups())

    @property
    def launch_df(self) -> int:
        """Degrees of freedom of `launch_sd`: launches less one per session."""
        return sum(len(g) - 1 for g in self.groups())

    @property
    def launch_sd(self) -> float | None:
        """Spread between the launches' medians (sd of their logs) within a session, pooled over
        the sessions; None with no session of two launches."""
        if self.sessions == 1:
            return log_sd(self.launch_tps)
        df = self.launch_df
        if df == 0:
            return None
        ss = 0.0
        for g in self.groups():
            logs = [math.log(x) for x in g]
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
        return math.sqrt(ss / df)

    @property
    def session_means_var(self) -> float | None:
        """Variance of the sessions' mean log tok/s (S - 1 degrees of freedom); None with one."""
        groups = self.groups()
        if len(groups) < 2:
            return None
        means = [sum(math.log(x) for x in g) / len(g) for g in groups]
        mu = sum(means) / len(means)
        return sum((m - mu) ** 2 for m in means) / (len(means) - 1)

    @property
    def session_sd(self) -> float | None:
        """Spread between sessions beyond what their launches' own spread explains: the sd of
        the session means' logs less the within-session part (one-way random effects, method of
        moments, floored at zero); None with one session."""
        var_means = self.session_means_var
        if var_means is None:
            return None
        within = (self.launch_sd or 0.0) ** 2 * self.inv_launches
        return math.sqrt(max(var_means - within, 0.0))

    @property
    def inv_launches(self) -> float:
        """Mean over the sessions of 1 / their launches (what a session mean's launch noise is)."""
        groups = self.groups()
        return sum(1 / len(g) for g in groups) / len(groups)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "context": self.context,
            "tps": round(self.tps, 3),
            "tps_mad": round(self.tps_mad, 3),
            "n": self.n,
        }
        if self.launch_tps:
            d["launch_tps"] = [round(x, 3) for x in self.launch_tps]
        if self.launch_session and self.sessions > 1:
            d["launch_session"] = list(self.launch_session)
        if self.acceptance_length is not None:
            d["acceptance_length"] = round(self.acceptance_length, 4)
        if self.step_ms is not None:
            d["step_ms"] = round(self.step_ms, 4)
        return d


@dataclass
class Baseline:
    hardware: str
    points: list[BaselinePoint]
    model: ScalingModel
    created: str
    reason: str
    provenance: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    provisional: bool = False
    path: Path | None = None
    control: ControlRange | None = None  # the machine control over the baseline's launches
    # One entry per pooled session (created, commit, machine, launches), oldest first; empty
    # for a baseline of one session (the file's own created / provenance say it).
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def launches(self) -> int:
        return max((p.launches for p in self.points), default=1)

    @property
    def session_count(self) -> int:
        return max((p.sessions for p in self.points), default=1)

    def point(self, ctx: int) -> BaselinePoint | None:
        return next((p for p in self.points if p.context == ctx), None)

    @property
    def contexts(self) -> tuple[int, ...]:
        return tuple(p.context for p in self.points)

    def fingerprint_differences(self, machine: dict[str, Any]) -> list[str]:
        """What differs between the machine that made this baseline and `machine`."""
        mine = hardware_key(self.provenance.get("machine", {}))
        theirs = hardware_key(machine)
        return [f"{k}: baseline {mine[k]!r}, this run {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "hardware": self.hardware,
            "provisional": self.provisional,
            "created": self.created,
            "reason": self.reason,
            "provenance": self.provenance,
            "settings": self.settings,
            "launches": self.launches,
            "points": [p.to_dict() for p in self.points],
            "model": {
                k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.model.to_dict().items()
            },
            "control": self.control.to_dict() if self.control else None,
            **({"sessions": self.sessions} if self.sessions else {}),
            "history": self.history,
        }


# -- building from a run ------------------------------------------------------------------


def from_record(record: RunRecord, *, reason: str, previous: Baseline | None = None) -> Baseline:
    """A baseline from a valid run of one or more launches. Refuses a run with errors or an
    invalid point: per context it stores the launches' medians, their geometric mean and spread."""
    if record.errors:
        raise ConfigError(f"refusing to refresh the baseline from a run with errors: {record.errors[0]}")
    if not reason.strip():
        raise ConfigError('a baseline refresh needs a reason (--reason "...")')
    ests = estimates(record.points, rounds=not record.launched)
    for ctx in sorted({p.context for p in record.points}):
        if ctx not in ests or not math.isfinite(ests[ctx].tps) or ests[ctx].tps <= 0:
            raise ConfigError(f"refusing to refresh: ctx={ctx} has no valid measurement")
    points: list[BaselinePoint] = []
    for ctx, e in ests.items():
        mads = [p.tps().mad for p in record.points if p.context == ctx and p.tps().n]
        points.append(
            BaselinePoint(
                ctx,
                e.tps,
                float(sorted(mads)[len(mads) // 2]),
                e.pairs,
                e.acceptance,
                e.step_ms,
                e.launch_tps if record.launched else (),
            )
        )
    if len(points) < 2:
        raise ConfigError(
            f"refusing to refresh: a baseline curve needs at least two context "
            f"lengths, the run measured {len(points)}"
        )
    model = fit_curve(
        [p.context for p in points], [p.tps for p in points], [p.acceptance_length for p in points]
    )
    history = history_after(previous)
    server = record.server or {}
    provenance = {
        "engine": record.engine,
        "engine_version": server.get("version"),
        "server_args": server.get("args"),
        "model": server.get("model"),
        "launch_argv": record.settings.get("launch_argv"),
        "launch_env": record.settings.get("launch_env"),
        "service_url": record.service_url,
        "machine": record.machine,
        "commit": record.commit,
        "tool_version": record.tool_version,
        "user": os.environ.get("GITHUB_ACTOR") or os.environ.get("USER"),
    }
    settings = {
        k: record.settings.get(k)
        for k in ("short_tokens", "long_tokens", "repeats", "cache_mode", "prompt_mode")
    }
    return Baseline(
        hardware=record.profile,
        points=points,
        model=model,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        reason=reason.strip(),
        provenance=provenance,
        settings=settings,
        history=history,
        control=ControlRange.of(record.control) if record.control else None,
    )


def history_after(previous: Baseline | None) -> list[dict[str, Any]]:
    """The history of a file that replaces `previous`: its entry first, then its own history."""
    if previous is None:
        return []
    entry = {
        "created": previous.created,
        "reason": previous.reason,
        "commit": previous.provenance.get("commit"),
        "points": {p.context: round(p.tps, 3) for p in previous.points},
    }
    return [entry, *previous.history][:HISTORY_KEEP]


# Outcomes whose launches are not taken into a session: a broken run's (or a busy or other
# machine's) are not figures of the service; a regression's only when asked (--include-failed:
# an A/A false alarm is part of the spread, a real regression's launches would move the curve).
NOT_UNCHANGED = ("regression", "invalid measurement", "run error", "machine")
# Records further apart than this are two sessions, not one: a lease of the lent GPU lasts at
# most 30 minutes and a refresh job minutes, while leases of one day were 3 hours apart.
SESSION_GAP_S = 2 * 3600
# A refresh whose baseline was refused (run.py): its launches were measured with no error on a
# machine the control passed (a refresh writes only then), so they can still make a session.
UNWRITTEN = "baseline not written: "


def as_compared(value: object) -> object:
    """A path by its file name, anything else as it is: a model directory or cache home differs
    between machines and users, not the model (a reference model's file name holds its recipe's
    digest; a served model's directory is named for it)."""
    if isinstance(value, str) and value.startswith("/"):
        return value.rstrip("/").rsplit("/", 1)[-1]
    return value


def created_at(text: str | None) -> datetime | None:
    """A record's or baseline's `created` as a time (None if it is not in the written form)."""
    try:
        return datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def session_from_records(
    records: Sequence[RunRecord], names: Sequence[str], *, include_failed: bool = False
) -> Baseline:
    """One session (one machine, one lease or day) from run records of the unchanged service:
    their kept launches in order, as one refresh of that many launches would have stored them.
    The records of gate runs qualify: each is a fresh launch or more. `names` name the records
    in the errors, which say what does not fit before anything is built."""
    if not records:
        raise ConfigError("a session needs at least one run record")
    first, n0 = records[0], names[0]
    for r, name in zip(records, names, strict=True):
        why = None
        # a refresh refused at the write (UNWRITTEN) is a clean session, unless it was refused
        # for a context it did not measure
        unwritten = (
            bool(r.errors)
            and all(e.startswith(UNWRITTEN) for e in r.errors)
            and set(r.settings.get("contexts") or ()) <= {p.context for p in r.points}
        )
        if r.ab is not None:
            why = "an A/B campaign's record (two services)"
        elif not r.launched:
            why = "it attached to a running service: its rounds are not launches"
        elif r.errors and not unwritten:
            why = f"it has errors ({r.errors[0]})"
        elif r.outcome and r.outcome.kind.value in NOT_UNCHANGED and not unwritten:
            kind = r.outcome.kind.value
            if kind != "regression":
                why = f"its outcome is {kind!r}: its launches are not figures of the service"
            elif not include_failed:
                why = (
                    "its outcome is 'regression': a failed run's launches are not the unchanged"
                    " service's (--include-failed takes an A/A false alarm anyway)"
                )
        elif not r.points:
            why = "it has no kept launch"
        if why:
            raise ConfigError(f"{name}: cannot go into a baseline: {why}")
        if r is first:
            continue
        diffs = []
        for label, a, b in (
            ("profile", first.profile, r.profile),
            ("engine", first.engine, r.engine),
            ("engine version", (first.server or {}).get("version"), (r.server or {}).get("version")),
            (
                "model",
                as_compared((first.server or {}).get("model")),
                as_compared((r.server or {}).get("model")),
            ),
            ("launch argv", first.settings.get("launch_argv"), r.settings.get("launch_argv")),
            ("contexts", sorted({p.context for p in first.points}), sorted({p.context for p in r.points})),
            ("machine", hardware_key(first.machine), hardware_key(r.machine)),
            *((f"settings.{k}", first.settings.get(k), r.settings.get(k)) for k in POOLED_SETTINGS),
        ):
            if a != b:
                diffs.append(f"{label} {b!r}, {n0} {a!r}")
        if diffs:
            raise ConfigError(f"{name}: not of one session with {n0}: " + "; ".join(diffs))
    timed = sorted(
        (t, name, r.created) for r, name in zip(records, names, strict=True) if (t := created_at(r.created))
    )
    for (t0, earlier, _), (t1, later, _) in zip(timed, timed[1:], strict=False):
        if (t1 - t0).total_seconds() > SESSION_GAP_S:
            raise ConfigError(
                f"{later}: made {(t1 - t0).total_seconds() / 3600:.1f} h after {earlier}: records more than "
                f"{SESSION_GAP_S // 3600} h apart are two sessions (give each its own --session)"
            )
    points: list[Point] = []
    readings: list[Reading] = []
    n = 0
    for r in records:
        kept = sorted({p.launch for p in r.points})
        remap = {old: n + i for i, old in enumerate(kept)}
        points += [dataclasses.replace(p, launch=remap[p.launch]) for p in r.points]
        readings += [dataclasses.replace(x, launch=remap[x.launch]) for x in r.control if x.launch in remap]
        n += len(kept)
    merged = dataclasses.replace(first, points=points, control=readings, errors=[], launches=[])
    b = from_record(merged, reason=f"{n} launches from run records: " + ", ".join(names))
    # the session's date is its first launches', not today's
    return dataclasses.replace(b, created=timed[0][2] if timed else first.created)


# -- pooling sessions ----------------------------------------------------------------------

POOLED_SETTINGS = ("short_tokens", "long_tokens", "repeats", "cache_mode", "prompt_mode")


def pool_problems(
    previous: Baseline,
    *,
    settings: dict[str, Any],
    contexts: Sequence[int],
    engine: str | None,
    launch_argv: Sequence[str] | None,
    machine: dict[str, Any] | None = None,
) -> list[str]:
    """Why `previous`'s launches cannot be pooled with a run measured as given: pooled launches
    must be the same service measured the same way, only on another machine of the same kind
    (the machine control ends a run across kinds MACHINE DIFFERS) or another day."""
    out = []
    if machine is not None and not previous.provenance.get("machine"):
        out.append("its provenance records no machine")
    elif machine is not None:
        was, now = serving_hardware(previous.provenance.get("machine") or {}), serving_hardware(machine)
        if was != now:
            out.append(f"it was measured on {was}, this run on {now}")
    if previous.provisional or previous.provenance.get("imported"):
        out.append("it is provisional or imported, not launches measured by this tool")
    if previous.provenance.get("engine") != engine:
        out.append(f"engine {previous.provenance.get('engine')!r}, this run {engine!r}")
    theirs = previous.provenance.get("launch_argv")
    if launch_argv is None:
        out.append("this run attaches to a running service: its rounds are not launches")
    elif theirs is None:
        out.append("its provenance records no launch argv (attached, or written before it was)")
    elif list(theirs) != list(launch_argv):
        out.append("its launch argv is not this profile's (a different service)")
    for k in POOLED_SETTINGS:
        if previous.settings.get(k) != settings.get(k):
            out.append(f"settings.{k} {previous.settings.get(k)!r}, this run {settings.get(k)!r}")
    if sorted(previous.contexts) != sorted(contexts):
        out.append(
            f"contexts {', '.join(map(str, previous.contexts))}, this run "
            f"{', '.join(map(str, sorted(contexts)))}"
        )
    return out


def serving_hardware(fp: dict[str, Any]) -> str:
    """What decides a curve: the GPUs' models where there are GPUs (a runner's CPU or driver may
    change between leases; the gate only warns of those), else the CPU's."""
    gpus = [str(g.get("name")) for g in fp.get("gpus") or []]
    if gpus:
        return " + ".join(gpus)
    return f"{fp.get('cpu_model')} ({fp.get('cpu_count')} CPUs)"


def variants(path: Path) -> list[Path]:
    """The machine variants stored beside a profile's baseline: `<stem>@<name>.yaml`, the same
    hardware profile's curve made on another kind of machine (a CI pool of two VM types)."""
    return sorted(path.parent.glob(f"{path.stem}@*.yaml")) if path.parent.is_dir() else []


def variant_template(path: Path) -> Path:
    """The name a new machine variant of `path` (the profile's file or a variant) takes."""
    return path.parent / (path.stem.split("@")[0] + "@NAME.yaml")


def machine_match(recorded: dict[str, Any] | None, machine: dict[str, Any]) -> int:
    """How far a baseline's recorded machine is `machine`: 2 the same (hardware_key: CPU model
    and count, GPUs and driver), 1 the same serving hardware (serving_hardware: the GPUs'
    models, else the CPU; a runner's driver or host CPU may change between leases), 0 another."""
    if not recorded:
        return 0
    if hardware_key(recorded) == hardware_key(machine):
        return 2
    return 1 if serving_hardware(recorded) == serving_hardware(machine) else 0


def for_machine(
    path: Path, hardware: str, machine: dict[str, Any], *, refresh: bool = False
) -> tuple[Path, str | None]:
    """The file a run on `machine` is judged against (or a refresh writes): the profile's
    baseline `path`, unless a variant beside it (variants()) was made on a machine more like this
    one (machine_match; the profile's file wins a tie). Returns the file and, for a variant, a
    line saying why. Refused, naming the files: a variant of another hardware profile, two
    variants equally like this machine, and a refresh that would write this machine's curve over
    the profile's file made on another kind of machine while variants keep other kinds apart."""
    found = variants(path)
    if not found:
        return path, None
    default = load(path) if path.exists() else None
    scored: list[tuple[int, Path]] = []
    for v in found:  # all checked, so a stray file is an error on every machine alike
        b = load(v)
        if b.hardware != hardware:
            raise ConfigError(
                f"{v}: a baseline of {b.hardware!r} named as a machine variant of {path.name} "
                f"(the baseline of {hardware!r}): rename or remove it"
            )
        if not b.provenance.get("imported") and not b.provisional:
            scored.append((machine_match(b.provenance.get("machine"), machine), v))
    mine = machine_match(default.provenance.get("machine"), machine) if default else 0
    best = max((m for m, _ in scored), default=0)
    here = serving_hardware(machine)
    if best == 0 or mine >= best:
        if refresh and default is not None and mine == 0 and default.provenance.get("machine"):
            raise ConfigError(
                f"{path} was made on {serving_hardware(default.provenance['machine'])}, and machine "
                f"variants beside it ({', '.join(v.name for v in found)}) keep other kinds apart: a "
                f"refresh on this one ({here}) would replace it. Say which file: --perf-baseline "
                f"{variant_template(path)} for this kind of machine, or "
                f"--perf-baseline {path} to replace it"
            )
        return path, None
    tied = [v for m, v in scored if m == best]
    if len(tied) > 1:
        raise ConfigError(
            f"machine variants {', '.join(str(v) for v in tied)} were all made on a machine like "
            f"this one ({here}): keep one, or name it with --perf-baseline"
        )
    made = default.provenance.get("machine") if default else None
    other = serving_hardware(made) if made else None
    return tied[0], (
        f"baseline {tied[0].name}: made on a machine like this one ({here})"
        + (
            f"; {path.name} was made on {other}"
            if other
            else f"; {path.name} records no machine"
            if default
            else f"; there is no {path.name}"
        )
    )


def _session_entry(b: Baseline) -> dict[str, Any]:
    machine = b.provenance.get("machine") or {}
    return {
        "created": b.created,
        "commit": b.provenance.get("commit"),
        "hostname": machine.get("hostname"),
        "gpus": [g.get("name") for g in machine.get("gpus") or []],
        "launches": b.launches,
        "reason": b.reason,
        "control": b.control.to_dict() if b.control else None,
    }


def pool(
    new: Baseline,
    previous: Baseline,
    *,
    keep: int,
    what: str = "this refresh",
    against: str | None = None,
    hint: str = (
        "refresh with --perf-pool-sessions 1 to replace it; this run's record keeps its launches, "
        "and `perftests baseline pool --session` takes it"
    ),
) -> Baseline:
    """`new` (one refresh's launches) with `previous`'s sessions before it, the oldest dropped
    beyond `keep` sessions in all. Each point's figure is the geometric mean of the sessions'
    means, each session weighing the same, so one long refresh does not outweigh the others."""
    problems = pool_problems(
        previous,
        settings=new.settings,
        contexts=new.contexts,
        engine=new.provenance.get("engine"),
        launch_argv=new.provenance.get("launch_argv"),
        machine=new.provenance.get("machine"),
    )
    if not new.provenance.get("machine"):
        problems.append("this run records no machine")
    if new.provisional or new.provenance.get("imported"):
        problems.append("this run is provisional or imported, not launches measured by this tool")
    for k in ("engine_version", "model"):
        if as_compared(previous.provenance.get(k)) != as_compared(new.provenance.get(k)):
            problems.append(f"{k} {previous.provenance.get(k)!r}, this run {new.provenance.get(k)!r}")
    if problems:
        raise ConfigError(
            f"cannot pool {what} with {against or previous.path or 'the stored baseline'}: "
            + "; ".join(problems)
            + f" ({hint})"
        )
    old_sessions = previous.sessions or [_session_entry(previous)]
    drop = max(0, len(old_sessions) + 1 - keep)
    sessions = [*old_sessions[drop:], _session_entry(new)]
    points = []
    for p in new.points:
        o = previous.point(p.context)
        assert o is not None  # pool_problems checked the contexts
        kept = o.groups()[drop:]
        groups = [*kept, p.launch_tps or (p.tps,)]
        # pairs behind the kept sessions: the measuring settings are the same (checked), so in
        # proportion to their launches
        n_old = round(o.n * sum(len(g) for g in kept) / max(sum(len(g) for g in o.groups()), 1))
        points.append(
            dataclasses.replace(
                p,
                tps=geomean([geomean(g) for g in groups]),
                n=p.n + n_old,
                launch_tps=tuple(x for g in groups for x in g),
                launch_session=tuple(i for i, g in enumerate(groups) for _ in g),
            )
        )
    controls = [ControlRange.from_dict(s["control"]) for s in sessions if isinstance(s.get("control"), dict)]
    model = fit_curve(
        [p.context for p in points], [p.tps for p in points], [p.acceptance_length for p in points]
    )
    return dataclasses.replace(
        new,
        points=points,
        model=model,
        control=ControlRange.merged(controls) if controls else new.control,
        sessions=sessions,
    )


SPLIT_FACTOR = 2.0  # how differently two machines may split constant / context cost (assumed)


def provisional_from(
    other: Baseline, hardware: str, ctx: int, measured_tps: float, *, split_factor: float = SPLIT_FACTOR
) -> Baseline:
    """Another hardware's curve shape, scaled to this hardware's measured point at `ctx`
    (the B300 -> PRO 6000 extrapolation). Marked provisional wherever it is shown; the points
    are the plain scaling, and `provisional_band` the band over the splits allowed."""
    ref = other.point(ctx)
    ref_tps = ref.tps if ref else other.model.tps(ctx)
    k = measured_tps / ref_tps
    points = [
        BaselinePoint(
            p.context,
            p.tps * k,
            p.tps_mad * k,
            p.n,
            p.acceptance_length,
            p.step_ms / k if p.step_ms else None,
            tuple(x * k for x in p.launch_tps),
            p.launch_session,
        )
        for p in other.points
    ]
    m = other.model
    model = ScalingModel(
        m.kind, m.a_ms / k, m.b_ms_per_token / k, m.r2, m.max_rel_residual, m.acceptance_length, m.contexts
    )
    return Baseline(
        hardware=hardware,
        points=points,
        model=model,
        created=other.created,
        reason=f"PROVISIONAL: {other.hardware}'s curve scaled by {k:.3f} to this "
        f"hardware's {measured_tps:.1f} tok/s at ctx={ctx}",
        provenance={
            "scaled_from": other.hardware,
            "scale": k,
            "anchor_context": ctx,
            "anchor_tps": measured_tps,
            "split_factor": split_factor,
            "other_model": {"a_ms": m.a_ms, "b_ms_per_token": m.b_ms_per_token},
        },
        provisional=True,
    )


def provisional_band(b: Baseline, ctx: int) -> tuple[float, float] | None:
    """(low, high) tok/s a provisional curve allows at ctx, over the splits allowed; None for a
    measured curve (or a provisional one written before the band existed)."""
    pv = b.provenance
    om = pv.get("other_model")
    if not b.provisional or not isinstance(om, dict) or "anchor_tps" not in pv:
        return None
    _, low, high = split_band(
        float(om["a_ms"]),
        float(om["b_ms_per_token"]),
        int(pv["anchor_context"]),
        float(pv["anchor_tps"]),
        ctx,
        float(pv.get("split_factor") or SPLIT_FACTOR),
    )
    return low, high


# -- reading ------------------------------------------------------------------------------


def _num(
    path: Path | str,
    d: dict[str, Any],
    key: str,
    where: str,
    *,
    positive: bool = True,
    optional: bool = False,
) -> float | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{path}: field '{where}.{key}': expected a number, got {v!r}")
    if positive and v <= 0:
        raise ConfigError(f"{path}: field '{where}.{key}': must be positive, got {v!r}")
    if not positive and v < 0:
        raise ConfigError(f"{path}: field '{where}.{key}': must not be negative, got {v!r}")
    return float(v)


def load(path: Path) -> Baseline:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ConfigError(f"{path}: cannot read baseline: {e.strerror}") from None
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: corrupt baseline YAML: {getattr(e, 'problem', e)}") from None
    b = from_dict(d, path)
    b.path = path
    return b


def from_dict(d: Any, path: Path | str) -> Baseline:
    """A baseline from its plain data (a file's YAML, or a run record's copy), every field
    checked; errors name `path` and the field."""
    if not isinstance(d, dict) or d.get("schema") not in READABLE:
        got = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise ConfigError(
            f"{path}: not a baseline file (schema {got!r}, expected {SCHEMA}); "
            "truncated or corrupt? Restore it from git or refresh it"
        )
    raw_points = d.get("points")
    if not isinstance(raw_points, list) or len(raw_points) < 2:
        raise ConfigError(f"{path}: field 'points': expected a list of at least two points")
    points = []
    for i, p in enumerate(raw_points):
        where = f"points[{i}]"
        if not isinstance(p, dict):
            raise ConfigError(f"{path}: field '{where}': expected a mapping")
        ctx = p.get("context")
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx <= 0:
            raise ConfigError(f"{path}: field '{where}.context': expected a positive integer, got {ctx!r}")
        n = p.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{path}: field '{where}.n': expected a positive integer, got {n!r}")
        launch_tps = p.get("launch_tps") or []
        if not isinstance(launch_tps, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in launch_tps
        ):
            raise ConfigError(f"{path}: field '{where}.launch_tps': expected a list of positive numbers")
        launch_session = p.get("launch_session") or []
        if (
            not isinstance(launch_session, list)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in launch_session)
            or (launch_session and len(launch_session) != len(launch_tps))
        ):
            raise ConfigError(
                f"{path}: field '{where}.launch_session': expected a session index (0, 1, ...) "
                "for each of launch_tps"
            )
        tps, mad = _num(path, p, "tps", where), _num(path, p, "tps_mad", where, positive=False)
        assert tps is not None and mad is not None  # required fields: _num raised otherwise
        points.append(
            BaselinePoint(
                ctx,
                tps,
                mad,
                n,
                _num(path, p, "acceptance_length", where, optional=True),
                _num(path, p, "step_ms", where, optional=True),
                tuple(float(x) for x in launch_tps),
                tuple(launch_session),
            )
        )
    if len({p.context for p in points}) != len(points):
        raise ConfigError(f"{path}: field 'points': duplicate context lengths")
    m = d.get("model")
    if not isinstance(m, dict):
        raise ConfigError(f"{path}: field 'model': missing; refresh the baseline to fit it")
    try:
        model = ScalingModel.from_dict(m)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: field 'model': malformed ({e})") from None
    _num(path, m, "a_ms", "model", positive=False)
    _num(path, m, "b_ms_per_token", "model", positive=False)
    if model.a_ms + model.b_ms_per_token <= 0:
        raise ConfigError(f"{path}: field 'model': a_ms and b_ms_per_token are both zero")
    control = None
    if d.get("control") is not None:
        if not isinstance(d["control"], dict):
            raise ConfigError(f"{path}: field 'control': expected a mapping")
        try:
            control = ControlRange.from_dict(d["control"])
        except ValueError as e:
            raise ConfigError(f"{path}: field 'control': {e}") from None
    sessions = d.get("sessions") or []
    if not isinstance(sessions, list) or not all(isinstance(x, dict) for x in sessions):
        raise ConfigError(f"{path}: field 'sessions': expected a list of mappings")
    # Every point names every session, in order: pooling drops the oldest by position, and the
    # shape test pairs launches within each session.
    for p in sorted(points, key=lambda p: p.context):
        ls = list(p.launch_session)
        if (ls or sessions) and (sorted(set(ls)) != list(range(len(sessions))) or ls != sorted(ls)):
            raise ConfigError(
                f"{path}: field 'sessions': {len(sessions)} entries, but the point at context "
                f"{p.context} has launch_session {ls or 'none'} (each point names sessions "
                f"0..{max(len(sessions) - 1, 0)}, in order)"
            )
    for i, x in enumerate(sessions):
        if x.get("control") is not None:
            try:
                ControlRange.from_dict(x["control"])
            except (ValueError, AttributeError) as e:
                raise ConfigError(f"{path}: field 'sessions[{i}].control': {e}") from None
    return Baseline(
        hardware=str(d.get("hardware")),
        points=sorted(points, key=lambda p: p.context),
        model=model,
        created=str(d.get("created")),
        reason=str(d.get("reason")),
        provenance=d.get("provenance") or {},
        settings=d.get("settings") or {},
        history=d.get("history") or [],
        provisional=bool(d.get("provisional")),
        control=control,
        sessions=sessions,
    )


# -- writing ------------------------------------------------------------------------------


def _lock(path: Path) -> Any:
    fh = open(path.with_name(f".{path.name}.lock"), "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def _mode_for(path: Path) -> int:
    """The permissions the new file gets: the replaced file's, else a new file's under the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def save(baseline: Baseline, path: Path) -> None:
    """Atomically replace `path`: readers see the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# perftests baseline: written by `pytest perftests --update-baselines --reason ...`\n"
        "# (or `perftests baseline pool`). Do not edit by hand; refresh it so the reason and provenance\n"
        "# are recorded.\n" + yaml.safe_dump(baseline.to_dict(), sort_keys=False, width=100)
    )
    lock = _lock(path)
    try:
        # Under the lock no other writer has a temporary file in flight: any left is from a
        # refresh that was killed mid-write, and goes now.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, _mode_for(path))  # mkstemp's 0600 would hide a runner's baseline from its group
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)
    finally:
        lock.close()
    baseline.path = path


def diff_table(old: Baseline | None, new: Baseline) -> str:
    """Old-vs-new per point, printed by a refresh so the reviewer sees what changed."""
    lines = [
        f"{'context':>8} {'old tok/s':>10} {'new tok/s':>10} {'change':>8} {'launches':>9} "
        f"{'launch spread':>14}"
    ]
    old_pts = {p.context: p for p in old.points} if old else {}
    for p in new.points:
        o = old_pts.get(p.context)
        change = f"{p.tps / o.tps - 1:+.1%}" if o else "new"
        old_tps = f"{o.tps:.1f}" if o else "-"
        sd = p.launch_sd
        spread = f"{sd:.1%}" if sd is not None else "-"
        lines.append(f"{p.context:>8} {old_tps:>10} {p.tps:>10.1f} {change:>8} {p.launches:>9} {spread:>14}")
    for ctx in sorted(set(old_pts) - {p.context for p in new.points}):
        lines.append(f"{ctx:>8} {old_pts[ctx].tps:>10.1f} {'-':>10} {'dropped':>8}")
    if new.session_count > 1:
        sds = ", ".join(f"{p.context}: {p.session_sd:.1%}" for p in new.points if p.session_sd is not None)
        lines.append(
            f"pooled: {new.session_count} sessions ("
            + ", ".join(str(x.get("created", "?"))[:10] for x in new.sessions)
            + f"), each weighing the same; launch spread is within a session; "
            f"between sessions beyond it: {sds}"
        )
    m = new.model
    lines.append(
        f"model: {m.kind} = {m.a_ms:.3f} + {m.b_ms_per_token * 1000:.4f}/1k * ctx "
        f"(R^2 {m.r2:.4f}, worst residual {m.max_rel_residual:.1%})"
    )
    return "\n".join(lines)
