"""Another hardware's curve carried over to this one, with the uncertainty of doing so (pure).

The other machine's cost per step (or token) is a + b * ctx: a what every step pays (weights,
MoE, launch overheads), b what grows with the KV cache (attention). On this machine both terms
are scaled, but not necessarily by the same factor: with s_a and s_b the two factors and their
quotient r = s_b / s_a, one figure measured here at ctx0 (the anchor) fixes s_a, and

    cost_here(ctx) / cost_here(ctx0) = (a + r * b * ctx) / (a + r * b * ctx0).

r = 1 is the plain scaling (the curve's shape carries over). How far r may be from 1: each term
is bound by memory bandwidth, by compute, or by a mix, so each factor lies between the two
machines' bandwidth ratio and compute ratio, and r between their quotient and its inverse:
R = max(ratios) / min(ratios), r in [1/R, R]. Without those figures R defaults to 2 (an
assumption, printed: the two terms' kernels differ too, e.g. Triton MLA on one machine and
FlashMLA on the other, which no hardware ratio captures). A second figure measured here pins r:
the curve is then this machine's own two-point fit, and only the tolerance remains.

The judgement of a figure at ctx (`judge`), with `tol` the tolerance:
- inside the band [low, high] (the prediction over every r allowed): consistent with scaling;
- below low by more than tol: a regression (no allowed split explains it);
- between: inconclusive, with the measurement that settles it;
- above high by more than tol: faster than any allowed split predicts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from perftests.baseline import Baseline
from perftests.errors import ConfigError
from perftests.scaling import fit, split_band

DEFAULT_SPLIT = 2.0

Zone = Literal["consistent", "inconclusive", "regression", "faster"]


@dataclass(frozen=True)
class Split:
    """How differently the two machines may split their cost: r in [1 / factor, factor]."""

    factor: float
    why: str

    @classmethod
    def of(
        cls, bandwidth: float | None = None, compute: float | None = None, factor: float | None = None
    ) -> Split:
        if factor is not None:
            if factor < 1:
                raise ConfigError(f"--split: expected a factor of at least 1, got {factor}")
            return cls(factor, f"given: the split may differ up to {factor:g}x")
        if (bandwidth is None) != (compute is None):
            raise ConfigError(
                "--bandwidth-ratio and --compute-ratio go together (each term lies between them)"
            )
        if bandwidth is not None and compute is not None:
            if bandwidth <= 0 or compute <= 0:
                raise ConfigError("--bandwidth-ratio and --compute-ratio must be positive")
            f = max(bandwidth, compute) / min(bandwidth, compute)
            return cls(
                f,
                f"each term lies between the machines' bandwidth ratio {bandwidth:g} and compute "
                f"ratio {compute:g}, so the split may differ up to {f:.2f}x",
            )
        return cls(
            DEFAULT_SPLIT,
            f"assumed: the split may differ up to {DEFAULT_SPLIT:g}x (narrow it with "
            f"--bandwidth-ratio and --compute-ratio, or a second --anchor)",
        )


@dataclass(frozen=True)
class Anchor:
    """A figure measured on this hardware."""

    context: int
    tps: float
    acceptance: float | None = None


@dataclass(frozen=True)
class Judgement:
    zone: Zone
    context: int
    tps: float
    central: float  # r = 1 (or the pinned fit)
    low: float
    high: float
    r_needed: float | None  # the split at which the curve predicts exactly `tps` (None: none does)
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Extrapolation:
    other: Baseline
    anchors: tuple[Anchor, ...]
    split: Split

    def __post_init__(self) -> None:
        if not self.anchors:
            raise ConfigError("--anchor: at least one figure measured on this hardware is needed")

    @property
    def anchor(self) -> Anchor:
        return min(self.anchors, key=lambda x: x.context)

    @property
    def pinned(self) -> bool:
        """Two or more anchors at distinct contexts: this machine's own curve, no r to guess."""
        return len({x.context for x in self.anchors}) >= 2

    def predict(self, ctx: int) -> tuple[float, float, float]:
        """(central, low, high) tok/s at ctx."""
        if self.pinned:
            own = fit([x.context for x in self.anchors], [1000 / x.tps for x in self.anchors], "token_ms")
            t = 1000 / own.cost_ms(ctx)
            return t, t, t
        m, a = self.other.model, self.anchor
        return split_band(m.a_ms, m.b_ms_per_token, a.context, a.tps, ctx, self.split.factor)

    def r_needed(self, ctx: int, tps: float) -> float | None:
        """The split r at which the scaled curve predicts `tps` at ctx (None: no positive r)."""
        m, c0 = self.other.model, self.anchor.context
        q = self.anchor.tps / tps  # cost here at ctx over cost here at c0
        den = m.b_ms_per_token * (ctx - q * c0)
        if den == 0 or m.b_ms_per_token <= 0:
            return None
        r = m.a_ms * (q - 1) / den
        return r if r > 0 and math.isfinite(r) else None

    def judge(self, ctx: int, tps: float, tol: float) -> Judgement:
        central, low, high = self.predict(ctx)
        o, a = self.other, self.anchor
        lines = []
        if self.pinned:
            pts = ", ".join(f"{x.tps:g} at ctx={x.context}" for x in self.anchors)
            lines.append(
                f"this hardware's own curve through {pts}: {central:.1f} tok/s expected at ctx={ctx} "
                f"(the other hardware's shape is not needed)"
            )
        else:
            lines.append(
                f"{o.hardware}'s curve ({o.model.a_ms:.3f} + {o.model.b_ms_per_token * 1000:.3f}/1k * "
                f"ctx {o.model.kind}) scaled to {a.tps:g} tok/s at ctx={a.context}: {central:.1f} "
                f"tok/s expected at ctx={ctx} if the shape carries over"
            )
            lines.append(
                f"band {low:.1f}..{high:.1f} tok/s over the splits allowed ({self.split.why}); "
                f"it is {high / low:.2f}x wide: this is an extrapolation, not a measurement"
            )
        r = None if self.pinned else self.r_needed(ctx, tps)
        if tps < low * (1 - tol):
            zone: Zone = "regression"
        elif tps < low:
            zone = "inconclusive"
        elif tps > high * (1 + tol):
            zone = "faster"
        else:
            zone = "consistent"
        rel = f"{tps / central - 1:+.1%} from the central prediction"
        if r is not None and zone != "consistent":
            where = "heavier" if r > 1 else "lighter"
            lines.append(
                f"reported {tps:g} tok/s ({rel}) would need this machine's context term to be "
                f"{max(r, 1 / r):.2f}x {where} relative to its constant term than {o.hardware}'s"
            )
        elif r is not None and not math.isclose(r, 1, rel_tol=0.05):
            lines.append(
                f"reported {tps:g} tok/s ({rel}) matches the curve if this machine's split "
                f"differs by r = {r:.2f} from {o.hardware}'s: inside the band"
            )
        else:
            lines.append(f"reported {tps:g} tok/s: {rel}")
        return Judgement(zone, ctx, tps, central, low, high, r, tuple(lines))


def settle_command(hardware: str, contexts: Sequence[int]) -> str:
    """The measurement that pins this machine's own curve: its short and the reported context."""
    return f"pytest perftests --hw {hardware} --perf-contexts {','.join(map(str, sorted(set(contexts))))}"


__all__ = ["DEFAULT_SPLIT", "Anchor", "Extrapolation", "Judgement", "Split", "settle_command"]
