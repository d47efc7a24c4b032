"""The options a run takes, declared once: the pytest plugin adds them as `--perf-NAME` (with
short aliases), the `perftests` command as `--NAME`, and both hand the values to config.resolve.

Values are kept raw here (strings, ints); config.py validates them, so an error names the flag
the user typed whichever front end they used."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_HW = "cpu-reference"


@dataclass(frozen=True)
class Option:
    name: str  # value key, and the flag after `--perf-` (pytest) or `--` (CLI)
    help: str
    groups: frozenset[str]  # service, measure, judge, ab, output: which CLI commands take it
    type: Callable[[str], Any] | None = None
    action: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    pytest_aliases: tuple[str, ...] = ()
    cli_aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"help": self.help}
        if self.action:
            kw["action"] = self.action
        if self.type is not None:
            kw["type"] = self.type
        if self.choices:
            kw["choices"] = list(self.choices)
        if self.metavar:
            kw["metavar"] = self.metavar
        if self.action == "append":
            kw["default"] = []
        return kw


def _g(*names: str) -> frozenset[str]:
    return frozenset(names)


OPTIONS: tuple[Option, ...] = (
    Option(
        "hw",
        f"hardware profile to run (default: $PERFTESTS_HW or {DEFAULT_HW})",
        _g("service", "judge"),
        metavar="NAME",
        pytest_aliases=("--hw",),
    ),
    Option(
        "service-url",
        "attach to a running service instead of launching the profile's; give it "
        "several times to measure several services in parallel under -n (pytest only)",
        _g("service"),
        action="append",
        metavar="URL",
        pytest_aliases=("--service-url",),
        cli_aliases=("--url",),
    ),
    Option(
        "api-key-env",
        "environment variable holding the service's API key (never logged)",
        _g("service"),
        metavar="VAR",
        pytest_aliases=("--api-key-env",),
    ),
    Option(
        "profile-dir",
        "extra directory of profile YAML files (searched first)",
        _g("service", "judge"),
        action="append",
        metavar="DIR",
    ),
    Option(
        "log-dir",
        "where a launched service's log goes (default .perftests/logs)",
        _g("service"),
        metavar="DIR",
    ),
    Option("contexts", "override the profile's context lengths", _g("measure"), metavar="L1,L2,..."),
    Option(
        "repeats",
        "valid pairs per context and launch (default: the profile's)",
        _g("measure"),
        type=int,
        metavar="N",
    ),
    Option(
        "warmup",
        "untimed warm-up pairs per context (default: the profile's)",
        _g("measure"),
        type=int,
        metavar="N",
    ),
    Option(
        "launches",
        "launches of the service per run, each a fresh process and one sample "
        "(default: the profile's launches, or refresh_launches with --update-baselines; "
        "attached: rounds)",
        _g("measure"),
        type=int,
        metavar="K",
    ),
    Option(
        "cache-mode",
        "warm: both requests reuse a cached prefix (default); cold: no reuse",
        _g("measure"),
        choices=("warm", "cold"),
    ),
    Option(
        "prompt",
        "prompt content: corpus text (default) or random token ids",
        _g("measure"),
        choices=("corpus", "random"),
    ),
    Option("seed", "prompt seed (default 0)", _g("measure"), type=int),
    Option(
        "stream-check",
        "also stream one request per context: time to first token, streamed decode rate",
        _g("measure"),
        action="store_true",
    ),
    Option(
        "no-control",
        "skip the machine control (the fixed workload before and after each "
        "launch); the run then cannot tell a busy machine from a slow service",
        _g("measure"),
        action="store_true",
    ),
    Option(
        "update-baselines",
        "measure, then write this hardware's baseline from the run (needs --reason)",
        _g("judge"),
        action="store_true",
        pytest_aliases=("--update-baselines",),
    ),
    Option(
        "pool-sessions",
        "with --update-baselines: keep the stored baseline's launches as earlier sessions, N "
        "sessions in all with this one (oldest dropped), so its intervals know how far the "
        "unchanged service moves between machines and days (default: the profile's "
        "pool_sessions; 1 replaces the curve)",
        _g("judge"),
        type=int,
        metavar="N",
    ),
    Option(
        "reason",
        "why the baseline changes; recorded in the file's history",
        _g("judge"),
        metavar="TEXT",
        pytest_aliases=("--reason",),
    ),
    Option(
        "provisional-from",
        "without a baseline, judge against HW's curve scaled to this "
        "hardware's shortest-context point (marked provisional)",
        _g("judge"),
        metavar="HW",
        pytest_aliases=("--provisional-from",),
    ),
    Option(
        "baseline", "baseline file (default: the profile's defaults.baseline)", _g("judge"), metavar="PATH"
    ),
    Option(
        "tolerance",
        "allowed relative drop before a point can fail (default: the profile's)",
        _g("judge", "ab"),
        type=float,
        metavar="FRACTION",
    ),
    Option(
        "reruns",
        "extra launches (attached: rounds) while a point is inconclusive (default: the profile's)",
        _g("judge"),
        type=int,
        metavar="N",
    ),
    Option(
        "ab-candidate",
        "A/B: judge this profile's service (B) against the run's (A), launched alternately on this machine",
        _g("ab"),
        metavar="HW",
    ),
    Option(
        "ab-candidate-url",
        "A/B: B is the running service at URL (A: --service-url or the profile's)",
        _g("ab"),
        metavar="URL",
    ),
    Option(
        "ab-env",
        "A/B: B is A launched with this environment variable set (repeatable)",
        _g("ab"),
        action="append",
        metavar="KEY=VALUE",
    ),
    Option(
        "ab-arg",
        "A/B: B is A launched with this extra argument (repeatable; a value starting with '-' "
        "is joined to the flag with '=', e.g. ...-arg=--cache-type-k)",
        _g("ab"),
        action="append",
        metavar="ARG",
    ),
    Option(
        "ab-replace",
        "A/B: B is A launched with OLD replaced by NEW in its command, e.g. "
        "'{model:target}={model:target@n_layer=5}' (repeatable)",
        _g("ab"),
        action="append",
        metavar="OLD=NEW",
    ),
    Option(
        "ab-pairs",
        "A/B: pairs of launches before the first decision (default 4, two ABBA blocks)",
        _g("ab"),
        type=int,
        metavar="N",
    ),
    Option(
        "ab-max-pairs",
        "A/B: the budget: pairs at most while a context is unknown (default 10)",
        _g("ab"),
        type=int,
        metavar="N",
    ),
    Option("ab-seed", "A/B: seed of the random block order (default: random, recorded)", _g("ab"), type=int),
    Option(
        "json",
        "write the run record here (default .perftests/last-run-<hw>.json)",
        _g("output"),
        metavar="PATH",
    ),
    Option(
        "junit",
        "write JUnit XML (one case per context point) here (default: beside the record)",
        _g("output"),
        metavar="PATH",
    ),
    Option(
        "plot",
        "write the PNG plot here (default: beside the record; 'none' to skip)",
        _g("output"),
        metavar="PATH",
    ),
)


def add_to_pytest(group: Any) -> None:
    """Add every option to pytest's `perftests` option group as --perf-NAME."""
    for o in OPTIONS:
        kw = o.kwargs()
        if o.name == "hw":
            kw["default"] = os.environ.get("PERFTESTS_HW")
        group.addoption(f"--perf-{o.name}", *o.pytest_aliases, dest=f"perf_{o.dest}", **kw)


def add_to_cli(parser: argparse.ArgumentParser, *groups: str) -> None:
    """Add the options of `groups` to a `perftests` subcommand as --NAME."""
    for o in OPTIONS:
        if o.groups & set(groups):
            parser.add_argument(f"--{o.name}", *o.cli_aliases, dest=o.dest, **o.kwargs())


def from_pytest(config: Any) -> dict[str, Any]:
    """The option values of a pytest run, keyed by Option.dest."""
    return {o.dest: config.getoption(f"perf_{o.dest}") for o in OPTIONS}


def from_cli(args: argparse.Namespace) -> dict[str, Any]:
    return {o.dest: getattr(args, o.dest, None) for o in OPTIONS}
