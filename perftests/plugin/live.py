"""Live terminal lines from inside a pytest run, and SIGTERM turned into a clean stop."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

import pytest

from perftests.reports.terminal import wrap


def live(config: pytest.Config, line: str, **markup: bool) -> None:
    """Write a line to the terminal now, even from inside a fixture: capture is suspended for it,
    as pytest's live logging does, so a 5-minute first build or a long sweep never looks hung."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        reporter.ensure_newline()
        for part in wrap(line):
            reporter.write_line(part, **markup)


def install_sigterm_handler() -> None:
    # SIGTERM (CI cancelling a job) becomes KeyboardInterrupt, so fixtures tear down and the
    # launched service is stopped, exactly as on Ctrl-C.
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"received signal {signum}")

        signal.signal(signal.SIGTERM, _interrupt)
