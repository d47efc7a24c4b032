"""Baseline curves: one human-diffable YAML file per hardware profile, with provenance and history.

Writes are atomic (temporary file in the same directory, fsync, rename) under an exclusive lock,
so an interrupted refresh leaves the old file byte-identical and two refreshes at once leave one
whole file, never a mix. Reads validate every value and name the file and field when one is bad."""

from __future__ import annotations

import fcntl
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from perftests.control import ControlRange
from perftests.errors import ConfigError
from perftests.estimate import estimates, log_sd
from perftests.machine import hardware_key
from perftests.scaling import ScalingModel, fit_curve, split_band

if TYPE_CHECKING:
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

    @property
    def launches(self) -> int:
        return max(1, len(self.launch_tps))

    @property
    def launch_sd(self) -> float | None:
        """Spread between the launches' medians (sd of their logs); None with one launch."""
        return log_sd(self.launch_tps)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "context": self.context,
            "tps": round(self.tps, 3),
            "tps_mad": round(self.tps_mad, 3),
            "n": self.n,
        }
        if self.launch_tps:
            d["launch_tps"] = [round(x, 3) for x in self.launch_tps]
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

    @property
    def launches(self) -> int:
        return max((p.launches for p in self.points), default=1)

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
    history = list(previous.history) if previous else []
    if previous is not None:
        history.insert(
            0,
            {
                "created": previous.created,
                "reason": previous.reason,
                "commit": previous.provenance.get("commit"),
                "points": {p.context: round(p.tps, 3) for p in previous.points},
            },
        )
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
        history=history[:HISTORY_KEEP],
        control=ControlRange.of(record.control) if record.control else None,
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
    )


# -- writing ------------------------------------------------------------------------------


def _lock(path: Path) -> Any:
    fh = open(path.with_name(f".{path.name}.lock"), "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def save(baseline: Baseline, path: Path) -> None:
    """Atomically replace `path`: readers see the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# perftests baseline: written by `pytest perftests --update-baselines --reason ...`.\n"
        "# Do not edit by hand; refresh it so the reason and provenance are recorded.\n"
        + yaml.safe_dump(baseline.to_dict(), sort_keys=False, width=100)
    )
    lock = _lock(path)
    try:
        # Under the lock no other writer has a temporary file in flight: any left is from a
        # refresh that was killed mid-write, and goes now.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
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
    m = new.model
    lines.append(
        f"model: {m.kind} = {m.a_ms:.3f} + {m.b_ms_per_token * 1000:.4f}/1k * ctx "
        f"(R^2 {m.r2:.4f}, worst residual {m.max_rel_residual:.1%})"
    )
    return "\n".join(lines)
