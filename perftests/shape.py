"""The curve's shape, judged within launches (pure): how each context compares with the shortest
one *of the same launch*, against the same quotient in the baseline's launches.

Why: between launches the whole machine moves (on the 2-core CI VMs one launch's medians sit
20-30% from the next's, every context together), and that uniform swing hides a cost that grows
with context inside the per-point intervals. Divided by the shortest context of the same launch
it cancels: in the cpu-reference refresh (5 launches, 2026-12-03) the sd of log tok/s between
launches was 0.19-0.32 per context, of log(tok/s / tok/s at ctx=64) 0.08-0.13. A drop of this
quotient is the linear term moving (attention, KV cache), whatever the machine's level did.

The statistics are those of compare.py: the between-launch sd of the log quotient pools the
baseline's launches, the run's and the profile's `shape_noise` prior; Student's t; Bonferroni
over every test the run makes (its points and its shape quotients)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from perftests.baseline import Baseline
from perftests.compare import ALPHA, SE_FLOOR, NoiseSource, Status, judge, pooled_noise
from perftests.estimate import se_log_median
from perftests.measure import Point


@dataclass(frozen=True)
class ShapeComparison:
    """ctx's throughput as a share of the reference context's, run against baseline."""

    context: int
    reference: int  # the shortest context, measured in the same launches
    measured: float  # the run's quotient tok/s(ctx) / tok/s(reference), geometric over launches
    expected: float  # the baseline's
    ratio: float  # measured / expected
    ratio_low: float
    ratio_high: float
    tolerance: float
    mde: float  # smallest drop of the quotient this run can call significant
    status: Status
    launches: int  # the run's launches that measured both contexts
    baseline_launches: int
    noise_sd: float
    noise_df: float
    noise_source: NoiseSource
    family: int

    @property
    def detectable_drop(self) -> float:
        return max(self.tolerance, self.mde)

    def describe(self) -> str:
        if self.noise_source == "pairs":
            return (
                f"ctx={self.context} relative to ctx={self.reference} in the same launch: B "
                f"{self.measured:.3f} vs A {self.expected:.3f}, B/A {self.ratio:.3f} "
                f"[{self.ratio_low:.3f}, {self.ratio_high:.3f}] ({self.launches} pairs of launches, "
                f"sd of the paired log ratio {self.noise_sd:.1%}, "
                f"{1 - ALPHA / self.family:.2%} interval), detectable drop "
                f"{self.detectable_drop:.1%}: {self.status.upper()}"
            )
        noise = (
            f"launch noise of the quotient {self.noise_sd:.1%} from "
            + ("the launches" if self.noise_source == "launches" else "the profile (assumed)")
            + f", {1 - ALPHA / self.family:.2%} interval"
        )
        return (
            f"ctx={self.context} relative to ctx={self.reference} in the same launch: "
            f"{self.measured:.3f} vs {self.expected:.3f} in the baseline, ratio {self.ratio:.3f} "
            f"[{self.ratio_low:.3f}, {self.ratio_high:.3f}] ({self.launches} vs "
            f"{self.baseline_launches} launches, {noise}), detectable drop "
            f"{self.detectable_drop:.1%}: {self.status.upper()}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShapeComparison:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def _launch_medians(points: Iterable[Point]) -> dict[int, dict[int, tuple[float, float]]]:
    """launch -> context -> (log median tok/s, its within-launch se)."""
    out: dict[int, dict[int, tuple[float, float]]] = {}
    for p in points:
        s = p.tps()
        if s.n and s.median > 0:
            out.setdefault(p.launch, {})[p.context] = (
                math.log(s.median),
                se_log_median(s.median, s.mad, s.n),
            )
    return out


def _baseline_logs(baseline: Baseline, ctx: int, ref: int) -> list[float] | None:
    """The baseline's per-launch log quotients; None when its launches cannot be paired."""
    b, r = baseline.point(ctx), baseline.point(ref)
    if b is None or r is None:
        return None
    if b.launch_tps and r.launch_tps:
        # paired launch by launch within each session (a pooled baseline holds several)
        gb, gr = b.groups(), r.groups()
        if len(gb) != len(gr) or any(len(x) != len(y) for x, y in zip(gb, gr, strict=True)):
            return None  # not every launch measured both: no pairing to trust
        return [math.log(x / y) for xs, ys in zip(gb, gr, strict=True) for x, y in zip(xs, ys, strict=True)]
    return [math.log(b.tps / r.tps)]  # a one-launch baseline


def compare_shapes(
    baseline: Baseline,
    points: Sequence[Point],
    tolerance: float,
    *,
    shape_noise_prior: float,
    family: int,
    rounds: bool = False,
) -> list[ShapeComparison]:
    """One comparison per baseline context above the shortest one the run measured."""
    launches = _launch_medians(points)
    measured = sorted({c for per in launches.values() for c in per})
    common = [c for c in measured if baseline.point(c) is not None]
    if len(common) < 2:
        return []
    ref = common[0]
    out = []
    for ctx in common[1:]:
        base = _baseline_logs(baseline, ctx, ref)
        pairs = [(per[ctx], per[ref]) for per in launches.values() if ctx in per and ref in per]
        if not base or not pairs:
            continue
        run = [a[0] - b[0] for a, b in pairs]
        within = float(np.median([math.hypot(a[1], b[1]) for a, b in pairs]))
        # Attached rounds share one service life: they count as one launch (as in compare.py).
        k = 1 if rounds else len(run)
        K = len(base)
        parts = [(float(np.std(base, ddof=1)), K)] if K >= 2 else []
        if not rounds and len(run) >= 2:
            parts.append((float(np.std(run, ddof=1)), len(run)))
        noise = pooled_noise(parts, shape_noise_prior)
        se = max(noise.sd * math.sqrt(1 / k + 1 / K), within / math.sqrt(k), SE_FLOOR)
        q = noise.quantile(family)
        m_log, b_log = float(np.mean(run)), float(np.mean(base))
        ratio = math.exp(m_log - b_log)
        low, high = ratio * math.exp(-q * se), ratio * math.exp(q * se)
        status = judge(ratio, low, high, tolerance)
        out.append(
            ShapeComparison(
                context=ctx,
                reference=ref,
                measured=math.exp(m_log),
                expected=math.exp(b_log),
                ratio=ratio,
                ratio_low=low,
                ratio_high=high,
                tolerance=tolerance,
                mde=1 - math.exp(-q * se),
                # A quotient that rose is the short context slowing (the constant term) or the
                # long one speeding up: the per-point judgements speak to both, not this one.
                status="pass" if status == "improved" else status,
                launches=len(run),
                baseline_launches=K,
                noise_sd=noise.sd,
                noise_df=noise.df,
                noise_source=noise.source,
                family=family,
            )
        )
    return out


def shape_tests(contexts: Sequence[int]) -> int:
    """How many shape quotients a run over `contexts` judges (for the Bonferroni family)."""
    return max(len(contexts) - 1, 0)
