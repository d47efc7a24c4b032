"""What the machine control reads: the figures of one reading (CPU and GPU) and the
thresholds the check applies to them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MATMUL_N = 512
MATMUL_SAMPLES, MATMUL_PER_SAMPLE = 7, 4
COPY_BYTES = 128 * 1024 * 1024
COPY_SAMPLES = 11
BUSY_SHARE = 0.25  # other processes took this share of the machine during a reading: busy
JUMPY_RCV = 0.15  # the control's own repetitions spread this much: something may compete
QUIET_SHARE = 0.05  # jumpy repetitions with others' CPU share below this are a warning, not busy:
# on the idle 16-vCPU H200 VM the 512x512 matmul on all cores spread 16-61% between its own
# repetitions with others' share 0% (5 launches dropped, 2026-12-04); on the 2-core VM 19-29%
# with nothing else running (2026-12-03). A competitor that slows the workload takes CPU time,
# and that shows in the share: idle machines read 0-0.9%, one single-threaded process beside the
# control on the 16-vCPU H200 VM (the model writer) read 6.2%, i.e. one core's worth is 6.25%
# there and 50% on 2 cores. So below 5% nothing took even one core; a jumpy reading beside a
# share between 5% and BUSY_SHARE stays busy (something competes and the spread says it matters).
WATCH_WINDOW_S = 5.0  # BusyWatch: others' CPU share is judged over windows this long
DRIFT = 0.35  # a control figure moved this much between before and after one launch: a warning
# (quiet, the copy bandwidth alone spreads 29-37 GB/s between readings on the 2-core VM)


@dataclass(frozen=True)
class GpuState:
    index: int
    name: str
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_limit_w: float | None = None
    power_draw_w: float | None = None
    temperature_c: float | None = None
    throttle: str | None = None  # active clock-throttle reasons bitmask, as nvidia-smi prints it
    processes: int = 0  # compute processes on this GPU at the time of the reading


@dataclass(frozen=True)
class Reading:
    """One run of the control workload."""

    when: str  # "before" | "after" a launch (or an attach round)
    launch: int
    wall_s: float
    cpu_gflops: float | None = None
    cpu_rcv: float | None = None  # robust CV of the matmul samples
    mem_gbs: float | None = None
    foreign_cpu: float | None = None  # share of all cores used by others (steal included)
    loadavg: float | None = None
    gpus: tuple[GpuState, ...] = ()
    gpu_copy_gbs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = [asdict(g) for g in self.gpus]
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reading:
        kw = {k: v for k, v in d.items() if k in {f for f in cls.__dataclass_fields__}}
        kw["gpus"] = tuple(GpuState(**g) for g in d.get("gpus") or [])
        return cls(**kw)


# -- measuring -----------------------------------------------------------------------------
