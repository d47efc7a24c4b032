"""The statistics module on known samples, including empty and single-sample input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perftests.stats import MAD_TO_SIGMA, bootstrap_median_ci, summarize


def test_known_sample():
    s = summarize([10.0, 11.0, 12.0, 13.0, 100.0])
    assert s.n == 5
    assert s.median == 12.0
    assert s.mad == 1.0  # |x - 12| = 2, 1, 0, 1, 88 -> median 1
    assert s.rcv == pytest.approx(MAD_TO_SIGMA / 12.0)
    assert s.ci_low <= s.median <= s.ci_high
    assert s.ci_high <= 100.0  # the outlier does not drag the interval of the median out


def test_empty_sample():
    s = summarize([])
    assert s.n == 0
    assert math.isnan(s.median) and math.isnan(s.ci_low)
    assert s.warning == "no valid samples"
    assert s.to_dict()["median"] is None  # JSON has no NaN


def test_single_sample():
    s = summarize([42.0])
    assert (s.n, s.median, s.mad, s.ci_low, s.ci_high) == (1, 42.0, 0.0, 42.0, 42.0)
    assert "only 1 sample" in s.warning


def test_nan_and_none_are_dropped():
    s = summarize([1.0, float("nan"), None, 3.0, 2.0])  # type: ignore[list-item]
    assert s.n == 3 and s.median == 2.0


def test_stability_warning_threshold():
    quiet = summarize([100, 101, 99, 100, 100.5])
    noisy = summarize([100, 120, 80, 110, 90])
    assert quiet.warning is None
    assert noisy.warning and "unstable" in noisy.warning


def test_bootstrap_is_seeded_and_covers_the_median():
    rng = np.random.default_rng(3)
    x = rng.normal(50, 2, size=15)
    assert bootstrap_median_ci(x) == bootstrap_median_ci(x)
    lo, hi = bootstrap_median_ci(x, confidence=0.95)
    assert lo < np.median(x) < hi
    lo90, hi90 = bootstrap_median_ci(x, confidence=0.80)
    assert lo <= lo90 and hi90 <= hi


def test_bootstrap_coverage_on_normal_samples():
    # Of 200 samples of n=9 from N(0,1) the 95% interval should contain the true median 0 most
    # of the time; percentile bootstrap under-covers at small n, so require 85%.
    rng = np.random.default_rng(11)
    hits = sum(
        lo <= 0.0 <= hi
        for lo, hi in (bootstrap_median_ci(rng.normal(0, 1, 9), resamples=500) for _ in range(200))
    )
    assert hits >= 170
