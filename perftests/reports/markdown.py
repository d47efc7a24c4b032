"""A GitHub job summary in Markdown: per service, the point table and the verdict, and where the
plot and the record are (as an artifact link: a step summary cannot embed a runner's file).

Appended to $GITHUB_STEP_SUMMARY when it is set, as GitHub asks: several steps may write it."""

from __future__ import annotations

import os
from pathlib import Path

from perftests.paired import WORDS
from perftests.record import RunRecord
from perftests.shape import ShapeComparison
from perftests.triage.imported import label as label_imported

MARK = {
    "pass": "pass",
    "improved": "**improved**",
    "inconclusive": "**inconclusive**",
    "fail": "**FAIL**",
    "measured": "measured",
    "error": "**ERROR**",
}


def _mark(status: str, ab: bool) -> str:
    """A status as the table shows it; an A/B's in its own words (SLOWER, SAME, ...)."""
    if ab and status in WORDS:
        return f"**{WORDS[status]}**" if status != "pass" else WORDS[status]
    return MARK.get(status, status)


def _f(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def artifact_link(name: str | None = None) -> str | None:
    """A link to this workflow run's artifacts, from the variables GitHub Actions sets."""
    server, repo, run = (
        os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    )
    if not (server and repo and run):
        return None
    label = name or os.environ.get("PERFTESTS_ARTIFACT") or "the run's artifacts"
    return f"[{label}]({server}/{repo}/actions/runs/{run}#artifacts)"


def _shape(s: ShapeComparison | None) -> str:
    """The within-launch quotient's ratio to the baseline's (shape.py), and its status."""
    if s is None:
        return "–"
    return f"{s.ratio:.3f} of ctx {s.reference}'s ({s.ratio_low:.3f}–{s.ratio_high:.3f}) {MARK[s.status]}"


def section(record: RunRecord, *, plot: Path | None = None, record_path: Path | None = None) -> str:
    v, o = record.verdict, record.outcome
    if o is not None and o.kind.value in ("run error", "machine"):
        head = o.headline
    elif v:
        head = ("❌ " if o is not None and o.failed else "✅ ") + v.kind.value.upper()
        if v.provisional:
            head += " (provisional baseline)"
    elif record.refresh:
        head = "baseline refreshed"
    elif o is not None:
        head = o.headline
    else:
        head = "not judged"
    out = [f"### perftests `{record.name}` ({record.engine}): {head}", ""]
    b, ja, ab = record.baseline, record.judged_against, record.ab
    if ab is not None:
        out.append(
            f"A/B on one machine: B = {ab.candidate} against A = {ab.base}; {ab.pairs} pairs of "
            f"launches in order {' '.join(ab.order) or '–'}; tolerance −{ja.tolerance if ja else 0:.0%}; "
            f"commit `{(record.commit or 'unknown')[:12]}`."
        )
        out.append("")
    elif b is not None and ja is not None:
        out.append(
            f"Against the baseline `{ja.path}` of {b.created[:10]}"
            + (f", {label_imported(b)}" if label_imported(b) else "")
            + f" ({b.launches} launch(es); "
            f"tolerance −{ja.tolerance:.0%}); this run {len(record.launches)} launch(es); "
            f"commit `{(record.commit or 'unknown')[:12]}`."
        )
        out.append("")
    cols = (
        "B tok/s | pairs | A tok/s | B/A | B/A 95% CI"
        if ab
        else "tok/s | launches | baseline | ratio | ratio 95% CI"
    )
    out += [
        f"| context | {cols} | catches | accept | status | within launch |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---|:---|",
    ]
    for r in record.results():
        e, c = r.estimate, r.comparison
        rci = f"{c.ratio_low:.3f}–{c.ratio_high:.3f}" if c else "–"
        acc = _f(e.acceptance if e else None, ".2f")
        if c and c.expected_acceptance is not None:
            acc += f" / {c.expected_acceptance:.2f}"
        out.append(
            f"| {r.context} | {_f(e.tps if e else None, '.1f')} | "
            f"{(c.launches if ab and c else e.launches if e else '–')} | "
            f"{_f(c.expected if c else None, '.1f')} | "
            f"{_f(c.ratio if c else None, '.3f')} | {rci} | "
            f"{_f(-c.detectable_drop if c else None, '.1%')} | {acc} | "
            f"{_mark(r.status, ab is not None)} | {_shape(r.shape)} |"
        )
    out.append("")
    if v:
        out += ["```", v.explanation(), "```"]
    mc = record.machine_check
    if mc is not None and record.control:
        refused = record.outcome is None or record.outcome.kind.value == "machine"
        out.append(f"- {mc.headline(refused)}: " + "; ".join(mc.lines))
    for ctx, problem in sorted(record.problems.items()):
        out.append(f"- ctx={ctx}: {problem.splitlines()[0]}")
    for err in record.errors:
        out.append(f"> **Run error, not a regression:** {err}")
    for w in record.warnings:
        out.append(f"> ⚠️ {w}")
    if record.refresh:
        out += ["", "Baseline written:", "```", record.refresh, "```"]
    files = [f"`{p.name}`" for p in (plot, record_path) if p is not None]
    if files:
        link = artifact_link()
        out.append("")
        out.append(f"Plot and record: {', '.join(files)}" + (f" in {link}." if link else "."))
    return "\n".join(out) + "\n"


def document(records: list[RunRecord], files: dict[str, dict[str, Path]] | None = None) -> str:
    """The whole summary; `files` maps each record's name to its files (plot, record_path)."""
    files = files or {}
    return "\n".join(section(r, **files.get(r.name, {})) for r in records)


def append_step_summary(text: str) -> Path | None:
    """Append to $GITHUB_STEP_SUMMARY if set; returns the file written, or None."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return path
