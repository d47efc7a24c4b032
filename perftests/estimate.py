"""Launch-level estimates: one figure per context from the medians of whole launches.

The unit of replication is a launch (a fresh service process, its own memory layout, its own
luck with the machine), not a request: between launches of an unchanged service the medians move
more than within one. So each launch contributes one median per context, and a context's figure
is the geometric mean of those medians; the spread between them is what the comparison's
interval is built from (compare.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from perftests.measure import Point
from perftests.stats import MAD_TO_SIGMA

MEDIAN_EFFICIENCY = 1.2533  # se(median) / se(mean) for normal data


def se_log_median(median: float, mad: float, n: int) -> float:
    """Standard error of log(median) of n samples, from their MAD (within one launch)."""
    if n < 1 or median <= 0 or not math.isfinite(median):
        return math.inf
    return MEDIAN_EFFICIENCY * MAD_TO_SIGMA * mad / median / math.sqrt(n)


def log_sd(values: Sequence[float]) -> float | None:
    """Sample standard deviation of log(values); None with fewer than two."""
    if len(values) < 2:
        return None
    return float(np.std(np.log(np.asarray(values, dtype=float)), ddof=1))


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


@dataclass(frozen=True)
class Estimate:
    """A context's figure over the launches that measured it."""

    context: int
    tps: float  # geometric mean of the launches' medians
    launch_tps: tuple[float, ...]  # each launch's median tok/s, in launch order
    within_se: float  # median over launches of se(log median) from the launch's own pairs
    within_rcv: float  # median over launches of the pairs' robust CV
    pairs: int  # valid pairs over all launches
    acceptance: float | None = None  # tokens per verify step (geometric mean over launches)
    step_ms: float | None = None
    engine_tps: float | None = None
    rounds: bool = False  # attach mode: the "launches" are rounds of one service's life

    @property
    def launches(self) -> int:
        return len(self.launch_tps)

    @property
    def launch_sd(self) -> float | None:
        """Spread between the launches' medians (sd of their logs)."""
        return log_sd(self.launch_tps)


def _gm_or_none(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return geomean(xs) if xs else None


def estimate(points: Sequence[Point], *, rounds: bool = False) -> Estimate | None:
    """The estimate of one context from its points (one per launch); None if none is valid."""
    usable = [p for p in points if p.tps().n]
    if not usable:
        return None
    ctx = {p.context for p in usable}
    if len(ctx) != 1:
        raise ValueError(f"points of several contexts given together: {sorted(ctx)}")
    sums = [p.tps() for p in usable]
    medians = tuple(s.median for s in sums)

    def med(xs: list[float]) -> float:
        return float(np.median(xs))

    acc = [p.acceptance_length() for p in usable]
    step = [p.step_ms() for p in usable]
    eng = [p.engine_tps() for p in usable]
    return Estimate(
        context=usable[0].context,
        tps=geomean(medians),
        launch_tps=medians,
        within_se=med([se_log_median(s.median, s.mad, s.n) for s in sums]),
        within_rcv=med([s.rcv for s in sums]),
        pairs=sum(s.n for s in sums),
        acceptance=_gm_or_none(a.median if a.n else None for a in acc),
        step_ms=_gm_or_none(s.median if s.n else None for s in step),
        engine_tps=_gm_or_none(e.median if e.n else None for e in eng),
        rounds=rounds,
    )


def estimates(points: Iterable[Point], *, rounds: bool = False) -> dict[int, Estimate]:
    """Every context's estimate, from points of any number of launches."""
    by_ctx: dict[int, list[Point]] = {}
    for p in points:
        by_ctx.setdefault(p.context, []).append(p)
    out = {}
    for ctx in sorted(by_ctx):
        e = estimate(by_ctx[ctx], rounds=rounds)
        if e is not None:
            out[ctx] = e
    return out
