"""The pytest plugin (entry point `pytest11: perftests`): options, marker, parametrization,
reports and the terminal summary. The run itself is perftests.run.GateRun, shared with the CLI.

Layout: targets.py (services and their runs, in the config's stash), fixtures.py (the gate's
fixtures), fanout.py (xdist: one worker per service), live.py (terminal lines from fixtures)."""

from __future__ import annotations

from typing import Any

import pytest

from perftests import options
from perftests.ab import is_ab
from perftests.errors import ConfigError
from perftests.reports.terminal import summary
from perftests.reports.write import ReportPaths, write_all

from .fixtures import _perf_runs, perf_outcome, perf_point, perf_run, perf_target
from .targets import MERGED, OVERRIDES, local_records, run_config, targets

__all__ = ["_perf_runs", "perf_outcome", "perf_point", "perf_run", "perf_target"]

_RECORDS = pytest.StashKey[list[Any]]()
_WRITTEN = pytest.StashKey[list[str]]()
MARKER_ARGS = ("repeats", "warmup")
MARKER_DOC = (
    "perf(repeats=N, warmup=N): overrides of the gate's pairs per context and launch and "
    "its warm-up pairs, for the gate tests it marks (positive / non-negative integers; "
    "one value per run: every marked gate test must agree)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_to_pytest(parser.getgroup("perftests", "perftests: decode-throughput regression gate"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    # An explicit --hw or --service-url is checked now (profile, options, baseline file), so a
    # typo or a corrupt baseline fails before anything is collected or launched.
    if (
        config.getoption("perf_hw")
        or config.getoption("perf_service_url")
        or config.getoption("perf_update_baselines")
        or is_ab(options.from_pytest(config))
    ):
        try:
            run_config(config)
            targets(config)
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None
    if config.pluginmanager.hasplugin("xdist"):
        from .fanout import FanOut

        config.pluginmanager.register(FanOut(config), "perftests-fanout")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "perf_context" not in names and "perf_target" not in names:
        return
    try:
        tgts = targets(metafunc.config)
        contexts = run_config(metafunc.config).settings.contexts
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    several = len(tgts) > 1
    # Target-major order: under xdist all of one target's items form one group, run in this order.
    # Every gate test's id names its target or its context (fanout.py schedules by the id).
    if "perf_context" in names and several:
        metafunc.parametrize(
            ("perf_target", "perf_context"),
            [(t.name, c) for t in tgts for c in contexts],
            ids=[f"{t.name}-ctx={c}" for t in tgts for c in contexts],
        )
    elif "perf_context" in names:
        metafunc.parametrize("perf_context", contexts, ids=[f"ctx={c}" for c in contexts])
    else:
        metafunc.parametrize("perf_target", [t.name for t in tgts], ids=[t.name for t in tgts])


def _marker_overrides(items: list[pytest.Item]) -> dict[str, int]:
    """The `perf` marker's arguments, validated; the campaign measures every context at once,
    so all marked gate tests of a run must agree."""
    found: dict[str, int] = {}
    for item in items:
        if "perf_run" not in getattr(item, "fixturenames", ()):
            continue
        for m in item.iter_markers("perf"):
            if m.args:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.perf takes keyword arguments "
                    f"only ({', '.join(MARKER_ARGS)})"
                )
            for k, v in m.kwargs.items():
                if k not in MARKER_ARGS:
                    raise pytest.UsageError(
                        f"{item.nodeid}: @pytest.mark.perf: unknown argument "
                        f"{k!r}; known: {', '.join(MARKER_ARGS)}"
                    )
                low = 1 if k == "repeats" else 0
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise pytest.UsageError(
                        f"{item.nodeid}: @pytest.mark.perf({k}=...): expected an integer >= {low}, got {v!r}"
                    )
                if found.get(k, v) != v:
                    raise pytest.UsageError(
                        f"{item.nodeid}: @pytest.mark.perf({k}={v}) disagrees "
                        f"with another gate test's {k}={found[k]}"
                    )
                found[k] = v
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    over = _marker_overrides(items)
    if over:
        config.stash[OVERRIDES] = over


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    """In -v, each point's line carries its figure: `PASSED (612.3 tok/s, ratio 0.982 pass)`. It
    rides on the report's user_properties, so it shows under xdist too."""
    if report.when != "call" or config.getoption("verbose") <= 0 or report.outcome == "skipped":
        return None
    props = dict(report.user_properties)
    if "perf_tps" not in props and "perf_verdict" not in props:
        return None
    if "perf_tps" in props:
        extra = f"{props['perf_tps']:.1f} tok/s"
        if "perf_ratio" in props:
            extra += f", ratio {props['perf_ratio']:.3f} {props.get('perf_status', '')}"
        if "perf_shape_ratio" in props:  # the within-launch quotient (shape.py)
            extra += (
                f"; within launch {props['perf_shape_ratio']:.3f} of ctx "
                f"{props['perf_shape_reference']}'s {props.get('perf_shape_status', '')}"
            )
    else:
        extra = f"verdict: {props['perf_verdict']}"
    word = "PASSED" if report.passed else "FAILED"
    return (
        report.outcome,
        "." if report.passed else "F",
        (f"{word} ({extra.strip()})", {"green": report.passed, "red": not report.passed}),
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its records travel to the controller (fanout.py)
    records = local_records(config) + config.stash.get(MERGED, [])
    if records:
        records.sort(key=lambda r: r.name)
        opt = config.getoption
        paths = ReportPaths.of(
            records[0].profile, json=opt("perf_json"), junit=opt("perf_junit"), plot=opt("perf_plot")
        )
        config.stash[_WRITTEN] = write_all(records, paths)
        config.stash[_RECORDS] = records


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, None)
    if not records:
        return
    tr = terminalreporter
    for rec in records:
        for style, line in summary(rec):
            if style in ("=", "-"):
                tr.write_sep(style, line)
            else:
                tr.write_line(
                    line,
                    yellow=style == "warn",
                    green=style == "good",
                    red=style == "bad",
                    bold=style in ("good", "bad"),
                )
    for note in config.stash.get(_WRITTEN, []):
        tr.write_line(note, red=note.startswith("could not"))
