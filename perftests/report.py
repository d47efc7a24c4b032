"""Plain-text rendering of a measured curve, for the terminal (fits in 100 columns)."""

from __future__ import annotations

import math

from perftests.measure import Point


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def curve_table(points: list[Point]) -> str:
    head = (f"{'context':>8} {'tok/s':>9} {'95% CI':>19} {'rCV':>6} {'n':>3} "
            f"{'engine tok/s':>12} {'accept':>7} {'step ms':>8} {'span':>5}")
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
            f"{_f(st.median if st.n else None, '.2f'):>8} {p.long_tokens - p.short_tokens:>5}")
        if s.warning:
            notes.append(f"ctx={p.context}: {s.warning}")
        notes += [f"ctx={p.context}: {n}" for n in p.notes]
        bad = [q for q in p.pairs if not q.valid]
        if bad:
            notes.append(f"ctx={p.context}: {len(bad)} invalid pair(s) discarded: "
                         + "; ".join(sorted({q.invalid_reason or "" for q in bad})))
    return "\n".join(lines + ([""] + notes if notes else []))
