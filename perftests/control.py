"""The machine control: a short fixed workload, independent of the service, run before and after
each launch, so a slower or busier machine is told apart from a slower service.

CPU: dense matmul throughput (all cores, as the CPU reference uses them), memory copy bandwidth,
and the share of the machine's CPU time that other processes (and the hypervisor: steal) took
while it ran. GPU: NVML state through nvidia-smi (clocks, power limit, temperature, throttle
reasons, other processes on the GPUs) and, where torch with CUDA is importable, a device copy
bandwidth. Readings are stored in the baseline and in every record; check() is pure."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from perftests.errors import PerftestsError

MATMUL_N = 512
MATMUL_SAMPLES, MATMUL_PER_SAMPLE = 7, 4
COPY_BYTES = 128 * 1024 * 1024
COPY_SAMPLES = 11
BUSY_SHARE = 0.25  # other processes took this share of the machine during a reading: busy
JUMPY_RCV = 0.15  # the control's own repetitions spread this much: something competes
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


def _proc_stat() -> tuple[float, float] | None:
    """(busy jiffies incl. steal, total jiffies) of the whole machine, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            parts = [float(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)  # idle + iowait
    return sum(parts[:8]) - idle, sum(parts[:8])


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a live process, from /proc/PID/stat; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return (float(fields[11]) + float(fields[12])) / tick  # utime, stime: fields 14 and 15


def session_pids(sid: int) -> list[int]:
    """Every live process of session `sid` (a launched service and the workers it forks: SGLang's
    scheduler and detokenizer are processes of their own)."""
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid:  # field 6: session id
            out.append(int(entry))
    return out


class MachineBusyError(PerftestsError):
    """Other processes took a large share of the machine while a launch was measuring."""


class BusyWatch:
    """Others' share of the machine's CPU time while a launch measures, sampled between requests
    (it costs two small /proc reads). A competitor that arrives mid-launch then stops the launch
    as busy instead of stretching it: with one of two cores taken by a CPU-bound process, one
    launch of the reference ran past 15 minutes (2026-12-03). "Ours" is this process and the
    service processes named by `pids` (the launched server's threads are all in its /proc stat)."""

    def __init__(self, pids: Callable[[], Sequence[int]], *, window_s: float = WATCH_WINDOW_S) -> None:
        self.pids = pids
        self.window_s = window_s
        self._start: tuple[float, float, float, float] | None = None  # wall, busy, total, ours

    def _sample(self) -> tuple[float, float, float, float] | None:
        stat = _proc_stat()
        if stat is None:
            return None
        ours = _own_cpu_s() + sum(_proc_cpu_s(p) for p in self.pids())
        return time.monotonic(), stat[0], stat[1], ours

    def __call__(self) -> None:
        now = self._sample()
        if now is None:
            return
        if self._start is None or now[0] - self._start[0] < self.window_s:
            self._start = self._start or now
            return
        start, self._start = self._start, now
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total_s = (now[2] - start[2]) / tick
        if total_s <= 0:
            return
        foreign = ((now[1] - start[1]) / tick - (now[3] - start[3])) / total_s
        if foreign > BUSY_SHARE:
            raise MachineBusyError(
                f"other processes took {foreign:.0%} of the CPU time during the launch "
                f"(over {now[0] - start[0]:.0f} s)"
            )


def _rcv(x: np.ndarray) -> float:
    med = float(np.median(x))
    return 1.4826 * float(np.median(np.abs(x - med))) / med if med > 0 else math.inf


def _cpu(warm: bool = True) -> tuple[float, float, float]:
    """(GFLOP/s, robust CV of the samples, memory copy GB/s). Best-of-N, as STREAM reports:
    on a shared VM the best sample is the machine's capability, steadier than the median (a
    quiet 2-core EPYC VM: copy bandwidth 5% range best-of-11 on 128 MB, 13-20% as a median of 7
    on 64 MB). Competition is measured separately, as the CPU time others took."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((MATMUL_N, MATMUL_N))
    b = rng.standard_normal((MATMUL_N, MATMUL_N))
    # Untimed: BLAS threads start and the vCPUs wake. Seen in a fresh pytest process on the
    # 2-core VM: the first timed samples at half speed (one core) with nobody else running.
    t_end = time.perf_counter() + (0.25 if warm else 0.02)
    while time.perf_counter() < t_end:
        a @ b
    times = []
    for _ in range(MATMUL_SAMPLES):
        t0 = time.perf_counter()
        for _ in range(MATMUL_PER_SAMPLE):
            a @ b
        times.append(time.perf_counter() - t0)
    flops = 2.0 * MATMUL_N**3 * MATMUL_PER_SAMPLE
    rates = flops / np.asarray(times) / 1e9
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    copies = []
    for _ in range(COPY_SAMPLES):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)
    mem = 2.0 * COPY_BYTES / float(np.min(copies)) / 1e9  # read + write
    return float(np.max(rates)), _rcv(rates), mem


def _num(x: str) -> float | None:
    try:
        return float(x)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


GPU_QUERY = (
    "index,name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,power.draw,temperature.gpu,"
    "clocks_throttle_reasons.active,gpu_uuid"
)


def _gpus() -> tuple[GpuState, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    per_uuid: dict[str, int] = {}
    me = str(os.getpid())
    for line in apps.strip().splitlines():
        uuid, _, pid = (x.strip() for x in line.partition(","))
        if pid == me:  # this process's own CUDA context, left by _gpu_copy_gbs: not another process
            continue
        per_uuid[uuid] = per_uuid.get(uuid, 0) + 1
    gpus = []
    for line in out.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 10:
            continue
        gpus.append(
            GpuState(
                index=int(f[0]),
                name=f[1],
                sm_clock_mhz=_num(f[2]),
                max_sm_clock_mhz=_num(f[3]),
                mem_clock_mhz=_num(f[4]),
                power_limit_w=_num(f[5]),
                power_draw_w=_num(f[6]),
                temperature_c=_num(f[7]),
                throttle=f[8],
                processes=per_uuid.get(f[9], 0),
            )
        )
    return tuple(gpus)


def _gpu_copy_gbs() -> float | None:
    """Device-to-device copy bandwidth of GPU 0 with torch, when torch with CUDA is importable."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = 256 * 1024 * 1024
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * n / float(np.median(times)) / 1e9


ATTEMPTS = 3  # best of: a host that takes a vCPU for a fraction of a second is not "busy"


def measure(when: str, launch: int) -> Reading:
    """Run the control workload ATTEMPTS times, 0.2 s apart, and keep the best: a sustained
    slowdown or competitor shows in every attempt, a passing hiccup in one (seen on the 2-core
    VM: one reading in three at half speed, no other process running, the next one normal).
    About 1.5 s in all on a CPU machine."""
    t0 = time.perf_counter()
    tries = []
    for i in range(ATTEMPTS):
        if i:
            time.sleep(0.2)
        tries.append(_once(when, launch, warm=i == 0))
    best = max(tries, key=lambda r: r.cpu_gflops or 0.0)
    foreign = [r.foreign_cpu for r in tries if r.foreign_cpu is not None]
    return replace(
        best,
        wall_s=time.perf_counter() - t0,
        foreign_cpu=min(foreign) if foreign else None,
        mem_gbs=max((r.mem_gbs for r in tries if r.mem_gbs), default=None),
    )


def _once(when: str, launch: int, *, warm: bool) -> Reading:
    t0 = time.perf_counter()
    stat0, own0 = _proc_stat(), _own_cpu_s()
    gflops, rcv, mem = _cpu(warm)
    stat1, own1 = _proc_stat(), _own_cpu_s()
    foreign = None
    if stat0 and stat1 and stat1[1] > stat0[1]:
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        busy_s = (stat1[0] - stat0[0]) / tick
        total_s = (stat1[1] - stat0[1]) / tick
        foreign = max(0.0, (busy_s - (own1 - own0)) / total_s) if total_s > 0 else None
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    gpus = _gpus()
    return Reading(
        when=when,
        launch=launch,
        wall_s=time.perf_counter() - t0,
        cpu_gflops=gflops,
        cpu_rcv=rcv,
        mem_gbs=mem,
        foreign_cpu=foreign,
        loadavg=load,
        gpus=gpus,
        gpu_copy_gbs=_gpu_copy_gbs() if gpus else None,
    )


# -- the stored range and the check ----------------------------------------------------------

METRICS = ("cpu_gflops", "mem_gbs", "gpu_copy_gbs")
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

    def headline(self) -> str:
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


def check(stored: ControlRange | None, readings: Sequence[Reading], *, tolerance: float) -> MachineCheck:
    """Is this machine, now, the machine the baseline was measured on, and is it quiet?

    busy: other processes took a large share of the CPU (or the GPUs had other processes) during
    a reading, or the control's own repetitions were jumpy (drift() warns of the rest).
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
        if r.cpu_rcv is not None and r.cpu_rcv > JUMPY_RCV:
            busy.append(f"{tag}: the control's repetitions spread {r.cpu_rcv:.0%}")
        if r.when == "before" and any(g.processes for g in r.gpus):
            n = sum(g.processes for g in r.gpus)
            busy.append(f"{tag}: {n} other process(es) on the GPUs before the launch")
    if busy:
        return MachineCheck("busy", tuple(busy))
    if stored is None or not (stored.values or stored.gpus):
        return MachineCheck(
            "unchecked",
            (
                "the baseline has no machine control (made before it "
                "existed): refresh it to have the machine checked",
            ),
        )
    lines, ratios, differs = [], {}, False
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
        differs |= below
        lines.append(
            f"{LABELS[m]}: {med:.1f} now, baseline {min(ref):.1f}-{max(ref):.1f} "
            f"({ratios[m]:.2f}x; allowed {lo:.1f}-{hi:.1f})"
            + (": OUTSIDE (slower)" if below else "")
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
    return MachineCheck("differs" if differs else "ok", tuple(lines), ratios)
