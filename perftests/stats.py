"""Robust summary statistics for repeated measurements (numpy only).

Medians and MAD rather than means and standard deviations: one preempted request on a shared
machine must not move the figure. The bootstrap interval of the median is what later comparison
with a baseline uses; the stability warning says when the spread is too high to trust a figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample times this estimates its standard deviation
UNSTABLE_RCV = 0.05  # robust coefficient of variation above which a figure gets a warning
MIN_SAMPLES = 3


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mad: float
    rcv: float  # robust coefficient of variation: 1.4826 * MAD / median
    cv: float  # classic stdev / mean, for readers used to it
    ci_low: float
    ci_high: float
    confidence: float
    warning: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def bootstrap_median_ci(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median; seeded, so a record recomputes exactly."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(x, size=(resamples, x.size), replace=True), axis=1)
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(medians, alpha)), float(np.quantile(medians, 1.0 - alpha))


def summarize(
    values: Sequence[float], confidence: float = 0.95, unstable_rcv: float = UNSTABLE_RCV
) -> Summary:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, confidence, "no valid samples")
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    rcv = MAD_TO_SIGMA * mad / abs(med) if med else math.inf
    cv = float(np.std(x, ddof=1) / abs(np.mean(x))) if x.size > 1 and np.mean(x) else 0.0
    lo, hi = bootstrap_median_ci(x.tolist(), confidence)
    warning = None
    if x.size < MIN_SAMPLES:
        warning = f"only {x.size} sample(s): no spread estimate, do not trust this figure alone"
    elif rcv > unstable_rcv:
        warning = (
            f"unstable: robust CV {rcv:.1%} exceeds {unstable_rcv:.0%}; "
            "the machine is noisy or the span too short, add repeats or quiet the host"
        )
    return Summary(int(x.size), med, mad, rcv, cv, lo, hi, confidence, warning)
