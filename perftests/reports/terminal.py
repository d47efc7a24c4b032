"""Plain-text rendering of a run for the terminal. Every line fits in 100 columns: tables are
sized for it and prose is wrapped, so a CI log viewer never scrolls sideways."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from perftests.compare import PointComparison
from perftests.measure import Point
from perftests.record import RunRecord
from perftests.reports.fields import verdict_text, views

WIDTH = 100


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


def wrap(text: str, indent: str = "    ") -> list[str]:
    """Wrap prose to WIDTH; continuation lines are indented so each item stays one block."""
    out: list[str] = []
    for para in text.splitlines() or [""]:
        out += textwrap.wrap(para, WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


# A summary is (style, text) lines; the plugin maps styles to colours, the CLI prints the text.
# Styles: "=" and "-" are separator titles, "warn", "good", "bad", "" plain.
Line = tuple[str, str]


def summary(record: RunRecord, *, baseline_label: str | None = None) -> list[Line]:
    """Everything a person reads at the end of a run, for one service."""
    out: list[Line] = [("=", f"perftests: {record.name} ({record.engine})")]
    if record.target and record.target != record.profile:
        out.append(("", f"profile {record.profile}, service {record.service_url}"))
    if record.points:
        for line in curve_table(record.points).splitlines():
            out += [("", w) for w in (wrap(line) if len(line) > WIDTH else [line])]
    for ctx, problem in sorted(record.problems.items()):
        out += [("bad", line) for line in wrap(f"ctx={ctx}: {problem}")]
    for w in record.warnings:
        out += [("warn", line) for line in wrap(f"WARNING: {w}")]
    judged = [v.comparison for v in views(record) if v.comparison is not None]
    if judged:
        b = record.baseline or {}
        tag = " PROVISIONAL" if b.get("provisional") else ""
        label = baseline_label or _rel(b.get("path", "?"))
        out.append(("-", f"against{tag} baseline {label}"))
        out += [("", line) for line in comparison_table(judged).splitlines()]
    if record.verdict:
        passed = bool(record.verdict.get("passed"))
        out.append(("", ""))
        for i, line in enumerate(verdict_text(record).splitlines()):
            style = ("good" if passed else "bad") if i == 0 else ""
            out += [(style, w) for w in wrap(line)]
    for err in record.errors:
        out.append(("", ""))
        out += [("bad", line) for line in wrap(f"RUN ERROR (not a regression): {err}")]
    if record.refresh:
        out.append(("-", f"baseline written: {_rel((record.baseline or {}).get('path', '?'))}"))
        out += [("", line) for line in record.refresh.splitlines()]
    return out


def plain(lines: list[Line]) -> str:
    """A summary as plain text (for the CLI and for files)."""
    text: list[str] = []
    for style, line in lines:
        if style in ("=", "-"):
            pad = max(2, WIDTH - len(line) - 2)
            text.append(f"{style * (pad // 2)} {line} {style * (pad - pad // 2)}")
        else:
            text.append(line)
    return "\n".join(text)


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
