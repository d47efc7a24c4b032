"""The scaling model of decode cost against context: cost_ms(ctx) = a + b * ctx.

`a` is what every step pays whatever the context (weights, MoE experts, launch overhead); `b` is
what grows with the KV cache (attention reads it all). With speculative step counts the cost is
per verify step and tok/s = acceptance length / step time; without, it is per token.

Fitted by least squares on relative error (weights 1/y^2), so the short-context points, where
cost is small, count as much as the long ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

Kind = Literal["step_ms", "token_ms"]


@dataclass(frozen=True)
class ScalingModel:
    kind: Kind
    a_ms: float
    b_ms_per_token: float
    r2: float
    max_rel_residual: float  # worst |fit - measured| / measured over the fitted points
    acceptance_length: float | None  # median over points; used to turn step time into tok/s
    contexts: tuple[int, ...]

    def cost_ms(self, ctx: float) -> float:
        return self.a_ms + self.b_ms_per_token * ctx

    def tps(self, ctx: float, acceptance_length: float | None = None) -> float:
        per = 1.0
        if self.kind == "step_ms":
            per = acceptance_length or self.acceptance_length or 1.0
        return 1000.0 * per / self.cost_ms(ctx)

    def per_token(self) -> tuple[float, float]:
        """(a, b) per token: a per-step model divided by its acceptance length."""
        per = (self.acceptance_length or 1.0) if self.kind == "step_ms" else 1.0
        return self.a_ms / per, self.b_ms_per_token / per

    def constant_share(self, ctx: float) -> float:
        """Fraction of the cost at ctx that is the constant term."""
        return self.a_ms / self.cost_ms(ctx)

    def band(self, tolerance: float) -> float:
        """Relative half-width of the model's prediction band: the tolerance, widened by how well
        the model fits its own points (a poor fit predicts less precisely)."""
        return max(tolerance, self.max_rel_residual * 1.5)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["contexts"] = list(self.contexts)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScalingModel:
        return cls(
            kind=d["kind"],
            a_ms=float(d["a_ms"]),
            b_ms_per_token=float(d["b_ms_per_token"]),
            r2=float(d["r2"]),
            max_rel_residual=float(d["max_rel_residual"]),
            acceptance_length=(None if d.get("acceptance_length") is None else float(d["acceptance_length"])),
            contexts=tuple(int(c) for c in d["contexts"]),
        )


def fit(
    contexts: Sequence[int], cost_ms: Sequence[float], kind: Kind, acceptance_length: float | None = None
) -> ScalingModel:
    """Fit cost = a + b*ctx. Needs at least two distinct contexts; a and b are kept non-negative
    (a negative constant or slope has no physical meaning and would extrapolate wildly)."""
    x = np.asarray(contexts, dtype=float)
    y = np.asarray(cost_ms, dtype=float)
    if x.size < 2 or np.unique(x).size < 2:
        raise ValueError("the scaling model needs points at two or more distinct context lengths")
    if np.any(y <= 0) or not np.all(np.isfinite(y)):
        raise ValueError(f"costs must be positive and finite, got {list(y)}")
    w = 1.0 / y  # sqrt of weights 1/y^2
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    if b < 0:  # cost cannot fall with context: best constant model
        a, b = float(np.exp(np.mean(np.log(y)))), 0.0
    elif a < 0:  # no constant term: best proportional model
        a, b = 0.0, float(np.sum(x * y * w**2) / np.sum(x * x * w**2))
    pred = a + b * x
    rel = (pred - y) / y
    ss_res = float(np.sum(((y - pred) * w) ** 2))
    ss_tot = float(np.sum(((y - np.average(y, weights=w**2)) * w) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return ScalingModel(
        kind=kind,
        a_ms=float(a),
        b_ms_per_token=float(b),
        r2=r2,
        max_rel_residual=float(np.max(np.abs(rel))),
        acceptance_length=acceptance_length,
        contexts=tuple(int(c) for c in x),
    )


def fit_curve(
    contexts: Sequence[int], tps: Sequence[float], acceptance: Sequence[float | None] | None = None
) -> ScalingModel:
    """Fit from a measured curve: on step time where acceptance lengths are known, else per token."""
    acc = [a for a in (acceptance or []) if a]
    if acceptance and len(acc) == len(tps):
        step = [1000.0 * a / t for a, t in zip(acc, tps, strict=True)]
        return fit(contexts, step, "step_ms", float(np.median(acc)))
    return fit(contexts, [1000.0 / t for t in tps], "token_ms")


def split_band(
    a_ms: float, b_ms: float, anchor_ctx: int, anchor_tps: float, ctx: float, factor: float
) -> tuple[float, float, float]:
    """Another machine's cost a + b*ctx carried over to one measured `anchor_tps` at `anchor_ctx`
    here, with the two terms scaled by factors whose quotient r lies in [1/factor, factor]
    (triage/extrapolate.py derives why): (central at r = 1, low, high) tok/s at ctx."""

    def at(r: float) -> float:
        return anchor_tps * (a_ms + r * b_ms * anchor_ctx) / (a_ms + r * b_ms * ctx)

    lo, hi = at(factor), at(1 / factor)
    return at(1.0), min(lo, hi), max(lo, hi)
