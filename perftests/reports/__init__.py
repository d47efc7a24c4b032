"""Reports of a run, each rendered from the run record alone (so a merged record from several
xdist workers, or a record read back from JSON, reports exactly as a live run does):
terminal tables, JUnit XML, a PNG plot, a GitHub step-summary in Markdown."""
