"""Point-by-point comparison of a measured curve with its baseline.

A point fails only when its drop is both beyond the tolerance and statistically significant;
throughput has a lower bound only (faster is never a failure). When noise could explain a drop
beyond tolerance the point is inconclusive, and the gate re-measures it before concluding.

Uncertainty: the standard error of a median is about 1.2533 * sigma / sqrt(n), with sigma from the
MAD; on the log scale the two sides' errors add in quadrature. A floor of 0.5% keeps a lucky
sample with zero spread from claiming more precision than a shared machine has."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from perftests.baseline import Baseline
from perftests.stats import MAD_TO_SIGMA

Z95 = 1.959964
SE_FLOOR = 0.005
MEDIAN_EFFICIENCY = 1.2533  # se(median) / se(mean) for normal data

Status = Literal["pass", "fail", "inconclusive", "improved"]


def se_log_median(median: float, mad: float, n: int) -> float:
    if n < 1 or median <= 0:
        return math.inf
    return max(SE_FLOOR, MEDIAN_EFFICIENCY * MAD_TO_SIGMA * mad / median / math.sqrt(n))


@dataclass(frozen=True)
class PointComparison:
    context: int
    measured: float
    measured_n: int
    expected: float
    source: Literal["baseline", "model"]  # model: the baseline never measured this context
    ratio: float
    ratio_low: float
    ratio_high: float
    tolerance: float
    mde: float  # smallest drop this point can call significant at its current repeats
    status: Status
    measured_acceptance: float | None = None
    expected_acceptance: float | None = None
    measured_step_ms: float | None = None
    expected_step_ms: float | None = None

    @property
    def detectable_drop(self) -> float:
        """The smallest drop that fails: beyond the tolerance and beyond the noise."""
        return max(self.tolerance, self.mde)

    def describe(self) -> str:
        src = "" if self.source == "baseline" else " (from the fitted model: not a baseline point)"
        return (f"ctx={self.context}: {self.measured:.1f} tok/s vs {self.expected:.1f}{src}, "
                f"ratio {self.ratio:.3f} [{self.ratio_low:.3f}, {self.ratio_high:.3f}], "
                f"tolerance -{self.tolerance:.0%}, detectable drop {self.detectable_drop:.1%}: "
                f"{self.status.upper()}")

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


def compare_point(baseline: Baseline, context: int, median: float, mad: float, n: int,
                  tolerance: float, *, acceptance: float | None = None,
                  step_ms: float | None = None) -> PointComparison:
    bp = baseline.point(context)
    if bp is not None:
        expected, source = bp.tps, "baseline"
        se_b = se_log_median(bp.tps, bp.tps_mad, bp.n)
        exp_acc, exp_step = bp.acceptance_length, bp.step_ms
    else:
        model = baseline.model
        expected, source = model.tps(context), "model"
        # The model's band is a ~95% half-width; as a standard error on the log scale:
        se_b = max(SE_FLOOR, math.log1p(model.band(tolerance)) / Z95)
        exp_acc = model.acceptance_length if model.kind == "step_ms" else None
        exp_step = model.cost_ms(context) if model.kind == "step_ms" else None
    se = math.hypot(se_log_median(median, mad, n), se_b)
    ratio = median / expected
    low, high = ratio * math.exp(-Z95 * se), ratio * math.exp(Z95 * se)
    return PointComparison(
        context=context, measured=median, measured_n=n, expected=expected, source=source,
        ratio=ratio, ratio_low=low, ratio_high=high, tolerance=tolerance,
        mde=1 - math.exp(-Z95 * se), status=judge(ratio, low, high, tolerance),
        measured_acceptance=acceptance, expected_acceptance=exp_acc,
        measured_step_ms=step_ms, expected_step_ms=exp_step)
