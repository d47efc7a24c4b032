"""The gate: `pytest perftests --hw NAME`. One test per context length of the profile, then one
for the whole curve.

With several services (--service-url given more than once) every test is parametrized by the
service too, and under xdist each service's tests run on one worker, in this order.

The `perf_point` fixture measures and judges; a broken service is an ERROR there (an error of the
run, never a regression). These tests FAIL on what the gate is for: an invalid measurement, a
significant drop beyond tolerance at a point, and a failing verdict for the curve."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from perftests.gate import Gate, GatePoint


def test_decode_throughput(perf_point: GatePoint, perf_gate: Gate) -> None:
    point = perf_point.point
    if point is None:
        pytest.fail(perf_point.problem or "no measurement", pytrace=False)
    s = point.tps()
    wanted = perf_gate.session.settings.repeats
    assert s.n >= wanted, f"ctx={point.context}: {s.n} valid pairs, wanted {wanted}"
    assert math.isfinite(s.median) and s.median > 0, f"ctx={point.context}: no decode figure"
    if perf_gate.update:
        return  # refresh mode: the curve test writes the baseline once every point is in
    if perf_point.problem:
        pytest.fail(perf_point.problem, pytrace=False)
    c = perf_point.comparison
    assert c is not None
    assert c.status != "fail", (
        f"{c.describe()}\nThe curve's verdict (test_curve_verdict) says which kind of regression.")


def test_curve_verdict(perf_gate: Gate, record_property: Callable[[str, object], None]) -> None:
    if perf_gate.update:
        table = perf_gate.refresh()
        assert perf_gate.baseline_path.exists()
        print(table)
        return
    if not perf_gate.comparisons:
        pytest.fail("no context point was judged (none measured, or no baseline): no verdict",
                    pytrace=False)
    v = perf_gate.conclude()
    record_property("perf_verdict", v.kind.value)
    record_property("perf_passed", v.passed)
    inconclusive_fails = (v.kind.value == "inconclusive"
                          and perf_gate.session.profile.defaults.inconclusive == "fail")
    if not v.passed or inconclusive_fails:
        pytest.fail(v.explanation(), pytrace=False)
