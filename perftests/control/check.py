"""The control's check (pure): a run's readings against the baseline's stored range, busy /
differs / ok, with the numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from perftests.control.readings import BUSY_SHARE, DRIFT, JUMPY_RCV, QUIET_SHARE, Reading

METRICS = ("cpu_gflops", "mem_gbs", "gpu_copy_gbs")
HOST_METRICS = ("cpu_gflops", "mem_gbs")
LABELS = {"cpu_gflops": "CPU matmul GFLOP/s", "mem_gbs": "memory copy GB/s", "gpu_copy_gbs": "GPU copy GB/s"}


@dataclass(frozen=True)
class ControlRange:
    """What the baseline's launches measured: every reading's figures, and the GPUs' settings."""

    values: dict[str, tuple[float, ...]] = field(default_factory=dict)
    gpus: tuple[dict[str, Any], ...] = ()  # name, power limit, max SM clock per GPU

    @classmethod
    def of(cls, readings: Sequence[Reading]) -> ControlRange:
        values = {
            m: tuple(float(getattr(r, m)) for r in readings if getattr(r, m) is not None) for m in METRICS
        }
        first = next((r for r in readings if r.gpus), None)
        gpus = (
            tuple(
                {"name": g.name, "power_limit_w": g.power_limit_w, "max_sm_clock_mhz": g.max_sm_clock_mhz}
                for g in first.gpus
            )
            if first
            else ()
        )
        return cls({m: v for m, v in values.items() if v}, gpus)

    @classmethod
    def merged(cls, ranges: Sequence[ControlRange]) -> ControlRange:
        """The range over several baselines' launches (a pooled baseline); the newest's GPUs."""
        values: dict[str, tuple[float, ...]] = {}
        for r in ranges:
            for m, v in r.values.items():
                values[m] = values.get(m, ()) + v
        return cls(values, ranges[-1].gpus if ranges else ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": {m: [round(x, 3) for x in v] for m, v in self.values.items()},
            "gpus": list(self.gpus),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControlRange:
        values = d.get("values")
        if not isinstance(values, dict):
            raise ValueError("'values' must be a mapping of metric to a list of numbers")
        out = {}
        for m, v in values.items():
            if (
                m not in METRICS
                or not isinstance(v, list)
                or not v
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v)
            ):
                raise ValueError(f"'values.{m}': expected a known metric with positive numbers")
            out[m] = tuple(float(x) for x in v)
        gpus = d.get("gpus") or []
        if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
            raise ValueError("'gpus': expected a list of mappings")
        return cls(out, tuple(gpus))


Status = Literal["ok", "busy", "differs", "unchecked"]


@dataclass(frozen=True)
class MachineCheck:
    status: Status
    lines: tuple[str, ...] = ()
    ratios: dict[str, float] = field(default_factory=dict)  # run median / baseline median

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "unchecked")

    def headline(self, refused: bool = True) -> str:
        """`refused` False: the run was judged all the same (outcome.on_slower_machine)."""
        if self.status == "differs" and not refused:
            return "machine control: SLOWER than the baseline's (the verdict stands, see below)"
        return {
            "ok": "machine control: as the baseline's",
            "unchecked": "machine control: unchecked",
            "busy": "MACHINE BUSY (not a regression)",
            "differs": "MACHINE DIFFERS FROM THE BASELINE'S (not a regression)",
        }[self.status]

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "lines": list(self.lines),
            "ratios": {k: round(v, 4) for k, v in self.ratios.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MachineCheck:
        return cls(d["status"], tuple(d.get("lines") or ()), dict(d.get("ratios") or {}))


def drift(readings: Sequence[Reading]) -> list[str]:
    """Stability warnings: a control figure that moved by more than DRIFT between the readings
    before and after one launch. A warning, not "busy": on a quiet 2-core VM the memory copy
    alone was seen at 28.8 then 40.8 GB/s around one launch (2026-12-03), with no other process;
    competition shows directly in the foreign CPU share and the control's own spread."""
    by_launch: dict[int, dict[str, Reading]] = {}
    for r in readings:
        by_launch.setdefault(r.launch, {})[r.when] = r
    out = []
    for launch, pair in sorted(by_launch.items()):
        b, a = pair.get("before"), pair.get("after")
        if b is None or a is None:
            continue
        for m in METRICS:
            x, y = getattr(b, m), getattr(a, m)
            if x and y and abs(math.log(y / x)) > math.log1p(DRIFT):
                out.append(
                    f"the machine moved during launch {launch + 1}: {LABELS[m]} {x:.1f} before, "
                    f"{y:.1f} after; its figures are less certain than their spread says"
                )
    return out


def _jumpy(r: Reading) -> bool:
    return r.cpu_rcv is not None and r.cpu_rcv > JUMPY_RCV


def _quiet(r: Reading) -> bool:
    """Others took less than one core's worth of a many-core machine (QUIET_SHARE): a jumpy
    control beside it is the workload's own jitter, not a competitor. Unknown share: not quiet."""
    return r.foreign_cpu is not None and r.foreign_cpu < QUIET_SHARE


def unsteady(readings: Sequence[Reading]) -> list[str]:
    """Stability warnings of check(): readings whose own repetitions were jumpy while others'
    CPU share stayed below QUIET_SHARE. Said, not refused (QUIET_SHARE says why)."""
    return [
        f"launch {r.launch + 1} ({r.when}): the control's repetitions spread {r.cpu_rcv:.0%} with "
        f"others' CPU share {r.foreign_cpu:.1%}: the control's own jitter, not counted as busy"
        for r in readings
        if _jumpy(r) and _quiet(r)
    ]


def check(stored: ControlRange | None, readings: Sequence[Reading], *, tolerance: float) -> MachineCheck:
    """Is this machine, now, the machine the baseline was measured on, and is it quiet?

    busy: other processes took a large share of the CPU (over BUSY_SHARE; or the GPUs had other
    processes) during a reading, or the control's own repetitions were jumpy while others took
    at least QUIET_SHARE (or an unknown share). Jumpy repetitions beside a share under
    QUIET_SHARE are a warning in the lines (unsteady()), as is drift() elsewhere.
    differs: the run's control figures lie below the baseline's readings widened by `tolerance`
    (above them is said in the lines, not refused), or the GPUs' power limit or maximum clock
    differ. Busy is checked first: a busy machine also measures low."""
    if not readings:
        return MachineCheck("unchecked", ("no machine control was measured",))
    busy: list[str] = []
    for r in readings:
        tag = f"launch {r.launch + 1} ({r.when})"
        if r.foreign_cpu is not None and r.foreign_cpu > BUSY_SHARE:
            busy.append(f"{tag}: other processes took {r.foreign_cpu:.0%} of the CPU time")
        if _jumpy(r) and not _quiet(r):
            share = "unknown" if r.foreign_cpu is None else f"{r.foreign_cpu:.1%}"
            busy.append(
                f"{tag}: the control's repetitions spread {r.cpu_rcv:.0%} (others' CPU share {share})"
            )
        if r.when == "before" and any(g.processes for g in r.gpus):
            n = sum(g.processes for g in r.gpus)
            busy.append(f"{tag}: {n} other process(es) on the GPUs before the launch")
    warnings = tuple(unsteady(readings))
    if busy:
        return MachineCheck("busy", tuple(busy) + warnings)
    if stored is None or not (stored.values or stored.gpus):
        return MachineCheck(
            "unchecked",
            (
                "the baseline has no machine control (made before it "
                "existed): refresh it to have the machine checked",
                *warnings,
            ),
        )
    lines, ratios, differs = [], {}, False
    # A model served from GPUs is bound by them: there the host's figures are said, not refused.
    # On the lent H200 one 7B gate run of eight was refused because the host's memory copy read
    # 10.2 GB/s against 10.7 allowed while the GPU copy, clocks and power limit were in range
    # (2026-12-04, second lease).
    gpu_bound = bool(stored.gpus) or "gpu_copy_gbs" in stored.values
    for m, ref in stored.values.items():
        mine = [float(getattr(r, m)) for r in readings if getattr(r, m) is not None]
        if not mine:
            continue
        med, ref_med = float(np.median(mine)), float(np.median(ref))
        ratios[m] = med / ref_med
        lo, hi = min(ref) * (1 - tolerance), max(ref) * (1 + tolerance)
        # Only a slower machine is refused: it is what would read as a false regression. Above
        # the range is said, not refused: a quiet 2-core VM's memory copy read 1.30x its own
        # baseline's three launches one CI run later (2026-12-04), and a faster machine can hide
        # a uniform drop but not invent one (the within-launch shape test is unaffected).
        below, above = med < lo, med > hi
        host_only = gpu_bound and m in HOST_METRICS
        differs |= below and not host_only
        lines.append(
            f"{LABELS[m]}: {med:.1f} now, baseline {min(ref):.1f}-{max(ref):.1f} "
            f"({ratios[m]:.2f}x; allowed {lo:.1f}-{hi:.1f})"
            + (": OUTSIDE (slower)" if below and not host_only else "")
            + (
                ": below (the host's; the model is served from the GPUs: said, not refused)"
                if below and host_only
                else ""
            )
            + (": above (a faster machine may hide a uniform drop of its size)" if above else "")
        )
    gpus_now = next((r.gpus for r in readings if r.gpus), ())
    for ref_g, g in zip(stored.gpus, gpus_now, strict=False):
        for key in ("power_limit_w", "max_sm_clock_mhz"):
            want, got = ref_g.get(key), getattr(g, key)
            if want is not None and got is not None and abs(got - want) > 0.01 * want:
                differs = True
                lines.append(f"GPU {g.index}: {key} {got:g} now, baseline {want:g}: DIFFERS")
    if len(stored.gpus) != len(gpus_now) and stored.gpus:
        differs = True
        lines.append(f"{len(gpus_now)} GPU(s) now, the baseline had {len(stored.gpus)}")
    return MachineCheck("differs" if differs else "ok", (*lines, *warnings), ratios)
