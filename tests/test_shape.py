"""The within-launch shape test (shape.py): each context over the shortest one of the same
launch, against the baseline's. The machine's uniform swing between launches cancels in it, so a
cost that grows with context shows even when the per-point intervals cannot see it; a uniform
drop leaves it alone. Pure: synthetic launches through the framework's own judging."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perftests.compare import compare_point
from perftests.estimate import estimates
from perftests.outcome import Policy, conclude
from perftests.record import RunRecord
from perftests.shape import compare_shapes, shape_tests
from perftests.verdict import CurveVerdict, Kind, classify
from tests.test_run import make_run, point
from tests.test_verdict import make_baseline

CURVE = {64: 1200.0, 1024: 800.0, 4096: 330.0}
FAMILY = len(CURVE) + shape_tests(list(CURVE))


def judge(baseline, points, *, prior=0.15, shape_prior=0.05, tol=0.10):
    ests = estimates(points)
    comps = [compare_point(baseline, e, tol, launch_noise_prior=prior, family=FAMILY) for e in ests.values()]
    shapes = compare_shapes(baseline, points, tol, shape_noise_prior=shape_prior, family=FAMILY)
    return comps, shapes, classify(comps, baseline, shapes)


def launches(levels, shape=None):
    """One launch per machine level; `shape` scales chosen contexts within every launch."""
    shape = shape or {}
    return [
        point(c, t * lv * shape.get(c, 1.0), launch=i)
        for i, lv in enumerate(levels)
        for c, t in CURVE.items()
    ]


def test_context_cost_is_caught_through_a_machine_swing_the_points_cannot_see():
    # The CI failure this answers: the machine ran 30% faster than in the baseline's launches and
    # the q8_0 cache cost 0.55x at 4096; every point passed on its own.
    base = make_baseline(CURVE, launch_sd=0.2, name="cpu")
    comps, shapes, v = judge(base, launches([1.35, 1.25], shape={4096: 0.55}))
    assert all(c.status != "fail" for c in comps)  # the level alone: hidden in the swing
    by = {s.context: s for s in shapes}
    assert by[4096].status == "fail" and by[4096].ratio == pytest.approx(0.55, rel=0.01)
    assert by[1024].status == "pass" and by[4096].reference == 64
    assert v.kind is Kind.CONTEXT_DEPENDENT
    assert any("within the same launches ctx=4096" in line for line in v.lines)
    o = conclude(
        policy=Policy(),
        errors=[],
        machine=None,
        problems={},
        comparisons={c.context: c for c in comps},
        verdict=v,
    )
    assert o.failed and o.exit_code == 1 and o.failing_contexts == (4096,)


def test_a_uniform_drop_leaves_the_shape_alone():
    base = make_baseline(CURVE, launch_sd=0.03, name="cpu")
    comps, shapes, v = judge(base, launches([0.7, 0.72, 0.69]), prior=0.03)
    assert all(s.status == "pass" and s.ratio == pytest.approx(1.0, abs=0.02) for s in shapes)
    assert all(c.status == "fail" for c in comps)
    assert v.kind is Kind.UNIFORM


def test_a_failing_curve_whose_quotient_is_not_significant_says_so():
    # The mean ratios fall with context (0.80 at 64, 0.67 at 4096) and every point fails, but the
    # two launches disagree on the quotient by 30%: named by the slope, with the quotient's
    # interval beside it so nobody reads more certainty into the kind than there is.
    base = make_baseline(CURVE, launch_sd=0.03, name="cpu")
    pts = [
        point(64, 1200 * 0.80, 0),
        point(1024, 800 * 0.74, 0),
        point(4096, 330 * 0.58, 0),
        point(64, 1200 * 0.80, 1),
        point(1024, 800 * 0.80, 1),
        point(4096, 330 * 0.78, 1),
    ]
    comps, shapes, v = judge(base, pts, prior=0.03, shape_prior=0.10)
    assert all(c.status == "fail" for c in comps)
    assert next(s for s in shapes if s.context == 4096).status == "inconclusive"
    assert v.kind is Kind.CONTEXT_DEPENDENT
    assert any("not significant on its own" in line for line in v.lines)


def test_launches_that_cannot_be_paired_give_no_shape():
    base = make_baseline(CURVE, launch_sd=0.05, name="cpu")
    b4096 = base.point(4096)
    assert b4096 is not None
    base.points[-1] = type(b4096)(**{**b4096.__dict__, "launch_tps": b4096.launch_tps[:3]})
    shapes = compare_shapes(base, launches([1.0]), 0.1, shape_noise_prior=0.05, family=FAMILY)
    assert [s.context for s in shapes] == [1024]  # 4096's launches do not line up with 64's
    # A run whose launches measured 4096 without 64 pairs nothing there either.
    base = make_baseline(CURVE, launch_sd=0.05, name="cpu")
    pts = [point(64, 1200, 0), point(1024, 800, 0), point(4096, 330, 1)]
    assert [s.context for s in compare_shapes(base, pts, 0.1, shape_noise_prior=0.05, family=FAMILY)] == [
        1024
    ]


def test_attached_rounds_count_as_one_launch():
    base = make_baseline(CURVE, launch_sd=0.05, name="cpu")
    pts = launches([1.0, 1.0, 1.0, 1.0])
    kw = dict(shape_noise_prior=0.05, family=FAMILY)
    launched = compare_shapes(base, pts, 0.1, **kw)
    rounds = compare_shapes(base, pts, 0.1, rounds=True, **kw)
    assert rounds[0].mde > launched[0].mde  # rounds of one service life do not average launches


def test_false_alarms_and_power_under_a_uniform_swing():
    # Monte Carlo through the framework's own functions: launches whose level swings with sd 0.25
    # (as measured on the CI VMs) and whose contexts move independently by sd 0.06 within a
    # launch; K=5 baseline launches, k=1 run launch, the CPU profile's priors.
    rng = np.random.default_rng(7)
    ctxs = list(CURVE)

    def campaign(k, effect):
        pts = []
        for i in range(k):
            lv = np.exp(rng.normal(0, 0.25))
            for c in ctxs:
                pts.append(
                    point(c, CURVE[c] * lv * np.exp(rng.normal(0, 0.06)) * effect.get(c, 1.0), launch=i)
                )
        return pts

    def baseline():
        b = make_baseline(CURVE, launch_sd=0.05, name="cpu")
        by_launch = estimates(campaign(5, {}))
        for p in b.points:
            p_new = type(p)(**{**p.__dict__, "launch_tps": by_launch[p.context].launch_tps})
            b.points[b.points.index(p)] = p_new
        return b

    def verdict(effect):
        return judge(baseline(), campaign(1, effect), prior=0.25, shape_prior=0.12)[2]

    n = 300
    aa = [verdict({}) for _ in range(n)]
    false = sum(v.kind is Kind.CONTEXT_DEPENDENT or not v.passed for v in aa)
    kv = [verdict({1024: 0.85, 4096: 0.55}) for _ in range(n)]
    caught = sum(v.kind is Kind.CONTEXT_DEPENDENT for v in kv)
    print(f"A/A false alarms {false}/{n}; a 0.55x cost at 4096 named context-dependent {caught}/{n}")
    assert false / n <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n)  # the 5% the family is sized for
    assert caught / n >= 0.9


def test_shapes_travel_in_the_record(tmp_path):
    run = make_run(tmp_path)
    from tests.test_run import CURVE as UNIT

    run.points = [point(c, t * f, launch=i) for i, f in enumerate((0.98, 1.02)) for c, t in UNIT.items()]
    run.conclude()
    assert run.verdict is not None and [s.context for s in run.verdict.shapes] == [512, 2048]
    assert run.comparisons[64].family == 5  # three points and two quotients share the 5%
    rec = run.record()
    back = RunRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.verdict is not None and back.verdict.shapes == run.verdict.shapes
    assert [r.shape.context if r.shape else None for r in back.results()] == [None, 512, 2048]
    assert CurveVerdict.from_dict(run.verdict.to_dict()).shapes == run.verdict.shapes
