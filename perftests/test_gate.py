"""The gate: one test per context length of the chosen profile (`pytest perftests --hw NAME`).

The `perf_point` fixture measures; a broken service is an ERROR there. This test judges the
measurement itself: enough valid pairs and a finite figure."""

from __future__ import annotations

import math

from perftests.measure import Point
from perftests.session import PerfSession


def test_decode_throughput(perf_point: Point, perf_session: PerfSession) -> None:
    s = perf_point.tps()
    wanted = perf_session.settings.repeats
    assert s.n >= wanted, f"ctx={perf_point.context}: {s.n} valid pairs, wanted {wanted}"
    assert math.isfinite(s.median) and s.median > 0, f"ctx={perf_point.context}: no decode figure"
