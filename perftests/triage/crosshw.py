"""Two hardwares' baselines side by side (pure): per context the tok/s of each and their ratio,
and per cost term (the constant one every step pays, the one per token of context) how many
times more one machine pays than the other. So "the PRO 6000 pays 3x more per token of context
but only 2x more per step" is one table. Terms are compared per token (a curve with acceptance
is per verify step: divided by its acceptance length), so curves of either kind compare."""

from __future__ import annotations

from dataclasses import dataclass

from perftests.baseline import Baseline
from perftests.triage.imported import label


@dataclass(frozen=True)
class Row:
    context: int
    a_tps: float
    b_tps: float
    a_measured: bool  # a point of A's curve (else its model's prediction)
    b_measured: bool

    @property
    def ratio(self) -> float:
        return self.b_tps / self.a_tps


@dataclass(frozen=True)
class Comparison:
    a: Baseline
    b: Baseline
    rows: tuple[Row, ...]
    constant: float | None  # B's constant term over A's (per token)
    per_context: float | None  # B's per-token-of-context term over A's

    def table(self) -> str:
        a, b = self.a.hardware, self.b.hardware
        w = max(10, len(a), len(b))
        head = f"{'context':>8} {a:>{w}} {b:>{w}} {b + '/' + a:>{w * 2 + 1}}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            ta = f"{r.a_tps:.1f}" + ("" if r.a_measured else "*")
            tb = f"{r.b_tps:.1f}" + ("" if r.b_measured else "*")
            lines.append(f"{r.context:>8} {ta:>{w}} {tb:>{w}} {r.ratio:>{w * 2 + 1}.3f}")
        lines.append("* the curve's fitted model, not a measured point")
        for x in (self.a, self.b):
            tag = label(x) or ("PROVISIONAL" if x.provisional else "measured")
            lines.append(f"{x.hardware}: {tag}; {x.reason}")
        lines.append("")
        lines.append(
            "cost per token, constant term + per 1k tokens of context (ms), from each curve's model:"
        )
        for x in (self.a, self.b):
            ca, cb = x.model.per_token()
            lines.append(f"  {x.hardware:>{w}}: {ca:.3f} + {cb * 1000:.3f}/1k")
        if self.constant is not None and self.per_context is not None:
            lines.append(
                f"{b} pays {_times(self.per_context)} per token of context and {_times(self.constant)} "
                f"per step (the constant term) against {a}"
            )
            if self.constant > 0 and self.per_context > 0:
                q = self.per_context / self.constant
                lines.append(
                    f"so {b}'s curve falls {'faster' if q > 1 else 'slower'} with context than {a}'s "
                    f"(split ratio r = {q:.2f}): scaling {a}'s shape to {b} "
                    + ("under" if q > 1 else "over")
                    + "estimates the long-context cost there"
                )
        elif self.per_context is None:
            lines.append("a curve with no context term (flat): the per-context cost cannot be compared")
        return "\n".join(lines)


def _times(x: float) -> str:
    return f"{x:.2f}x more" if x >= 1 else f"{1 / x:.2f}x less"


def compare(a: Baseline, b: Baseline) -> Comparison:
    contexts = sorted(set(a.contexts) | set(b.contexts))
    rows = []
    for c in contexts:
        pa, pb = a.point(c), b.point(c)
        rows.append(
            Row(
                c,
                pa.tps if pa else a.model.tps(c),
                pb.tps if pb else b.model.tps(c),
                pa is not None,
                pb is not None,
            )
        )
    (aa, ab), (ba, bb) = a.model.per_token(), b.model.per_token()
    return Comparison(
        a,
        b,
        tuple(rows),
        ba / aa if aa > 0 else None,
        bb / ab if ab > 0 else None,
    )


__all__ = ["Comparison", "Row", "compare"]
