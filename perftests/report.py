"""Plain-text rendering of a measured curve, for the terminal (fits in 100 columns)."""

from __future__ import annotations

import math

from perftests.compare import PointComparison
from perftests.measure import Point


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def curve_table(points: list[Point]) -> str:
    head = (f"{'context':>8} {'tok/s':>9} {'95% CI':>19} {'rCV':>6} {'n':>3} "
            f"{'engine tok/s':>12} {'accept':>7} {'step ms':>8} {'span':>5} {'stream':>7}")
    lines = [head, "-" * len(head)]
    notes: list[str] = []
    for p in sorted(points, key=lambda p: p.context):
        s = p.tps()
        e = p.engine_tps()
        a = p.acceptance_length()
        st = p.step_ms()
        ci = f"[{_f(s.ci_low, '.1f')}, {_f(s.ci_high, '.1f')}]"
        lines.append(
            f"{p.context:>8} {_f(s.median, '.1f'):>9} {ci:>19} {_f(s.rcv, '.1%'):>6} {s.n:>3} "
            f"{_f(e.median if e.n else None, '.1f'):>12} {_f(a.median if a.n else None, '.2f'):>7} "
            f"{_f(st.median if st.n else None, '.2f'):>8} {p.long_tokens - p.short_tokens:>5} "
            f"{_f(p.stream.decode_tps if p.stream else None, '.1f'):>7}")
        if p.stream and p.stream.ttft_s is not None:
            notes.append(f"ctx={p.context}: streamed: first token after {p.stream.ttft_s * 1000:.0f} ms, "
                         f"{_f(p.stream.tokens_per_event, '.2f')} tokens per event")
        if s.warning:
            notes.append(f"ctx={p.context}: {s.warning}")
        notes += [f"ctx={p.context}: {n}" for n in p.notes]
        bad = [q for q in p.pairs if not q.valid]
        if bad:
            notes.append(f"ctx={p.context}: {len(bad)} invalid pair(s) discarded: "
                         + "; ".join(sorted({q.invalid_reason or "" for q in bad})))
    return "\n".join(lines + ([""] + notes if notes else []))


def comparison_table(comparisons: list[PointComparison]) -> str:
    head = (f"{'context':>8} {'tok/s':>9} {'baseline':>9} {'ratio':>7} {'95% CI':>15} "
            f"{'catches':>8} {'accept':>11} {'status':>13}")
    lines = [head, "-" * len(head)]
    for c in sorted(comparisons, key=lambda c: c.context):
        base = f"{c.expected:.1f}" + ("*" if c.source == "model" else "")
        acc = "-"
        if c.measured_acceptance is not None:
            acc = f"{c.measured_acceptance:.2f}/{_f(c.expected_acceptance, '.2f')}"
        lines.append(f"{c.context:>8} {c.measured:>9.1f} {base:>9} {c.ratio:>7.3f} "
                     f"{f'[{c.ratio_low:.3f},{c.ratio_high:.3f}]':>15} {f'-{c.detectable_drop:.1%}':>8} "
                     f"{acc:>11} {c.status.upper():>13}")
    if any(c.source == "model" for c in comparisons):
        lines.append("* predicted by the baseline's fitted model: the baseline never measured this context")
    lines.append("catches: the smallest drop that fails at this point (tolerance or noise, the larger)")
    return "\n".join(lines)
