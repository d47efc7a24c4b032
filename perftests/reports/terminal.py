"""Plain-text rendering of a run for the terminal. Every line fits in 100 columns: tables are
sized for it and prose is wrapped, so a CI log viewer never scrolls sideways."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from perftests import baseline as bl
from perftests.compare import PointComparison
from perftests.measure import Point
from perftests.paired import WORDS
from perftests.record import RunRecord
from perftests.reports.fields import verdict_text
from perftests.shape import ShapeComparison
from perftests.triage.imported import label as label_imported

WIDTH = 100


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def curve_table(record: RunRecord) -> str:
    """Per context: the launch-level figure (geometric mean of the launches' medians), the
    launches' range, the within-launch spread, and the engine's own figures."""
    streamed = any(p.stream for p in record.points)  # the column only when --stream-check ran
    head = (
        f"{'context':>8} {'tok/s':>9} {'launches':>8} {'launch range':>17} {'rCV':>6} "
        f"{'n':>4} {'engine tok/s':>12} {'accept':>7} {'step ms':>8} {'span':>5}"
        + (f" {'stream':>7}" if streamed else "")
    )
    lines = [head, "-" * len(head)]
    notes: list[str] = []
    by_ctx: dict[int, list[Point]] = {}
    for p in record.points:
        by_ctx.setdefault(p.context, []).append(p)
    ests = record.estimates()
    for ctx, pts in sorted(by_ctx.items()):
        e = ests.get(ctx)
        span = max(p.long_tokens - p.short_tokens for p in pts)
        if e is None:
            lines.append(f"{ctx:>8} {'-':>9} {len(pts):>8} {'-':>17}")
        else:
            rng = f"{min(e.launch_tps):.1f}-{max(e.launch_tps):.1f}" if e.launches > 1 else "-"
            stream = next((p.stream.decode_tps for p in pts if p.stream), None)
            lines.append(
                f"{ctx:>8} {e.tps:>9.1f} {e.launches:>8} {rng:>17} {_f(e.within_rcv, '.1%'):>6} "
                f"{e.pairs:>4} {_f(e.engine_tps, '.1f'):>12} {_f(e.acceptance, '.2f'):>7} "
                f"{_f(e.step_ms, '.2f'):>8} {span:>5}" + (f" {_f(stream, '.1f'):>7}" if streamed else "")
            )
        for p in pts:
            tag = f"ctx={ctx}" + (f" launch {p.launch + 1}" if len(pts) > 1 else "")
            if p.stream and p.stream.ttft_s is not None:
                notes.append(
                    f"{tag}: streamed: first token after {p.stream.ttft_s * 1000:.0f} ms, "
                    f"{_f(p.stream.tokens_per_event, '.2f')} tokens per event"
                )
            s = p.tps()
            if s.warning:
                notes.append(f"{tag}: {s.warning}")
            notes += [f"{tag}: {n}" for n in p.notes]
            bad = [q for q in p.pairs if not q.valid]
            if bad:
                notes.append(
                    f"{tag}: {len(bad)} invalid pair(s) discarded: "
                    + "; ".join(sorted({q.invalid_reason or "" for q in bad}))
                )
    return "\n".join(lines + ([""] + notes if notes else []))


def _noise(c: PointComparison) -> str:
    if c.noise_source == "sessions":  # within a session + between the baseline's sessions
        return f"{c.noise_sd:.1%}+{c.session_sd or 0:.1%}"
    return _f(c.noise_sd, ".1%") + ("" if c.noise_source != "profile" else "~")


def comparison_table(comparisons: list[PointComparison], *, ab: bool = False) -> str:
    """Each point against the baseline; `ab`: B against A from paired launches (paired.py)."""
    head = (
        f"{'context':>8} {'B tok/s' if ab else 'tok/s':>9} {'A tok/s' if ab else 'baseline':>9} "
        f"{'B/A' if ab else 'ratio':>7} {'95% CI':>15} "
        f"{'catches':>8} {'pairs' if ab else 'k/K':>5} {'noise':>7} {'accept':>11} {'status':>12}"
    )
    lines = [head, "-" * len(head)]
    for c in sorted(comparisons, key=lambda c: c.context):
        base = f"{c.expected:.1f}" + ("*" if c.source == "model" else "")
        acc = "-"
        if c.measured_acceptance is not None:
            acc = f"{c.measured_acceptance:.2f}/{_f(c.expected_acceptance, '.2f')}"
        lines.append(
            f"{c.context:>8} {c.measured:>9.1f} {base:>9} {c.ratio:>7.3f} "
            f"{_ci(c.ratio_low, c.ratio_high):>15} {f'-{c.detectable_drop:.1%}':>8} "
            f"{c.launches if ab else f'{c.launches}/{c.baseline_launches}':>5} "
            f"{_noise(c):>7} {acc:>11} {_status(c.status, ab):>12}"
        )
    if any(c.source == "model" for c in comparisons):
        lines.append("* predicted by the baseline's fitted model: the baseline never measured this context")
    if ab:
        lines.append(
            "pairs: adjacent A/B launches; noise: sd of the paired log ratio; 95% CI: paired t, "
            "Bonferroni over the run's tests and its looks (a judgement after each block); SAME: "
            "the interval excludes a drop of the tolerance; "
            "catches: the smallest drop this many pairs can call SLOWER"
        )
        return "\n".join(lines)
    lines.append(
        "catches: the smallest drop that fails at this point (tolerance or noise, the larger);"
        " k/K: launches of this run / of the baseline; noise: between-launch sd"
        + (
            " (~ assumed from the profile, not measured)"
            if any(c.noise_source == "profile" for c in comparisons)
            else ""
        )
        + (
            f"; a+b: within a session + between the baseline's "
            f"{max(c.baseline_sessions for c in comparisons)} sessions"
            if any(c.noise_source == "sessions" for c in comparisons)
            else ""
        )
    )
    return "\n".join(lines)


def _ci(low: float, high: float) -> str:
    """An interval in the table's 15 columns: a few pairs can give bounds of 0.001 and 1000."""

    def r(x: float) -> str:
        return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 100 else ">100"

    return f"[{r(low)},{r(high)}]"


def _status(status: str, ab: bool) -> str:
    return WORDS.get(status, status.upper()) if ab else status.upper()


def shape_table(shapes: list[ShapeComparison], *, ab: bool = False) -> str:
    """Each context as a share of the shortest one within the same launch, against the baseline's:
    the machine's uniform swing cancels in it, a cost growing with context does not."""
    ref = shapes[0].reference if shapes else 0
    head = (
        f"{'context':>8} {f'/ctx {ref}':>9} {'A' if ab else 'baseline':>9} "
        f"{'B/A' if ab else 'ratio':>7} {'95% CI':>15} "
        f"{'catches':>8} {'pairs' if ab else 'k/K':>5} {'noise':>7} {'status':>12}"
    )
    lines = [head, "-" * len(head)]
    for s in shapes:
        lines.append(
            f"{s.context:>8} {s.measured:>9.3f} {s.expected:>9.3f} {s.ratio:>7.3f} "
            f"{_ci(s.ratio_low, s.ratio_high):>15} {f'-{s.detectable_drop:.1%}':>8} "
            f"{s.launches if ab else f'{s.launches}/{s.baseline_launches}':>5} "
            f"{_f(s.noise_sd, '.1%') + ('' if s.noise_source != 'profile' else '~'):>7} "
            f"{_status(s.status, ab):>12}"
        )
    if ab:
        lines.append(
            f"within launches: tok/s at each context over tok/s at ctx={ref} of the same launch, "
            f"B's over A's pair by pair: a cost growing with context shows here"
        )
        return "\n".join(lines)
    lines.append(
        f"within launches: tok/s at each context over tok/s at ctx={ref} of the same launch (the "
        f"machine's uniform swing cancels); ratio: this run's over the baseline's"
    )
    return "\n".join(lines)


def _fit(line: str) -> list[str]:
    return wrap(line) if len(line) > WIDTH else [line]


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
    ab = record.ab
    if ab is not None:
        blocks = " ".join(ab.order) or "-"
        out += [("", line) for line in wrap(f"A/B on one machine: A = {ab.base}; B = {ab.candidate}")]
        out += [
            ("", line)
            for line in wrap(
                f"launches in order {blocks} (seed {ab.seed}): {ab.pairs} pairs, first "
                f"{ab.first_pairs}, budget {ab.max_pairs}"
                + (
                    f"; the noise seen needs about "
                    f"{'more than 200' if ab.needed == 10**6 else ab.needed} pairs to resolve "
                    f"the tolerance"
                    if ab.needed
                    else ""
                )
            )
        ]
        if ab.reference.points:
            out.append(("-", f"A: {ab.base}"))
            out += [("", w) for line in curve_table(ab.reference).splitlines() for w in _fit(line)]
            out.append(("-", f"B: {ab.candidate}"))
    if record.points:
        for line in curve_table(record).splitlines():
            out += [("", w) for w in (wrap(line) if len(line) > WIDTH else [line])]
    for ctx, problem in sorted(record.problems.items()):
        out += [("bad", line) for line in wrap(f"ctx={ctx}: {problem}")]
    for w in record.warnings:
        out += [("warn", line) for line in wrap(f"WARNING: {w}")]
    mc = record.machine_check
    if mc is not None and record.control:
        refused = record.outcome is None or record.outcome.kind.value == "machine"
        style = "" if mc.ok else ("bad" if refused else "warn")
        out.append((style, f"{mc.headline(refused)} ({len(record.control)} readings)"))
        out += [(style, line) for x in mc.lines for line in wrap(f"  {x}")]
    judged = record.comparisons
    ja = record.judged_against
    if judged and ja is not None:
        tag = " PROVISIONAL" if record.baseline and record.baseline.provisional else ""
        label = baseline_label or _rel(ja.path)
        if ab is not None:
            out.append(("-", "B against A, launch pairs"))
        else:
            imp = label_imported(record.baseline) if record.baseline else ""
            out.append(("-", f"against{tag} baseline {label}" + (f" ({imp})" if imp else "")))
        table = comparison_table(judged, ab=ab is not None)
        if record.verdict is not None and record.verdict.shapes:
            table += "\n" + shape_table(record.verdict.shapes, ab=ab is not None)
        if ab is not None and ab.mann_whitney:
            table += "\nMann-Whitney U on the launch medians (unpaired cross-check), two-sided p: " + (
                ", ".join(f"ctx={c} {p:.3f}" for c, p in sorted(ab.mann_whitney.items()))
            )
        for line in table.splitlines():
            out += [("", w) for w in (wrap(line) if len(line) > WIDTH else [line])]
    o = record.outcome
    if o is not None and o.kind.value not in ("run error", "machine"):
        if record.verdict is not None:
            out.append(("", ""))
            for i, line in enumerate(verdict_text(record).splitlines()):
                style = ("bad" if o.failed else "good") if i == 0 else ""
                out += [(style, w) for w in wrap(line)]
        elif o.kind.value == "invalid measurement":
            out.append(("", ""))
            out.append(("bad", o.headline))
    for err in record.errors:
        out.append(("", ""))
        out += [("bad", line) for line in wrap(f"RUN ERROR (not a regression): {err}")]
    if o is not None and o.kind.value == "machine":
        out.append(("", ""))
        out += [("bad", line) for x in (o.headline, *o.lines) for line in wrap(x)]
        out += [("", line) for line in wrap(_machine_advice(record))]
    if record.refresh and ja is not None:
        out.append(("-", f"baseline written: {_rel(ja.path)}"))
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


def _machine_advice(record: RunRecord) -> str:
    """What to do after MACHINE BUSY / DIFFERS: a busy machine is re-run; a slower one of the
    baseline's kind refreshes that file if it is the new normal; another kind of machine gets a
    baseline of its own beside the profile's (a machine variant, picked by later runs on it)."""
    head = "the figures above were measured but not judged: re-run on a quiet machine"
    mc, ja = record.machine_check, record.judged_against
    if mc is None or mc.status != "differs" or ja is None:
        return head
    where = Path(_rel(ja.path))
    recorded = ja.baseline.provenance.get("machine") if ja.baseline else None
    if bl.machine_match(recorded, record.machine):
        return (
            f"{head}, or, if this machine now reads like this for good, refresh {where} on it "
            '(--update-baselines --reason "...")'
        )
    return (
        f"{head}, or give this kind of machine a baseline of its own (--update-baselines "
        f'--perf-baseline {bl.variant_template(where)} --reason "..."; a run on a machine like it '
        "then picks that file)"
    )


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
