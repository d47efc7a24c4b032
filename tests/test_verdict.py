"""The classifier on constructed curves: the seed's numbers, each kind of regression, an
improvement, and noise that must pass. Unit tests are right here: no timing is involved."""

from __future__ import annotations

import numpy as np
import pytest

from perftests.baseline import Baseline, BaselinePoint
from perftests.compare import compare_point
from perftests.estimate import Estimate, se_log_median
from perftests.scaling import fit_curve
from perftests.triage.explain import explain_report
from perftests.verdict import Kind, classify

TOL = 0.05


def make_baseline(
    points: dict[int, float],
    acceptance: float | None = None,
    mad_frac: float = 0.01,
    n: int = 5,
    name: str = "pro6000",
    launch_sd: float | None = None,
    launches: int = 5,
) -> Baseline:
    """A baseline; with `launch_sd`, each point holds `launches` launch medians of that spread."""

    def spread(t: float) -> tuple[float, ...]:
        if launch_sd is None:
            return ()
        z = np.linspace(-1, 1, launches)
        z = z / np.std(z, ddof=1)
        return tuple(float(t * np.exp(launch_sd * x)) for x in z)

    pts = [
        BaselinePoint(
            c, t, t * mad_frac, n, acceptance, 1000 * acceptance / t if acceptance else None, spread(t)
        )
        for c, t in sorted(points.items())
    ]
    model = fit_curve(
        [p.context for p in pts], [p.tps for p in pts], [acceptance] * len(pts) if acceptance else None
    )
    return Baseline(
        hardware=name, points=pts, model=model, created="2026-12-01", reason="test", provenance={}
    )


def seed_curve(ctx: float, a_ms: float = 34.5, b_ms: float = 0.02368, acc: float = 5.0) -> float:
    """The PRO 6000 DDTree service as the seed measured it: ~138 tok/s at short context with
    ~5 tokens per verify step, step time growing linearly with context (Triton MLA attention)."""
    return 1000 * acc / (a_ms + b_ms * ctx)


def est(
    ctx: int,
    tps: float,
    *,
    mad_frac: float = 0.01,
    n: int = 5,
    launches: int = 1,
    acceptance: float | None = None,
    step_ms: float | None = None,
) -> Estimate:
    """A measured point: `launches` launches of median `tps`, each from n pairs."""
    return Estimate(
        ctx,
        tps,
        (tps,) * launches,
        se_log_median(tps, tps * mad_frac, n),
        1.4826 * mad_frac,
        n * launches,
        acceptance,
        step_ms,
    )


def run(
    base: Baseline,
    measured: dict[int, float],
    *,
    mad_frac: float = 0.01,
    n: int = 5,
    acceptance: float | None = None,
    step_ms: dict[int, float] | None = None,
    noise: float = 0.01,
):
    """Judge `measured` with `noise` as the between-launch sd (a one-launch baseline's prior)."""
    cmps = [
        compare_point(
            base,
            est(
                c,
                t,
                mad_frac=mad_frac,
                n=n,
                acceptance=acceptance,
                step_ms=(step_ms or {}).get(c) or (1000 * acceptance / t if acceptance else None),
            ),
            TOL,
            launch_noise_prior=noise,
        )
        for c, t in measured.items()
    ]
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
    assert kind is Kind.EXPECTED_SCALING
    # The document's chain: acceptance held, step time 4.3x the short context's as the curve
    # expects, the growth is the context term.
    assert "1. acceptance held: 4.90 tokens/step (3.90 drafts accepted) against 5.00" in text
    assert "ms/step: 153.1 now, 35.9 at ctx=60, 152.9 expected at ctx=5000" in text
    assert "the growth is attention reading the KV cache" in text
    assert "expected 32.7 tok/s" in text
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
    assert kind in (Kind.UNIFORM, Kind.CONTEXT_DEPENDENT)
    assert "below the band, a regression" in text
    assert "1. acceptance held: 4.90" in text and "more is unexplained" in text
    assert "pytest perftests --hw pro6000 --perf-contexts 60,5000" in text


def test_uniform_ten_percent_drop(pro6000):
    measured = {c: seed_curve(c) * 0.90 for c in (60, 1024, 3072)}
    v = run(pro6000, measured, acceptance=5.0)
    assert v.kind is Kind.UNIFORM and not v.passed
    text = v.explanation()
    # Speculative counters known: the drop is attributed to step time, acceptance held.
    assert "acceptance held" in text and "step speed -10.0%" in text
    assert "every point is down by a similar step speed" in text
    assert "constant" in text and "configuration" in text
    assert all(p.status == "fail" for p in v.points)


def test_drop_only_at_long_context(pro6000):
    measured = {60: seed_curve(60) * 1.0, 1024: seed_curve(1024) * 0.97, 3072: seed_curve(3072) * 0.70}
    v = run(pro6000, measured, acceptance=5.0)
    assert v.kind is Kind.CONTEXT_DEPENDENT and not v.passed
    text = v.explanation()
    assert "the step speed worsens with context" in text
    assert "attention backend" in text
    # The linear term is what moved: per 1k context grows far more than the constant.
    base, now = pro6000.model, v.measured_model
    assert now.b_ms_per_token / base.b_ms_per_token - 1 > 0.3
    assert abs(now.a_ms / base.a_ms - 1) < 0.15


def test_acceptance_drop_with_step_time_unchanged(pro6000):
    # Drafts rejected: 1.5 tokens per step instead of 5, the target's step time unchanged.
    measured = {c: seed_curve(c, acc=1.5) for c in (60, 1024, 3072)}
    steps = {c: 1000 * 5.0 / seed_curve(c) for c in (60, 1024, 3072)}
    v = run(pro6000, measured, acceptance=1.5, step_ms=steps)
    assert v.kind is Kind.ACCEPTANCE_COLLAPSE and not v.passed
    text = v.explanation()
    assert "acceptance fell -70.0%" in text and "almost all rejected" in text
    assert "drafts accepted per step 4.00 -> 0.50" in text
    assert "step time held" in text
    assert "draft" in text


def test_partial_acceptance_drop_is_named_an_acceptance_regression(pro6000):
    # A template change: drafts accepted per step 4.0 -> 2.8 (-30%), 3.8 tokens per step, the
    # target's step time unchanged. tok/s falls 24% everywhere: not a uniform (step-cost) drop.
    steps = {c: 1000 * 5.0 / seed_curve(c) for c in (60, 1024, 3072)}
    measured = {c: 1000 * 3.8 / steps[c] for c in steps}
    v = run(pro6000, measured, acceptance=3.8, step_ms=steps)
    assert v.kind is Kind.ACCEPTANCE_REGRESSION and not v.passed
    text = v.explanation()
    assert "acceptance -24.0%, step speed +0.0%" in text
    assert "drafts accepted per step 4.00 -> 2.80" in text and "-30.0% over the points" in text
    assert "partial drop" in text and "step time held" in text
    assert "cost every step pays" not in text  # the old, wrong attribution


def test_an_acceptance_drop_at_one_context_is_attributed_there(pro6000):
    # Measured on the reference (a blended draft): acceptance -33% at the shortest context,
    # held at the others. The median over the curve says "held"; the dropped point does not.
    steps = {c: 1000 * 5.0 / seed_curve(c) for c in (60, 1024, 3072)}
    acc = {60: 3.37, 1024: 5.0, 3072: 5.0}
    cmps = [
        compare_point(pro6000, est(c, 1000 * acc[c] / steps[c], acceptance=acc[c], step_ms=steps[c]), TOL,
                      launch_noise_prior=0.01)
        for c in steps
    ]  # fmt: skip
    v = classify(cmps, pro6000)
    assert v.kind is Kind.ACCEPTANCE_REGRESSION, v.explanation()
    assert "by factor at ctx=60 " in v.explanation()


def test_acceptance_and_step_time_both_moving_names_acceptance_first(pro6000):
    steps = {c: 1.15 * 1000 * 5.0 / seed_curve(c) for c in (60, 1024, 3072)}
    v = run(pro6000, {c: 1000 * 3.8 / steps[c] for c in steps}, acceptance=3.8, step_ms=steps)
    assert v.kind is Kind.ACCEPTANCE_REGRESSION
    assert "step time also rose" in v.explanation()


def test_acceptance_collapse_from_a_report(pro6000):
    kind, text = explain_report(pro6000, 60, 45.0, 1.6, TOL)
    assert kind is Kind.ACCEPTANCE_COLLAPSE
    assert "acceptance FELL: 1.60 tokens/step (0.60 drafts accepted) against 5.00" in text
    assert "held: the throughput lost is the acceptance lost" in text
    # Half the drafts still accepted: a partial drop, an acceptance regression.
    kind, text = explain_report(pro6000, 60, 83.0, 3.0, TOL)
    assert kind is Kind.ACCEPTANCE_REGRESSION


def test_improvement_passes_and_asks_for_refresh(pro6000):
    v = run(pro6000, {c: seed_curve(c) * 1.15 for c in (60, 1024, 3072)}, acceptance=5.0)
    assert v.kind is Kind.IMPROVEMENT and v.passed
    assert "--update-baselines" in v.explanation()


@pytest.mark.parametrize("seed", range(20))
def test_noise_only_variation_passes(pro6000, seed):
    # Measured medians off by up to +-3% with a 2% spread: what an unchanged service looks like.
    rng = np.random.default_rng(seed)
    measured = {c: seed_curve(c) * (1 + rng.uniform(-0.03, 0.03)) for c in (60, 1024, 3072)}
    v = run(pro6000, measured, mad_frac=0.02, acceptance=5.0, noise=0.02)
    assert v.passed, v.explanation()
    assert v.kind in (Kind.PASS, Kind.INCONCLUSIVE)


def test_drop_beyond_tolerance_within_noise_is_inconclusive(pro6000):
    # 8% down, but launches scatter by 15%: not significant, so measure more instead of failing.
    v = run(pro6000, {60: seed_curve(60) * 0.92, 1024: seed_curve(1024)}, noise=0.15)
    p60 = next(p for p in v.points if p.context == 60)
    assert p60.status == "inconclusive"
    assert p60.mde > 0.08  # the printed detectable drop says why
    assert v.kind is Kind.INCONCLUSIVE


def test_small_significant_drop_within_tolerance_passes(pro6000):
    v = run(pro6000, {c: seed_curve(c) * 0.97 for c in (60, 1024, 3072)}, mad_frac=0.002, n=20, noise=0.002)
    assert v.kind is Kind.PASS
    assert all(p.ratio_high < 1 for p in v.points)  # significant, but under the 5% tolerance


def test_detectable_drop_falls_with_launches_not_with_repeats():
    # A baseline of 5 launches whose medians spread 4% (sd of logs): the run's detectable drop
    # shrinks as it adds launches, and more pairs within one launch do not buy it.
    base = make_baseline({c: seed_curve(c) for c in (60, 1024, 3072)}, launch_sd=0.04)
    assert base.point(1024).launch_sd == pytest.approx(0.04, rel=1e-6)
    by_k = [
        compare_point(base, est(1024, 100.0, launches=k), TOL, launch_noise_prior=0.2).mde
        for k in (1, 2, 4, 8)
    ]
    assert by_k == sorted(by_k, reverse=True) and by_k[0] > 1.5 * by_k[-1]
    by_n = {compare_point(base, est(1024, 100.0, n=n), TOL, launch_noise_prior=0.2).mde for n in (5, 20, 80)}
    assert len(by_n) == 1  # within-launch pairs are not the unit of replication
    # The measured launch spread pulls the profile's prior towards itself, more with more launches.
    c = compare_point(base, est(1024, 100.0), TOL, launch_noise_prior=0.2)
    assert c.noise_source == "launches" and c.baseline_launches == 5
    assert c.noise_sd == pytest.approx(((4 * 0.2**2 + 4 * 0.04**2) / 8) ** 0.5, rel=1e-6)
    many = make_baseline({1024: 100.0, 3072: 50.0}, launch_sd=0.04, launches=201)
    c = compare_point(many, est(1024, 100.0), TOL, launch_noise_prior=0.2)
    assert 0.04 < c.noise_sd < 0.05  # ((4 * 0.2**2 + 200 * 0.04**2) / 204) ** 0.5 = 0.0485


def test_a_run_of_m_points_widens_each_interval_so_the_run_keeps_its_false_alarm_rate(pro6000):
    one = compare_point(pro6000, est(1024, 100.0), TOL, launch_noise_prior=0.05)
    four = compare_point(pro6000, est(1024, 100.0), TOL, launch_noise_prior=0.05, family=4)
    assert four.mde > one.mde and four.ratio_high > one.ratio_high
    assert "98.75% interval" in four.describe()


def test_one_launch_baseline_takes_the_profile_noise_and_says_so(pro6000):
    c = compare_point(pro6000, est(1024, seed_curve(1024) * 0.9), TOL, launch_noise_prior=0.08)
    assert c.noise_source == "profile" and c.noise_sd == 0.08
    # one launch against one launch at 8%: a 10% drop is within the noise
    assert c.status == "inconclusive" and c.mde > 0.10
    assert "from the profile (assumed)" in c.describe()


def test_a_drop_at_one_middle_point_is_reported_as_uneven(pro6000):
    measured = {60: seed_curve(60), 1024: seed_curve(1024) * 0.75, 3072: seed_curve(3072) * 0.99}
    v = run(pro6000, measured, acceptance=5.0)
    assert not v.passed
    assert "worst at ctx=1024 (step speed 0.750)" in v.explanation()
    assert "re-run" in v.explanation()
