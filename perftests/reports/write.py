"""Writing a run's reports (JSON record, JUnit XML, PNG plot, step summary), shared by the
pytest plugin, `perftests sweep` and `perftests report`. A report that cannot be written never
hides the others or the verdict: each failure becomes a note."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perftests.record import RunRecord
from perftests.reports import junit, markdown, per_service_path, plot


@dataclass(frozen=True)
class ReportPaths:
    json: Path | None
    junit: Path | None
    plot: Path | None  # None: no plot
    markdown: Path | None = None  # None: $GITHUB_STEP_SUMMARY when set

    @classmethod
    def of(
        cls, profile: str, *, json: str | None, junit: str | None, plot: str | None, stem: str = "last-run"
    ) -> ReportPaths:
        """Defaults: .perftests/<stem>-<hw>.json, JUnit and plot beside it."""
        base = Path(json or f".perftests/{stem}-{profile}.json")
        return cls(
            base,
            Path(junit) if junit else base.with_suffix(".xml"),
            None if plot == "none" else Path(plot) if plot else base.with_suffix(".png"),
        )


def write_all(records: list[RunRecord], paths: ReportPaths) -> list[str]:
    """Write every report of `records`; returns what was written, or why not."""
    several = len(records) > 1
    notes: list[str] = []
    files: dict[str, dict[str, Path]] = {}
    for rec in records:
        files[rec.name] = {}
        if paths.json is not None:
            path = per_service_path(paths.json, rec.name, several)
            try:
                rec.write(path)
                files[rec.name]["record_path"] = path
                notes.append(f"run record: {path}")
            except OSError as e:
                notes.append(f"could not write run record {path}: {e}")
        if paths.plot is not None and rec.points:
            ppath = per_service_path(paths.plot, rec.name, several)
            try:
                plot.write(rec, ppath)
                files[rec.name]["plot"] = ppath
                notes.append(f"plot: {ppath}")
            except Exception as e:  # noqa: BLE001 - a plotting failure must not hide the verdict
                notes.append(f"could not draw plot {ppath}: {type(e).__name__}: {e}")
    if paths.junit is not None:
        try:
            junit.write(records, paths.junit)
            notes.append(f"JUnit XML: {paths.junit}")
        except OSError as e:
            notes.append(f"could not write JUnit XML {paths.junit}: {e}")
    try:
        text = markdown.document(records, files)
        if paths.markdown is not None:
            paths.markdown.write_text(text)
            notes.append(f"markdown: {paths.markdown}")
        elif (step := markdown.append_step_summary(text)) is not None:
            notes.append(f"step summary appended: {step}")
    except OSError as e:
        notes.append(f"could not write the Markdown summary: {e}")
    return notes
