"""Repository-level pytest configuration.

The gate's plugin is loaded through its `pytest11` entry point (perftests.plugin), not from here,
so an installed perftests behaves the same inside and outside this checkout. This file only keeps
collection away from what is not a test."""

collect_ignore = ["baselines", ".perftests", "scripts"]
