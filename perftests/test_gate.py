"""The gate: `pytest perftests --hw NAME`. One test per context length of the profile, then one
for the whole curve.

With several services (--service-url given more than once) every test is parametrized by the
service too, and under xdist each service's tests run on one worker, in this order.

The run (every launch, every context) is measured once, in the first test's `perf_outcome`
fixture; a broken service or a busy machine is an ERROR there (an error of the run, never a
regression). These tests FAIL on what the gate is for: an invalid measurement, a point whose
judgement fails under the run's policies (outcome.point_fails), and a failing curve."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from perftests.ab import ABRun
from perftests.outcome import Outcome, OutcomeKind
from perftests.record import PointResult
from perftests.run import GateRun


def test_decode_throughput(perf_point: PointResult, perf_run: GateRun | ABRun) -> None:
    r = perf_point
    if r.problem:
        pytest.fail(r.problem, pytrace=False)
    if r.estimate is None:
        pytest.fail(f"ctx={r.context}: no measurement", pytrace=False)
    if perf_run.config.update:
        return  # refresh mode: the run wrote (or refused) the baseline; the curve test says which
    if r.comparison is None:
        pytest.fail(f"ctx={r.context}: not judged (no baseline point or model)", pytrace=False)
    if r.failed:
        shape = f"\n{r.shape.describe()}" if r.shape is not None else ""
        pytest.fail(
            f"{r.comparison.describe()}{shape}\nThe curve's verdict (test_curve_verdict) says "
            f"which kind of regression.",
            pytrace=False,
        )


def test_curve_verdict(
    perf_run: GateRun | ABRun, perf_outcome: Outcome, record_property: Callable[[str, object], None]
) -> None:
    o = perf_outcome
    record_property("perf_outcome", o.kind.value)
    if perf_run.verdict is not None:
        record_property("perf_verdict", perf_run.verdict.kind.value)
    if o.kind is OutcomeKind.REFRESHED:
        print(perf_run.refresh_table)
        return
    if o.kind is OutcomeKind.MEASURED:
        pytest.fail("no context point was judged (none measured, or no baseline): no verdict", pytrace=False)
    if o.failed:
        pytest.fail("\n".join([o.headline, *o.lines]), pytrace=False)
