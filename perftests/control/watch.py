"""Others' CPU time, read from /proc: the share another process took during a reading, and
the watch that stops a launch a competitor arrived in."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from perftests.control.readings import BUSY_SHARE, WATCH_WINDOW_S
from perftests.errors import PerftestsError


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
