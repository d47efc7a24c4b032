"""Attribution by factor (pure): with speculative decoding tok/s = tokens per verify step / step
time, so a point's ratio to its baseline splits into an acceptance factor and a step-time factor,
and the verdict can name the one that moved.

    ratio = (acceptance now / acceptance then) x (step time then / step time now)

Both factors read as speeds (below 1: slower because of it). The drafts accepted per step
(acceptance length - 1: the first token of a step comes from the target, not a draft) say
whether acceptance fell partly (a regression) or nearly to nothing (a collapse)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perftests.compare import PointComparison

# Drafts accepted per step below this share of the baseline's: a collapse (near one token per
# step, the drafts rejected); above it a partial drop, an acceptance regression. On the reference
# a draft blended 10x further from the target (draft-mix 0.0003 -> 0.003) halves them: partial.
COLLAPSE = 0.25


@dataclass(frozen=True)
class Factors:
    context: int
    ratio: float  # tok/s, now over then
    acceptance: float  # tokens per step, now over then
    step: float  # step time, then over now (a speed: below 1 the steps got slower)
    drafts: float | None  # drafts accepted per step, now over then (None: the baseline had none)
    acceptance_now: float
    acceptance_then: float
    step_ms_now: float
    step_ms_then: float


def split(p: PointComparison) -> Factors | None:
    """The factors of one comparison, or None when it lacks speculative counters."""
    acc_now, acc_then = p.measured_acceptance, p.expected_acceptance
    step_now, step_then = p.measured_step_ms, p.expected_step_ms
    if not (acc_now and acc_then and step_now and step_then):
        return None
    drafts = (acc_now - 1) / (acc_then - 1) if acc_then > 1.01 else None
    return Factors(
        p.context,
        p.ratio,
        acc_now / acc_then,
        step_then / step_now,
        max(drafts, 0.0) if drafts is not None else None,
        acc_now,
        acc_then,
        step_now,
        step_then,
    )


def median(xs: Sequence[float]) -> float:
    s = sorted(x for x in xs if math.isfinite(x))
    if not s:
        return math.nan
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def pct(x: float) -> str:
    return f"{x - 1:+.1%}"


def describe(fs: Sequence[Factors]) -> str:
    """One line: each factor's median over the points given (those that dropped), and the drafts
    accepted per step."""
    acc, step = median([f.acceptance for f in fs]), median([f.step for f in fs])
    first = fs[0]
    drafts = [f.drafts for f in fs if f.drafts is not None]
    d = (
        f"; drafts accepted per step {first.acceptance_then - 1:.2f} -> "
        f"{first.acceptance_now - 1:.2f} at ctx={first.context} ({pct(median(drafts))} over the points)"
        if drafts
        else ""
    )
    where = ", ".join(str(f.context) for f in fs)
    return (
        f"by factor at ctx={where} (tok/s = tokens per step / step time): acceptance {pct(acc)}, step speed "
        f"{pct(step)} (step time {first.step_ms_then:.2f} -> {first.step_ms_now:.2f} ms at "
        f"ctx={first.context}){d}"
    )


def is_collapse(fs: Sequence[Factors]) -> bool:
    drafts = [f.drafts for f in fs if f.drafts is not None]
    return bool(drafts) and median(drafts) < COLLAPSE


__all__ = ["COLLAPSE", "Factors", "describe", "is_collapse", "median", "pct", "split"]
