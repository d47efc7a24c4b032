"""The classifier on constructed curves: the seed's numbers, each kind of regression, an
improvement, and noise that must pass. Unit tests are right here: no timing is involved."""

from __future__ import annotations

import numpy as np
import pytest

from perftests.baseline import Baseline, BaselinePoint
from perftests.compare import compare_point
from perftests.scaling import fit_curve
from perftests.verdict import Kind, classify, explain_report

TOL = 0.05


def make_baseline(points: dict[int, float], acceptance: float | None = None, mad_frac: float = 0.01,
                  n: int = 5, name: str = "pro6000") -> Baseline:
    pts = [BaselinePoint(c, t, t * mad_frac, n, acceptance,
                         1000 * acceptance / t if acceptance else None) for c, t in sorted(points.items())]
    model = fit_curve([p.context for p in pts], [p.tps for p in pts],
                      [acceptance] * len(pts) if acceptance else None)
    return Baseline(hardware=name, points=pts, model=model, created="2026-12-01", reason="test",
                    provenance={})


def seed_curve(ctx: float, a_ms: float = 34.5, b_ms: float = 0.02368, acc: float = 5.0) -> float:
    """The PRO 6000 DDTree service as the seed measured it: ~138 tok/s at short context with
    ~5 tokens per verify step, step time growing linearly with context (Triton MLA attention)."""
    return 1000 * acc / (a_ms + b_ms * ctx)


def run(base: Baseline, measured: dict[int, float], *, mad_frac: float = 0.01, n: int = 5,
        acceptance: float | None = None, step_ms: dict[int, float] | None = None):
    cmps = [compare_point(base, c, t, t * mad_frac, n, TOL, acceptance=acceptance,
                          step_ms=(step_ms or {}).get(c) or (1000 * acceptance / t if acceptance else None))
            for c, t in measured.items()]
    return classify(cmps, base)


@pytest.fixture
def pro6000():
    return make_baseline({c: seed_curve(c) for c in (60, 1024, 3072)}, acceptance=5.0)


def test_seed_baseline_matches_the_story(pro6000):
    assert pro6000.point(60).tps == pytest.approx(138, abs=3)
    assert pro6000.point(60).step_ms == pytest.approx(36, abs=1)
    assert pro6000.model.kind == "step_ms"
    assert pro6000.model.r2 > 0.999


def test_seed_32_at_5k_is_expected_scaling_when_the_curve_predicts_it(pro6000):
    kind, text = explain_report(pro6000, 5000, 32.0, 4.9, TOL)
    assert kind == Kind.EXPECTED_SCALING.value
    assert "expected at ctx=5000: 32." in text
    assert "context scaling, not a regression" in text
    # The same conclusion from a measured sweep that includes a context the baseline lacks.
    v = run(pro6000, {60: 137.0, 1024: seed_curve(1024) * 0.99, 5000: 32.3}, acceptance=4.95)
    assert v.kind is Kind.EXPECTED_SCALING and v.passed
    assert any("ctx=5000" in line and "not a regression" in line for line in v.lines)
    five_k = next(p for p in v.points if p.context == 5000)
    assert five_k.source == "model" and five_k.status == "pass"


def test_seed_32_at_5k_is_a_regression_when_the_curve_does_not_predict_it():
    # A curve that stayed nearly flat out to 3k (FlashMLA-like): 5k should be well above 100.
    flat = make_baseline({60: 138.0, 1024: 133.0, 3072: 124.0}, acceptance=5.0)
    kind, text = explain_report(flat, 5000, 32.0, 4.9, TOL)
    assert kind in (Kind.UNIFORM.value, Kind.CONTEXT_DEPENDENT.value)
    assert "below the band, a regression" in text
    assert "acceptance 4.90 tokens/step held" in text


def test_uniform_ten_percent_drop(pro6000):
    measured = {c: seed_curve(c) * 0.90 for c in (60, 1024, 3072)}
    v = run(pro6000, measured, acceptance=5.0)
    assert v.kind is Kind.UNIFORM and not v.passed
    text = v.explanation()
    assert "every point is down by a similar ratio" in text
    assert "-10.0%" in text
    assert "constant" in text and "configuration" in text
    assert all(p.status == "fail" for p in v.points)


def test_drop_only_at_long_context(pro6000):
    measured = {60: seed_curve(60) * 1.0, 1024: seed_curve(1024) * 0.97, 3072: seed_curve(3072) * 0.70}
    v = run(pro6000, measured, acceptance=5.0)
    assert v.kind is Kind.CONTEXT_DEPENDENT and not v.passed
    text = v.explanation()
    assert "the ratio worsens with context" in text
    assert "attention backend" in text
    # The linear term is what moved: per 1k context grows far more than the constant.
    base, now = pro6000.model, v.measured_model
    assert now.b_ms_per_token / base.b_ms_per_token - 1 > 0.3
    assert abs(now.a_ms / base.a_ms - 1) < 0.15


def test_acceptance_drop_with_step_time_unchanged(pro6000):
    # Drafts rejected: 2 tokens per step instead of 5, the target's step time unchanged.
    measured = {c: seed_curve(c, acc=2.0) for c in (60, 1024, 3072)}
    steps = {c: 1000 * 5.0 / seed_curve(c) for c in (60, 1024, 3072)}
    v = run(pro6000, measured, acceptance=2.0, step_ms=steps)
    assert v.kind is Kind.ACCEPTANCE_COLLAPSE and not v.passed
    text = v.explanation()
    assert "acceptance length fell -60.0%" in text
    assert "step time held" in text
    assert "draft" in text


def test_acceptance_collapse_from_a_report(pro6000):
    kind, text = explain_report(pro6000, 60, 60.0, 2.1, TOL)
    assert kind == Kind.ACCEPTANCE_COLLAPSE.value
    assert "2.10 tokens/step against 5.00" in text


def test_improvement_passes_and_asks_for_refresh(pro6000):
    v = run(pro6000, {c: seed_curve(c) * 1.15 for c in (60, 1024, 3072)}, acceptance=5.0)
    assert v.kind is Kind.IMPROVEMENT and v.passed
    assert "--update-baselines" in v.explanation()


@pytest.mark.parametrize("seed", range(20))
def test_noise_only_variation_passes(pro6000, seed):
    # Measured medians off by up to +-3% with a 2% spread: what an unchanged service looks like.
    rng = np.random.default_rng(seed)
    measured = {c: seed_curve(c) * (1 + rng.uniform(-0.03, 0.03)) for c in (60, 1024, 3072)}
    v = run(pro6000, measured, mad_frac=0.02, acceptance=5.0)
    assert v.passed, v.explanation()
    assert v.kind in (Kind.PASS, Kind.INCONCLUSIVE)


def test_drop_beyond_tolerance_within_noise_is_inconclusive(pro6000):
    # 8% down, but the samples scatter by 15%: not significant, so re-measure instead of failing.
    v = run(pro6000, {60: seed_curve(60) * 0.92, 1024: seed_curve(1024)}, mad_frac=0.15, n=3)
    p60 = next(p for p in v.points if p.context == 60)
    assert p60.status == "inconclusive"
    assert p60.mde > 0.08  # the printed detectable drop says why
    assert v.kind is Kind.INCONCLUSIVE


def test_small_significant_drop_within_tolerance_passes(pro6000):
    v = run(pro6000, {c: seed_curve(c) * 0.97 for c in (60, 1024, 3072)}, mad_frac=0.002, n=20)
    assert v.kind is Kind.PASS
    assert all(p.ratio_high < 1 for p in v.points)  # significant, but under the 5% tolerance


def test_minimum_detectable_effect_falls_with_repeats(pro6000):
    mdes = [compare_point(pro6000, 1024, 100.0, 3.0, n, TOL).mde for n in (3, 5, 10, 20, 40)]
    assert mdes == sorted(mdes, reverse=True)
    assert mdes[0] > 2 * mdes[-1] * 0.9


def test_a_drop_at_one_middle_point_is_reported_as_uneven(pro6000):
    measured = {60: seed_curve(60), 1024: seed_curve(1024) * 0.75, 3072: seed_curve(3072) * 0.99}
    v = run(pro6000, measured, acceptance=5.0)
    assert not v.passed
    assert "worst at ctx=1024 (0.750)" in v.explanation()
    assert "re-run" in v.explanation()
