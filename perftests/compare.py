"""Judging one context point against its baseline: a pure function of (baseline, estimate).

A point fails only when its drop is both beyond the tolerance and statistically significant;
throughput has a lower bound only (faster is never a failure). When noise could explain a drop
beyond tolerance the point is inconclusive, and the run (not the judge) measures more.

Uncertainty is launch-level. log(tok/s) of one launch's median varies between launches with a
standard deviation `sd` (within-launch noise included); the run's figure is the mean of k launch
medians and the baseline's of K, so se(log ratio) = sd * sqrt(1/k + 1/K). `sd` pools the
baseline's and the run's launch-to-launch variance with the profile's stated `launch_noise`,
which counts as PRIOR_DF degrees of freedom (the conjugate scaled-inverse-chi-square update): a
few launches cannot claim a tiny spread by luck, many launches outweigh the profile's figure.
The interval uses Student's t with the pooled degrees of freedom (scipy.stats.t).

A baseline pooled over S sessions (refreshes on other machines or days) knows one more term: a
session's mean moves by `sb` beyond its launches' spread, and the run is one more session. The
baseline's figure is the mean of its sessions' means, so
se^2 = sb^2 (1 + 1/S) + sd^2 (1/k + mean(1/K_i) / S), where `sd` is the within-session launch
spread and `sb`'s estimate comes from the variance of the session means, pooled with the
profile's `session_noise` as `sd` is with `launch_noise` (session_se); the degrees of freedom are
Welch-Satterthwaite's. A baseline of one session cannot see `sb`: the
tolerance has to hold it (the profiles' comments give what was measured between leases).

A run judges m context points at once, so each interval is at confidence 1 - 0.05/m
(Bonferroni): the chance that an unchanged service fails *any* point by chance stays under 5%
two-sided (2.5% for the drop side), not 5% per point. In attach mode the run's rounds share one
service life, so they do not average the launch effect away: the run counts as one launch."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from scipy import stats as sps

from perftests.baseline import Baseline, provisional_band
from perftests.estimate import Estimate, se_log_median

SE_FLOOR = 0.005  # a shared machine is never more precise than 0.5% per launch
PRIOR_DF = 4.0  # weight of the profile's launch_noise, in degrees of freedom
ALPHA = 0.05  # two-sided, for the whole run (Bonferroni over its points)

Status = Literal["pass", "fail", "inconclusive", "improved"]
# pairs: an A/B's paired launches; sessions: a baseline pooled over several refreshes, whose
# between-session spread is in the interval beside the launches'
NoiseSource = Literal["launches", "profile", "pairs", "sessions"]


@dataclass(frozen=True)
class Noise:
    """The between-launch noise a comparison used, and where it came from."""

    sd: float  # of log(tok/s) of one launch's median
    df: float  # degrees of freedom of `sd`, the profile's PRIOR_DF included
    source: NoiseSource  # launches: measured launch spread is in it; profile: the prior alone

    def quantile(self, family: int = 1) -> float:
        """Two-sided quantile at 1 - ALPHA / family for these degrees of freedom."""
        return float(sps.t.ppf(1 - ALPHA / 2 / max(family, 1), self.df))


def launch_noise(base_sds: list[tuple[float, int]], run: Estimate | None, prior: float) -> Noise:
    """Pool the between-launch variance of the baseline point(s) and the run with the profile's
    prior; `base_sds` holds (sd, launches) per source."""
    parts = list(base_sds)
    if run is not None and not run.rounds and run.launches >= 2:
        sd = run.launch_sd
        if sd is not None:
            parts.append((sd, run.launches))
    return pooled_noise(parts, prior)


def pooled_noise(parts: list[tuple[float, int]], prior: float) -> Noise:
    """Pool sample sds, given as (sd, launches), with the prior's PRIOR_DF degrees of freedom."""
    used = [(sd, k - 1) for sd, k in parts if k >= 2]
    df = sum(d for _, d in used)
    var = (PRIOR_DF * prior * prior + sum(d * sd * sd for sd, d in used)) / (PRIOR_DF + df)
    return Noise(max(math.sqrt(var), SE_FLOOR), PRIOR_DF + df, "launches" if df else "profile")


@dataclass(frozen=True)
class PointComparison:
    context: int
    measured: float
    measured_n: int  # valid pairs behind `measured`
    expected: float
    source: Literal["baseline", "model"]  # model: the baseline never measured this context
    ratio: float
    ratio_low: float
    ratio_high: float
    tolerance: float
    mde: float  # smallest drop this point can call significant with the launches it has
    status: Status
    measured_acceptance: float | None = None
    expected_acceptance: float | None = None
    measured_step_ms: float | None = None
    expected_step_ms: float | None = None
    launches: int = 1  # the run's launches (or attach rounds) behind `measured`
    baseline_launches: int = 1
    noise_sd: float = 0.0
    noise_df: float = PRIOR_DF
    noise_source: NoiseSource = "profile"
    family: int = 1  # points judged together in the run (the Bonferroni divisor)
    band_low: float | None = None  # a provisional curve's band at this context (tok/s)
    band_high: float | None = None
    baseline_sessions: int = 1
    session_sd: float | None = None  # between-session noise used (a pooled baseline only)

    @property
    def detectable_drop(self) -> float:
        """The smallest drop that fails: beyond the tolerance and beyond the noise."""
        return max(self.tolerance, self.mde)

    def describe(self) -> str:
        src = "" if self.source == "baseline" else " (from the fitted model: not a baseline point)"
        level = f"{1 - ALPHA / self.family:.2%} interval"
        if self.noise_source == "pairs":
            return (
                f"ctx={self.context}: B {self.measured:.1f} tok/s vs A {self.expected:.1f}, B/A "
                f"{self.ratio:.3f} [{self.ratio_low:.3f}, {self.ratio_high:.3f}] ({self.launches} "
                f"pairs of launches, sd of the paired log ratio {self.noise_sd:.1%}, {level}), "
                f"tolerance -{self.tolerance:.0%}, detectable drop {self.detectable_drop:.1%}: "
                f"{self.status.upper()}"
            )
        if self.noise_source == "sessions":
            noise = (
                f"launch noise {self.noise_sd:.1%} within a session and session noise "
                f"{self.session_sd or 0:.1%} over the baseline's {self.baseline_sessions} "
                f"sessions, {level}"
            )
        else:
            noise = (
                f"launch noise {self.noise_sd:.1%} from "
                + ("the launches" if self.noise_source == "launches" else "the profile (assumed)")
                + f", {level}"
            )
        if self.band_low is not None and self.band_high is not None:
            src += (
                f" (PROVISIONAL: {self.band_low:.1f}..{self.band_high:.1f} over the cost splits "
                f"the extrapolation allows)"
            )
        return (
            f"ctx={self.context}: {self.measured:.1f} tok/s vs {self.expected:.1f}{src}, "
            f"ratio {self.ratio:.3f} [{self.ratio_low:.3f}, {self.ratio_high:.3f}] "
            f"({self.launches} vs {self.baseline_launches} launches, {noise}), "
            f"tolerance -{self.tolerance:.0%}, detectable drop {self.detectable_drop:.1%}: "
            f"{self.status.upper()}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PointComparison:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def judge(ratio: float, low: float, high: float, tolerance: float) -> Status:
    if ratio < 1 - tolerance:
        return "fail" if high < 1 else "inconclusive"
    if ratio > 1 + tolerance and low > 1:
        return "improved"
    return "pass"


def session_se(
    within: Noise, means_var: float | None, prior: float, *, sessions: int, inv_launches: float, k: int
) -> tuple[float, float, float]:
    """(se of the log ratio, its degrees of freedom, the between-session sd used) of a run of
    k launches against a baseline pooled over `sessions` sessions whose mean logs vary by
    `means_var` (see the module's docstring). The estimate is the variance of the session
    means, V (S - 1 degrees of freedom), which holds sb^2 + sd^2 mean(1/K_i); the prior enters
    as that sum at PRIOR_DF. Then se^2 = (1 + 1/S) V + sd^2 (1/k - mean(1/K_i)), and its degrees
    of freedom are Welch-Satterthwaite's over V and sd^2."""
    S, m1, w2 = sessions, inv_launches, within.sd**2
    df_v = PRIOR_DF + (S - 1 if means_var is not None else 0)
    v = (PRIOR_DF * (prior * prior + w2 * m1) + (S - 1) * (means_var or 0.0)) / df_v
    sb2 = max(v - w2 * m1, 0.0)
    se2 = sb2 * (1 + 1 / S) + w2 * (1 / k + m1 / S)  # as (1 + 1/S) V + sd^2 (1/k - m1), sb >= 0
    a, c = (1 + 1 / S) * v, w2 * (1 / k - m1)
    df = (a + c) ** 2 / (a * a / df_v + c * c / within.df) if sb2 > 0 else within.df
    return math.sqrt(se2), max(1.0, min(df, df_v + within.df)), math.sqrt(sb2)


def compare_point(
    baseline: Baseline,
    est: Estimate,
    tolerance: float,
    *,
    launch_noise_prior: float,
    family: int = 1,
    session_noise_prior: float | None = None,
) -> PointComparison:
    """Judge `est` against `baseline` at its context (a baseline point, or the fitted model).
    `session_noise_prior` (default: `launch_noise_prior`) weighs in only where the baseline
    pools several sessions."""
    ctx = est.context
    bp = baseline.point(ctx)
    k = 1 if est.rounds else est.launches
    source: Literal["baseline", "model"]
    session_sd: float | None = None
    if bp is not None:
        expected, source = bp.tps, "baseline"
        K = bp.launches
        sd_w = bp.launch_sd
        noise = launch_noise([(sd_w, bp.launch_df + 1)] if sd_w is not None else [], est, launch_noise_prior)
        if bp.sessions >= 2:
            se, df, session_sd = session_se(
                noise,
                bp.session_means_var,
                launch_noise_prior if session_noise_prior is None else session_noise_prior,
                sessions=bp.sessions,
                inv_launches=bp.inv_launches,
                k=k,
            )
            noise = Noise(noise.sd, df, "sessions")
        else:
            # A one-launch baseline's own within-launch error is part of its launch noise already.
            se = noise.sd * math.sqrt(1 / k + 1 / K)
        exp_acc, exp_step = bp.acceptance_length, bp.step_ms
    else:
        model = baseline.model
        expected, source = model.tps(ctx), "model"
        K = max((p.launches for p in baseline.points), default=1)
        noise = launch_noise(
            [(p.launch_sd, p.launch_df + 1) for p in baseline.points if p.launch_sd is not None],
            est,
            launch_noise_prior,
        )
        # The model's band is a ~95% half-width of its prediction; as a standard error:
        se_model = math.log1p(model.band(tolerance)) / 1.96
        se = math.hypot(noise.sd / math.sqrt(k), se_model)
        if baseline.session_count >= 2:
            # a pooled baseline: the run is one more session here too (its sb pooled over the
            # points that measured it)
            sb = pooled_noise(
                [(p.session_sd, p.sessions) for p in baseline.points if p.session_sd is not None],
                launch_noise_prior if session_noise_prior is None else session_noise_prior,
            )
            S = baseline.session_count
            se = math.hypot(se, sb.sd * math.sqrt(1 + 1 / S))
            session_sd = sb.sd
            noise = Noise(noise.sd, min(noise.df, sb.df), "sessions")
        exp_acc = model.acceptance_length if model.kind == "step_ms" else None
        exp_step = model.cost_ms(ctx) if model.kind == "step_ms" else None
    # The run's launches can never be more precise than their own pairs say.
    se = max(se, est.within_se / math.sqrt(k), SE_FLOOR)
    q = noise.quantile(family)
    ratio = est.tps / expected
    low, high = ratio * math.exp(-q * se), ratio * math.exp(q * se)
    band = provisional_band(baseline, ctx)
    return PointComparison(
        context=ctx,
        measured=est.tps,
        measured_n=est.pairs,
        expected=expected,
        source=source,
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        tolerance=tolerance,
        mde=1 - math.exp(-q * se),
        status=judge(ratio, low, high, tolerance)
        if band is None
        else judge_band(est.tps, band, se, q, tolerance),
        measured_acceptance=est.acceptance,
        expected_acceptance=exp_acc,
        measured_step_ms=est.step_ms,
        expected_step_ms=exp_step,
        launches=est.launches,
        baseline_launches=K,
        noise_sd=noise.sd,
        noise_df=noise.df,
        noise_source=noise.source,
        family=family,
        band_low=band[0] if band else None,
        band_high=band[1] if band else None,
        baseline_sessions=bp.sessions if bp is not None else baseline.session_count,
        session_sd=session_sd,
    )


def judge_band(tps: float, band: tuple[float, float], se: float, q: float, tolerance: float) -> Status:
    """A provisional curve's judgement: inside its band (any split the extrapolation allows)
    passes; below its low end by more than the tolerance, significantly, fails; in between is
    inconclusive (one more point measured on this hardware pins the split)."""
    low, high = band
    if tps >= low:
        return "improved" if tps > high * (1 + tolerance) and tps * math.exp(-q * se) > high else "pass"
    r = tps / low
    return "fail" if r < 1 - tolerance and r * math.exp(q * se) < 1 else "inconclusive"


def launches_needed(
    noise_sd: float,
    baseline_launches: int,
    drop: float,
    *,
    df: float = PRIOR_DF,
    family: int = 1,
    limit: int = 50,
) -> int | None:
    """How many run launches make a drop of `drop` detectable (the run's detectable drop falls
    to `drop`), or None if even `limit` cannot (the baseline's own K launches then dominate)."""
    for k in range(1, limit + 1):
        q = Noise(noise_sd, df + (k - 1), "launches").quantile(family)
        se = max(noise_sd * math.sqrt(1 / k + 1 / baseline_launches), SE_FLOOR)
        if 1 - math.exp(-q * se) <= drop:
            return k
    return None


__all__ = [
    "Noise",
    "PointComparison",
    "compare_point",
    "judge",
    "launch_noise",
    "launches_needed",
    "pooled_noise",
    "se_log_median",
    "session_se",
]
