"""A child process that cannot outlive us: own process group, log file, SIGTERM then SIGKILL.

Three layers keep orphans away: an explicit stop() from the fixture's teardown, an atexit hook for
interpreter exits (Ctrl-C, SIGTERM turned into KeyboardInterrupt by the plugin), and Linux's
parent-death signal for the case nothing in Python gets to run (pytest killed with SIGKILL)."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_LIVE: set[ManagedProcess] = set()


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log_path: Path,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **(env or {})}
        with open(log_path, "ab") as log:
            try:
                self.popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                    preexec_fn=_set_parent_death_signal,
                )
            except OSError as e:
                # Same class as an early exit: the service did not start. Imported late to keep
                # this module free of the error hierarchy's users.
                from perftests.errors import ServiceStartError

                raise ServiceStartError(f"cannot start {self.argv[0]!r}: {e.strerror}") from None
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, lines: int = 30) -> str:
        try:
            data = self.log_path.read_bytes()[-64 * 1024 :]
        except OSError:
            return "(no log)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the whole group, SIGKILL it after grace_s; returns the exit code."""
        _LIVE.discard(self)
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait(timeout=30)
        # Children of the service (SGLang's TP workers) share its group: reap any that linger.
        self._signal_group(signal.SIGKILL)
        return self.popen.returncode

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __hash__(self) -> int:
        return id(self)


def stop_all(grace_s: float = 5.0) -> None:
    for proc in list(_LIVE):
        proc.stop(grace_s)


atexit.register(stop_all)
