"""Paired A/B statistics (pure): base A and candidate B launched alternately on one machine, each
launch one sample, the j-th launch of A paired with the j-th of B (adjacent in ABBA order).

Why paired: between launches the machine's level moves (sd of log tok/s 0.05-0.13 per launch on
the 2-core CI VMs, docs/gate-validation.md), and it moves slowly, so two adjacent launches share
most of it. The difference of their logs, d_j = log B_j - log A_j, cancels what they share; in
ABBA / BAAB blocks a linear drift cancels exactly over each block. The decision is Student's t on
the d_j (the paired t-interval, scipy.stats.t): B/A = exp(mean d), its interval exp(mean d +-
t * sd(d) / sqrt(n)), at 1 - 0.05/m for the m tests of the run (Bonferroni, as compare.py). The t
distribution keeps a small sample's spread honest, and the sd of the d_j is pooled with a prior,
the profile's launch_noise (and shape_noise for the quotients) times sqrt(2), counted as
PRIOR_DF = 4 degrees of freedom, exactly as the stored-curve gate pools its launch noise: in the
first A/A campaigns four pairs of an unchanged service happened to agree within sd 4% at 4096
tokens with B ahead in all four (1.19 [1.05, 1.35]), a false FASTER that the t quantile alone
did not prevent on this VM, whose launches move by 8-10% each.

Beside it, scipy.stats.mannwhitneyu on the launch medians (unpaired, distribution-free) is
recorded as a cross-check, not a decision: it ignores the pairing, so it needs more launches
(with 4 per side its smallest two-sided p is 0.029), but it does not assume the differences are
normal. A decision the rank test contradicts is worth a second look, and the record shows both.

Three answers per context, with the run's tolerance t (as for the stored-curve gate):
- different: SLOWER when B/A < 1 - t and the interval lies below 1; FASTER when B/A > 1 + t and
  the interval lies above 1;
- same: the interval excludes a drop of t (its low end is at or above 1 - t);
- unknown: neither; another block of pairs is measured, within the budget (pairs_needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from perftests.compare import ALPHA, PRIOR_DF, SE_FLOOR, PointComparison, Status
from perftests.shape import ShapeComparison

# Status of compare.py, read for an A/B: the same names, so the curve verdict and the reports
# are shared; these are the words an A/B prints for them.
WORDS: dict[str, str] = {"pass": "SAME", "fail": "SLOWER", "improved": "FASTER", "inconclusive": "UNKNOWN"}


@dataclass(frozen=True)
class LaunchFigure:
    """One launch's figure at one context: its median tok/s and se(log median) from its pairs."""

    tps: float
    se: float
    acceptance: float | None = None
    step_ms: float | None = None


def ab_judge(ratio: float, low: float, high: float, tolerance: float) -> Status:
    """Different (fail / improved), same (pass), or unknown (inconclusive)."""
    if ratio < 1 - tolerance and high < 1:
        return "fail"
    if ratio > 1 + tolerance and low > 1:
        return "improved"
    if low >= 1 - tolerance:
        return "pass"
    return "inconclusive"


@dataclass(frozen=True)
class PairedDiff:
    """The paired log differences of one test (a context, or a within-launch quotient)."""

    diffs: tuple[float, ...]  # log B_j - log A_j per pair
    within_se: float  # median over pairs of the pair's own se of its difference
    family: int
    prior_sd: float = 0.0  # sd of a paired difference assumed before any pair (0: none)

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def sample_sd(self) -> float | None:
        return float(np.std(self.diffs, ddof=1)) if self.n >= 2 else None

    @property
    def df(self) -> float:
        return (PRIOR_DF if self.prior_sd > 0 else 0.0) + max(self.n - 1, 0)

    @property
    def sd(self) -> float | None:
        """The pairs' sd pooled with the prior's PRIOR_DF degrees of freedom (as the
        stored-curve gate pools the profile's launch_noise): four pairs that happen to agree
        cannot claim a 4% spread on a machine whose launches move by 10%."""
        s = self.sample_sd
        if self.prior_sd <= 0:
            return s
        k = max(self.n - 1, 0)
        var = (PRIOR_DF * self.prior_sd**2 + k * (s or 0.0) ** 2) / (PRIOR_DF + k)
        return math.sqrt(var)

    def interval(self) -> tuple[float, float, float, float]:
        """(ratio, low, high, detectable drop) of B/A at 1 - ALPHA/family."""
        mean = float(np.mean(self.diffs))
        ratio = math.exp(mean)
        sd = self.sd
        if self.n < 2 or sd is None:
            return ratio, 0.0, math.inf, 1.0
        # The pairs cannot be more precise than their own medians say, nor than the floor.
        se = max(sd / math.sqrt(self.n), self.within_se / math.sqrt(self.n), SE_FLOOR)
        q = float(sps.t.ppf(1 - ALPHA / 2 / max(self.family, 1), self.df))
        return ratio, ratio * math.exp(-q * se), ratio * math.exp(q * se), 1 - math.exp(-q * se)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value of the launch medians (None with fewer than 2 a side)."""
    if len(a) < 2 or len(b) < 2:
        return None
    return float(sps.mannwhitneyu(list(b), list(a), alternative="two-sided").pvalue)


def _diff(
    a: Sequence[LaunchFigure], b: Sequence[LaunchFigure], family: int, prior_sd: float = 0.0
) -> PairedDiff:
    diffs = tuple(math.log(y.tps / x.tps) for x, y in zip(a, b, strict=True))
    within = float(np.median([math.hypot(x.se, y.se) for x, y in zip(a, b, strict=True)]))
    return PairedDiff(diffs, within, family, prior_sd)


def _gm(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return float(np.exp(np.mean(np.log(v)))) if v else None


def compare_pairs(
    context: int,
    a: Sequence[LaunchFigure],
    b: Sequence[LaunchFigure],
    tolerance: float,
    *,
    family: int,
    pairs_n: int,
    prior_sd: float = 0.0,
) -> PointComparison:
    """B against A at one context from paired launches (a[j] with b[j]). The result is a
    PointComparison (A in the baseline's place) so that the curve verdict and every report read
    it as they read a gate run's: `launches` and `baseline_launches` are the pairs, `noise_sd`
    the sd of the paired log differences, `noise_df` its degrees of freedom."""
    if len(a) != len(b) or not a:
        raise ValueError(f"ctx={context}: {len(a)} A launches against {len(b)} B launches")
    d = _diff(a, b, family, prior_sd)
    ratio, low, high, mde = d.interval()
    return PointComparison(
        context=context,
        measured=_gm([x.tps for x in b]) or math.nan,
        measured_n=pairs_n,
        expected=_gm([x.tps for x in a]) or math.nan,
        source="baseline",
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        tolerance=tolerance,
        mde=mde,
        status=ab_judge(ratio, low, high, tolerance),
        measured_acceptance=_gm([x.acceptance for x in b]),
        expected_acceptance=_gm([x.acceptance for x in a]),
        measured_step_ms=_gm([x.step_ms for x in b]),
        expected_step_ms=_gm([x.step_ms for x in a]),
        launches=d.n,
        baseline_launches=d.n,
        noise_sd=d.sd if d.sd is not None else math.nan,
        noise_df=d.df,
        noise_source="pairs",
        family=family,
    )


def compare_pair_shapes(
    a: Mapping[int, Sequence[LaunchFigure]],
    b: Mapping[int, Sequence[LaunchFigure]],
    tolerance: float,
    *,
    family: int,
    prior_sd: float = 0.0,
) -> list[ShapeComparison]:
    """Each context over the shortest, within each launch, B's against A's, pair by pair: the
    quotient's paired difference cancels the machine's level and the pair's shared drift."""
    contexts = sorted(c for c in a if c in b and a[c] and len(a[c]) == len(b[c]))
    if len(contexts) < 2:
        return []
    ref = contexts[0]
    out = []
    for ctx in contexts[1:]:
        qa = [
            LaunchFigure(x.tps / r.tps, math.hypot(x.se, r.se)) for x, r in zip(a[ctx], a[ref], strict=True)
        ]
        qb = [
            LaunchFigure(x.tps / r.tps, math.hypot(x.se, r.se)) for x, r in zip(b[ctx], b[ref], strict=True)
        ]
        d = _diff(qa, qb, family, prior_sd)
        ratio, low, high, mde = d.interval()
        status = ab_judge(ratio, low, high, tolerance)
        out.append(
            ShapeComparison(
                context=ctx,
                reference=ref,
                measured=_gm([x.tps for x in qb]) or math.nan,
                expected=_gm([x.tps for x in qa]) or math.nan,
                ratio=ratio,
                ratio_low=low,
                ratio_high=high,
                tolerance=tolerance,
                mde=mde,
                # A quotient that rose is the short context slowing: the points speak to it.
                status="pass" if status == "improved" else status,
                launches=d.n,
                baseline_launches=d.n,
                noise_sd=d.sd if d.sd is not None else math.nan,
                noise_df=d.df,
                noise_source="pairs",
                family=family,
            )
        )
    return out


def pairs_needed(
    sd: float, tolerance: float, *, family: int, limit: int = 200, prior: bool = False
) -> int | None:
    """Pairs at which the interval's half-width falls to half the tolerance (in log): enough to
    tell B/A near 1 from B/A near 1 - tolerance at this noise. None if `limit` is not enough.
    `prior`: the interval's degrees of freedom include the prior's PRIOR_DF."""
    target = -math.log(1 - tolerance) / 2
    for n in range(2, limit + 1):
        q = float(sps.t.ppf(1 - ALPHA / 2 / max(family, 1), n - 1 + (PRIOR_DF if prior else 0)))
        if q * max(sd, SE_FLOOR) / math.sqrt(n) <= target:
            return n
    return None


def pairs_to_decide(
    ratio: float, sd: float, tolerance: float, *, family: int, limit: int = 200
) -> int | None:
    """Pairs at which a test with this B/A and this sd of the paired log ratio would be decided,
    if both held: SLOWER / FASTER once the interval excludes 1 (ratio beyond the tolerance), SAME
    once it excludes a drop of the tolerance (ratio above 1 - tolerance); the nearer of the two.
    The projection uses the pairs' own sd, not the prior (which only weighs while pairs are few).
    None: `limit` pairs would not decide it (a ratio sitting on a boundary)."""
    lr = math.log(ratio)
    margins = []
    if ratio < 1 - tolerance or ratio > 1 + tolerance:
        margins.append(abs(lr))  # different: the interval must clear 1
    if ratio > 1 - tolerance:
        margins.append(lr - math.log(1 - tolerance))  # same: the interval must clear 1 - tolerance
    margin = max(margins, default=0.0)
    if margin <= 0:
        return None
    for n in range(2, limit + 1):
        q = float(sps.t.ppf(1 - ALPHA / 2 / max(family, 1), n - 1 + PRIOR_DF))
        if q * max(sd, SE_FLOOR) / math.sqrt(n) <= margin:
            return n
    return None


__all__ = [
    "pairs_to_decide",
    "WORDS",
    "LaunchFigure",
    "PairedDiff",
    "ab_judge",
    "compare_pair_shapes",
    "compare_pairs",
    "mann_whitney_p",
    "pairs_needed",
]
