"""Reports of a run, each rendered from the run record alone (so a merged record from several
xdist workers, or a record read back from JSON, reports exactly as a live run does):
terminal tables, JUnit XML, a PNG plot, a GitHub step-summary in Markdown."""

from pathlib import Path


def per_service_path(base: Path, name: str, several: bool) -> Path:
    """`base` for a one-service run; `stem-<name>.suffix` per service when there are several."""
    if not several:
        return base
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return base.with_name(f"{base.stem}-{safe}{base.suffix}")
