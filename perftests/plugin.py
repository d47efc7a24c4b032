"""The pytest plugin (entry point `pytest11: perftests`): options, fixtures, marker, summary.

Measurement happens in the `perf_point` fixture, so a service that fails is a pytest ERROR (an
error of the run) while the test body's assertions are the FAILs (measurement invalid; later,
regressions). The two never mix."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from perftests import profiles
from perftests.errors import ConfigError, ServiceError
from perftests.gate import BaselineMissing, Gate, GatePoint
from perftests.measure import MeasurementError
from perftests.record import RunRecord
from perftests.reports import junit as junit_report
from perftests.reports import markdown, per_service_path, plot
from perftests.reports.fields import PointView, point_properties
from perftests.reports.terminal import summary, wrap
from perftests.session import PerfSession, Settings

DEFAULT_HW = "cpu-reference"
_TARGETS = pytest.StashKey[list["Target"]]()
_GATES = pytest.StashKey[dict[str, Gate]]()
MERGED = pytest.StashKey[list[RunRecord]]()  # records sent back by xdist workers (fanout.py)
_RECORDS = pytest.StashKey[list[RunRecord]]()
_WRITTEN = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("perftests", "perftests: decode-throughput regression gate")
    g.addoption("--perf-hw", "--hw", dest="perf_hw", metavar="NAME",
                default=os.environ.get("PERFTESTS_HW"),
                help=f"hardware profile to run (default: $PERFTESTS_HW or {DEFAULT_HW})")
    g.addoption("--perf-service-url", "--service-url", dest="perf_service_url", metavar="URL",
                action="append", default=[],
                help="attach to a running service instead of launching the profile's; give it "
                     "several times to measure several services in parallel under -n (each "
                     "owned by one xdist worker)")
    g.addoption("--perf-api-key-env", "--api-key-env", dest="perf_api_key_env", metavar="VAR",
                help="environment variable holding the service's API key (never logged)")
    g.addoption("--perf-profile-dir", dest="perf_profile_dir", action="append", default=[],
                metavar="DIR", help="extra directory of profile YAML files (searched first)")
    g.addoption("--perf-contexts", dest="perf_contexts", metavar="L1,L2,...",
                help="override the profile's context lengths")
    g.addoption("--perf-repeats", dest="perf_repeats", type=int, metavar="N",
                help="valid pairs per context (default: the profile's)")
    g.addoption("--perf-warmup", dest="perf_warmup", type=int, metavar="N",
                help="untimed warm-up pairs per context (default: the profile's)")
    g.addoption("--perf-cache-mode", dest="perf_cache_mode", choices=["warm", "cold"],
                help="warm: both requests reuse a cached prefix (default); cold: no reuse")
    g.addoption("--perf-prompt", dest="perf_prompt", choices=["corpus", "random"],
                help="prompt content: corpus text (default) or random token ids")
    g.addoption("--perf-seed", dest="perf_seed", type=int, help="prompt seed (default 0)")
    g.addoption("--perf-stream-check", dest="perf_stream_check", action="store_true",
                help="also stream one request per context: time to first token, streamed decode rate")
    g.addoption("--perf-update-baselines", "--update-baselines", dest="perf_update", action="store_true",
                help="measure, then write this hardware's baseline from the run (needs --reason)")
    g.addoption("--perf-reason", "--reason", dest="perf_reason", metavar="TEXT",
                help="why the baseline changes; recorded in the file's history")
    g.addoption("--perf-provisional-from", "--provisional-from", dest="perf_provisional_from",
                metavar="HW", help="without a baseline, judge against HW's curve scaled to this "
                                   "hardware's shortest-context point (marked provisional)")
    g.addoption("--perf-baseline", dest="perf_baseline", metavar="PATH",
                help="baseline file (default: the profile's defaults.baseline)")
    g.addoption("--perf-tolerance", dest="perf_tolerance", type=float, metavar="FRACTION",
                help="allowed relative drop before a point can fail (default: the profile's)")
    g.addoption("--perf-reruns", dest="perf_reruns", type=int, metavar="N",
                help="re-measurements of an inconclusive point (default: the profile's)")
    g.addoption("--perf-log-dir", dest="perf_log_dir", default=".perftests/logs", metavar="DIR",
                help="where a launched service's log goes (default .perftests/logs)")
    g.addoption("--perf-json", dest="perf_json", metavar="PATH",
                help="write the run record here (default .perftests/last-run-<hw>.json)")
    g.addoption("--perf-junit", dest="perf_junit", metavar="PATH",
                help="write JUnit XML (one case per context point) here (default: beside the record)")
    g.addoption("--perf-plot", dest="perf_plot", metavar="PATH",
                help="write the PNG plot here (default: beside the record; 'none' to skip)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perf(repeats=None, warmup=None): per-test overrides of the gate's settings")
    if config.getoption("perf_update") and not (config.getoption("perf_reason") or "").strip():
        raise pytest.UsageError("--update-baselines needs --reason \"why the baseline changes\"")
    if config.getoption("perf_update") and len(config.getoption("perf_service_url") or []) > 1:
        raise pytest.UsageError("--update-baselines writes one hardware's baseline from one service: "
                                "give a single --service-url")
    # An explicit --hw or --service-url is checked now, so a typo fails before anything is
    # collected or launched.
    if config.getoption("perf_hw") or config.getoption("perf_service_url"):
        try:
            gate_for(config)
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None
    if config.pluginmanager.hasplugin("xdist"):
        from perftests.fanout import FanOut

        config.pluginmanager.register(FanOut(config), "perftests-fanout")


def _live(config: pytest.Config, line: str, **markup: bool) -> None:
    """Write a line to the terminal now, even from inside a fixture: capture is suspended for it,
    as pytest's live logging does, so a 5-minute first build or a long sweep never looks hung."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        reporter.ensure_newline()
        for part in wrap(line):
            reporter.write_line(part, **markup)


def _install_sigterm_handler() -> None:
    # SIGTERM (CI cancelling a job) becomes KeyboardInterrupt, so fixtures tear down and the
    # launched service is stopped, exactly as on Ctrl-C.
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"received signal {signum}")
        signal.signal(signal.SIGTERM, _interrupt)


@dataclass(frozen=True)
class Target:
    """One service the run measures: launched from the profile (url None) or attached to."""

    name: str
    url: str | None


def _profile(config: pytest.Config) -> profiles.Profile:
    extra = [Path(d) for d in config.getoption("perf_profile_dir")]
    return profiles.load(config.getoption("perf_hw") or DEFAULT_HW, extra)


def _label(url: str) -> str:
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise ConfigError(f"--perf-service-url: not a URL: {url!r}") from None
    if not u.host:
        raise ConfigError(f"--perf-service-url: no host in {url!r}")
    return f"{u.host}:{u.port}" if u.port else u.host


def targets(config: pytest.Config) -> list[Target]:
    """The services this run measures. Several --service-url options give several targets, each
    measured by exactly one xdist worker (see fanout.py); none launches the profile's service."""
    if _TARGETS in config.stash:
        return config.stash[_TARGETS]
    name = _profile(config).name
    urls: list[str] = list(config.getoption("perf_service_url") or [])
    if len(set(urls)) != len(urls):
        dup = next(u for u in urls if urls.count(u) > 1)
        raise ConfigError(f"--perf-service-url {dup} is given twice: two measurements would share "
                          f"one service and corrupt each other")
    if len(urls) <= 1:
        found = [Target(name, urls[0] if urls else None)]
    else:
        labels = [_label(u) for u in urls]
        if len(set(labels)) != len(labels):
            labels = [f"{name}-{i}" for i in range(len(urls))]
        found = [Target(lab, u) for lab, u in zip(labels, urls, strict=True)]
    config.stash[_TARGETS] = found
    return found


def _session(config: pytest.Config, target: Target) -> PerfSession:
    opt = config.getoption
    profile = _profile(config)
    contexts = None
    if opt("perf_contexts"):
        contexts = profiles.parse_contexts(opt("perf_contexts"), "--perf-contexts")
    settings = Settings.from_profile(
        profile, contexts=contexts, repeats=opt("perf_repeats"), warmup=opt("perf_warmup"),
        cache_mode=opt("perf_cache_mode"), prompt_mode=opt("perf_prompt"), seed=opt("perf_seed"),
        stream_check=opt("perf_stream_check") or None)
    several = len(targets(config)) > 1
    prefix = f"[perftests {target.name}]" if several else "[perftests]"

    def progress(msg: str) -> None:
        _live(config, f"{prefix} {msg}")

    def detail(msg: str) -> None:
        if config.getoption("verbose") > 0:
            progress(msg)

    log_dir = Path(opt("perf_log_dir"))
    return PerfSession(profile=profile, settings=settings, service_url=target.url,
                       target=target.name if several else "", api_key_env=opt("perf_api_key_env"),
                       log_dir=log_dir, progress=progress, detail=detail)


def gate_for(config: pytest.Config, target_name: str | None = None) -> Gate:
    """The gate (and its measuring session) of one target, made on first use: a worker under
    xdist only ever makes, and so only ever opens, the services it owns."""
    gates = config.stash.setdefault(_GATES, {})
    tgts = targets(config)
    target = tgts[0] if target_name is None else next(t for t in tgts if t.name == target_name)
    if target.name in gates:
        return gates[target.name]
    sess = _session(config, target)
    opt = config.getoption
    d = sess.profile.defaults
    other = None
    if opt("perf_provisional_from"):
        extra = [Path(x) for x in opt("perf_profile_dir")]
        other = profiles.load(opt("perf_provisional_from"), extra).baseline_path(config.rootpath)
    tol = opt("perf_tolerance") if opt("perf_tolerance") is not None else d.tolerance
    if not 0 < tol < 1:
        raise ConfigError(f"--perf-tolerance: expected a fraction between 0 and 1, got {tol}")
    prefix = f"[perftests {target.name}]" if len(tgts) > 1 else "[perftests]"

    def warn(msg: str) -> None:
        _live(config, f"{prefix} WARNING: {msg}", yellow=True, bold=True)

    gate = Gate(session=sess,
                baseline_path=Path(opt("perf_baseline")) if opt("perf_baseline")
                else sess.profile.baseline_path(config.rootpath),
                tolerance=tol, reruns=d.reruns if opt("perf_reruns") is None else opt("perf_reruns"),
                update=opt("perf_update"), reason=opt("perf_reason"), provisional_from=other,
                fingerprint_policy=d.fingerprint_mismatch, warn=warn)
    gates[target.name] = gate
    return gate


def local_records(config: pytest.Config) -> list[RunRecord]:
    """Records of the targets this process measured (skipping ones it never used)."""
    out = []
    for gate in config.stash.get(_GATES, {}).values():
        sess = gate.session
        if sess.points or sess.run_error or gate.problems:
            out.append(gate.record())
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "perf_context" not in names and "perf_target" not in names:
        return
    try:
        tgts = targets(metafunc.config)
        contexts = gate_for(metafunc.config, tgts[0].name).session.settings.contexts
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    several = len(tgts) > 1
    # Target-major order: under xdist all of one target's items form one group, run in this order.
    # Every gate test's id names its target or its context (fanout.py schedules by the id).
    if "perf_context" in names and several:
        metafunc.parametrize(("perf_target", "perf_context"),
                             [(t.name, c) for t in tgts for c in contexts],
                             ids=[f"{t.name}-ctx={c}" for t in tgts for c in contexts])
    elif "perf_context" in names:
        metafunc.parametrize("perf_context", contexts, ids=[f"ctx={c}" for c in contexts])
    else:
        metafunc.parametrize("perf_target", [t.name for t in tgts], ids=[t.name for t in tgts])


@pytest.fixture(scope="session")
def _perf_services(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stops every service this process launched, at the end of the session."""
    _install_sigterm_handler()  # only in runs that use the gate, not in every pytest run
    yield
    for gate in request.config.stash.get(_GATES, {}).values():
        gate.session.close()


@pytest.fixture
def perf_target(request: pytest.FixtureRequest) -> str:
    """The name of the service a test measures (parametrized when the run has several)."""
    return targets(request.config)[0].name


@pytest.fixture
def perf_gate(request: pytest.FixtureRequest, _perf_services: None, perf_target: str) -> Gate:
    """The gate's judgement for this target: baseline, comparisons, verdict, refresh."""
    try:
        return gate_for(request.config, perf_target)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture
def perf_session(perf_gate: Gate) -> PerfSession:
    """The measuring session of this target (settings, points measured so far)."""
    return perf_gate.session


@pytest.fixture
def perf_service(perf_session: PerfSession) -> Any:
    """The service under test, launched from the profile or attached to; healthy on entry."""
    return perf_session.open()


@pytest.fixture
def perf_point(request: pytest.FixtureRequest, perf_gate: Gate, perf_context: int) -> GatePoint:
    """Measure one context point and judge it against the baseline (re-measuring while it is
    inconclusive). Service failures raise here: an ERROR (and with one service, the run stops).
    A missing baseline is carried to the test, which fails with how to create one."""
    marker = request.node.get_closest_marker("perf")
    kw = dict(marker.kwargs) if marker else {}
    result = _measure_and_judge(request, perf_gate, perf_context, kw)
    view = PointView(perf_context, result.point, result.comparison, result.problem)
    for name, value in point_properties(view):
        request.node.user_properties.append((f"perf_{name}", value))
    return result


def _measure_and_judge(request: pytest.FixtureRequest, gate: Gate, ctx: int,
                       kw: dict[str, Any]) -> GatePoint:
    try:
        point = gate.session.measure(ctx, repeats=kw.get("repeats"), warmup=kw.get("warmup"))
        if gate.update:
            return GatePoint(point)
        try:
            comparison = gate.judge(point)
        except BaselineMissing as e:
            gate.problems[ctx] = str(e)
            return GatePoint(point, problem=str(e))
        if gate.session.progress:
            gate.session.progress(
                f"ctx={ctx}: ratio {comparison.ratio:.3f} to baseline {comparison.expected:.1f} "
                f"[{comparison.ratio_low:.3f}, {comparison.ratio_high:.3f}] {comparison.status.upper()}")
        return GatePoint(point, comparison)
    except ServiceError:
        if len(targets(request.config)) == 1:
            request.session.shouldstop = "perftests: the service under test failed; no verdict"
        # With several services the others go on; this one's later points fail fast (the
        # session remembers the error), each an ERROR.
        raise
    except MeasurementError as e:
        # Every attempt was invalid: no figure to judge. The test fails with the reasons.
        gate.problems[ctx] = f"invalid measurement: {e}"
        return GatePoint(None, problem=f"invalid measurement: {e}")


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
    else:
        extra = f"verdict: {props['perf_verdict']}"
    word = "PASSED" if report.passed else "FAILED"
    return report.outcome, "." if report.passed else "F", (f"{word} ({extra.strip()})",
                                                           {"green": report.passed,
                                                            "red": not report.passed})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its records travel to the controller (fanout.py)
    records = local_records(config) + config.stash.get(MERGED, [])
    if records:
        records.sort(key=lambda r: r.name)
        config.stash[_WRITTEN] = write_reports(config, records)
        config.stash[_RECORDS] = records


def write_reports(config: pytest.Config, records: list[RunRecord]) -> list[str]:
    """Write the JSON record(s), JUnit XML, plot(s) and step summary; returns what was written
    (or why not), for the terminal summary. A report that cannot be written never hides the
    others or the verdict."""
    opt = config.getoption
    first = records[0]
    stem = f"last-run-{first.profile}"
    json_base = Path(opt("perf_json") or f".perftests/{stem}.json")
    junit = Path(opt("perf_junit") or json_base.with_suffix(".xml"))
    plot_opt = opt("perf_plot")
    plot_base = None if plot_opt == "none" else Path(plot_opt or json_base.with_suffix(".png"))
    several = len(records) > 1
    notes: list[str] = []
    files: dict[str, dict[str, Path]] = {}

    def per(base: Path, rec: RunRecord) -> Path:
        return per_service_path(base, rec.name, several)

    for rec in records:
        files[rec.name] = {}
        path = per(json_base, rec)
        try:
            rec.write(path)
            files[rec.name]["record_path"] = path
            notes.append(f"run record: {path}")
        except OSError as e:
            notes.append(f"could not write run record {path}: {e}")
        if plot_base is not None and rec.points:
            ppath = per(plot_base, rec)
            try:
                plot.write(rec, ppath)
                files[rec.name]["plot"] = ppath
                notes.append(f"plot: {ppath}")
            except Exception as e:  # noqa: BLE001 - a plotting failure must not hide the verdict
                notes.append(f"could not draw plot {ppath}: {type(e).__name__}: {e}")
    try:
        junit_report.write(records, junit)
        notes.append(f"JUnit XML: {junit}")
    except OSError as e:
        notes.append(f"could not write JUnit XML {junit}: {e}")
    try:
        step = markdown.append_step_summary(markdown.document(records, files))
        if step is not None:
            notes.append(f"step summary appended: {step}")
    except OSError as e:
        notes.append(f"could not append the step summary: {e}")
    return notes


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
                tr.write_line(line, yellow=style == "warn", green=style == "good",
                              red=style == "bad", bold=style in ("good", "bad"))
    for note in config.stash.get(_WRITTEN, []):
        tr.write_line(note, red=note.startswith("could not"))
