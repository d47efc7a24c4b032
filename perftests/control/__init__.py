"""The machine control: a short fixed workload, independent of the service, run before and after
each launch, so a slower or busier machine is told apart from a slower service.

CPU: dense matmul throughput (all cores, as the CPU reference uses them), memory copy bandwidth,
and the share of the machine's CPU time that other processes (and the hypervisor: steal) took
while it ran. GPU: NVML state through nvidia-smi (clocks, power limit, temperature, throttle
reasons, other processes on the GPUs) and, where torch with CUDA is importable, a device copy
bandwidth. Readings are stored in the baseline and in every record; check() is pure."""

from perftests.control.check import LABELS, METRICS, ControlRange, MachineCheck, check, drift, unsteady
from perftests.control.probe import measure
from perftests.control.readings import (
    BUSY_SHARE,
    DRIFT,
    JUMPY_RCV,
    QUIET_SHARE,
    WATCH_WINDOW_S,
    GpuState,
    Reading,
)
from perftests.control.watch import BusyWatch, MachineBusyError, session_pids

__all__ = [
    "BUSY_SHARE",
    "DRIFT",
    "JUMPY_RCV",
    "LABELS",
    "METRICS",
    "QUIET_SHARE",
    "WATCH_WINDOW_S",
    "BusyWatch",
    "ControlRange",
    "GpuState",
    "MachineBusyError",
    "MachineCheck",
    "Reading",
    "check",
    "drift",
    "measure",
    "session_pids",
    "unsteady",
]
