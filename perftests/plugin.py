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
from pathlib import Path
from typing import Any

import pytest

from perftests import profiles
from perftests.errors import ConfigError, PerftestsError, ServiceError
from perftests.gate import BaselineMissing, Gate, GatePoint
from perftests.measure import MeasurementError
from perftests.report import comparison_table, curve_table
from perftests.session import PerfSession, Settings

DEFAULT_HW = "cpu-reference"
_KEY = pytest.StashKey[PerfSession]()
_GATE = pytest.StashKey[Gate]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("perftests", "perftests: decode-throughput regression gate")
    g.addoption("--perf-hw", "--hw", dest="perf_hw", metavar="NAME",
                default=os.environ.get("PERFTESTS_HW"),
                help=f"hardware profile to run (default: $PERFTESTS_HW or {DEFAULT_HW})")
    g.addoption("--perf-service-url", "--service-url", dest="perf_service_url", metavar="URL",
                help="attach to a running service instead of launching the profile's")
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perf(repeats=None, warmup=None): per-test overrides of the gate's settings")
    if config.getoption("perf_update") and not (config.getoption("perf_reason") or "").strip():
        raise pytest.UsageError("--update-baselines needs --reason \"why the baseline changes\"")
    # An explicit --hw is checked now, so a typo fails before anything is collected or launched.
    if config.getoption("perf_hw"):
        try:
            _gate(config)
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None


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
        reporter.write_line(line, **markup)


def _install_sigterm_handler() -> None:
    # SIGTERM (CI cancelling a job) becomes KeyboardInterrupt, so fixtures tear down and the
    # launched service is stopped, exactly as on Ctrl-C.
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"received signal {signum}")
        signal.signal(signal.SIGTERM, _interrupt)


def _session(config: pytest.Config) -> PerfSession:
    if _KEY in config.stash:
        return config.stash[_KEY]
    opt = config.getoption
    extra = [Path(d) for d in opt("perf_profile_dir")]
    profile = profiles.load(opt("perf_hw") or DEFAULT_HW, extra)
    contexts = None
    if opt("perf_contexts"):
        contexts = profiles.parse_contexts(opt("perf_contexts"), "--perf-contexts")
    settings = Settings.from_profile(
        profile, contexts=contexts, repeats=opt("perf_repeats"), warmup=opt("perf_warmup"),
        cache_mode=opt("perf_cache_mode"), prompt_mode=opt("perf_prompt"), seed=opt("perf_seed"),
        stream_check=opt("perf_stream_check") or None)

    def progress(msg: str) -> None:
        _live(config, f"[perftests] {msg}")

    def detail(msg: str) -> None:
        if config.getoption("verbose") > 0:
            progress(msg)

    sess = PerfSession(profile=profile, settings=settings,
                       service_url=opt("perf_service_url"), api_key_env=opt("perf_api_key_env"),
                       log_dir=Path(opt("perf_log_dir")), progress=progress, detail=detail)
    config.stash[_KEY] = sess
    return sess


def _gate(config: pytest.Config) -> Gate:
    if _GATE in config.stash:
        return config.stash[_GATE]
    sess = _session(config)
    opt = config.getoption
    d = sess.profile.defaults
    other = None
    if opt("perf_provisional_from"):
        extra = [Path(x) for x in opt("perf_profile_dir")]
        other = profiles.load(opt("perf_provisional_from"), extra).baseline_path(config.rootpath)
    tol = opt("perf_tolerance") if opt("perf_tolerance") is not None else d.tolerance
    if not 0 < tol < 1:
        raise ConfigError(f"--perf-tolerance: expected a fraction between 0 and 1, got {tol}")
    def warn(msg: str) -> None:
        _live(config, f"[perftests] WARNING: {msg}", yellow=True, bold=True)

    gate = Gate(session=sess,
                baseline_path=Path(opt("perf_baseline")) if opt("perf_baseline")
                else sess.profile.baseline_path(config.rootpath),
                tolerance=tol, reruns=d.reruns if opt("perf_reruns") is None else opt("perf_reruns"),
                update=opt("perf_update"), reason=opt("perf_reason"), provisional_from=other,
                fingerprint_policy=d.fingerprint_mismatch, warn=warn)
    config.stash[_GATE] = gate
    return gate


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_context" in metafunc.fixturenames:
        try:
            contexts = _session(metafunc.config).settings.contexts
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None
        metafunc.parametrize("perf_context", contexts, ids=[f"ctx={c}" for c in contexts],
                             scope="function")


@pytest.fixture(scope="session")
def perf_session(request: pytest.FixtureRequest) -> Iterator[PerfSession]:
    _install_sigterm_handler()  # only in runs that use the gate, not in every pytest run
    sess = _session(request.config)
    yield sess
    sess.close()


@pytest.fixture(scope="session")
def perf_service(perf_session: PerfSession) -> Any:
    """The service under test, launched from the profile or attached to; healthy on entry."""
    return perf_session.open()


@pytest.fixture(scope="session")
def perf_gate(request: pytest.FixtureRequest, perf_session: PerfSession) -> Gate:
    """The gate's judgement: baseline, comparisons, verdict, refresh."""
    try:
        return _gate(request.config)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture
def perf_point(request: pytest.FixtureRequest, perf_gate: Gate, perf_context: int) -> GatePoint:
    """Measure one context point and judge it against the baseline (re-measuring while it is
    inconclusive). Service failures raise here: an ERROR, and the run stops. A missing baseline
    is carried to the test, which fails with how to create one."""
    marker = request.node.get_closest_marker("perf")
    kw = dict(marker.kwargs) if marker else {}
    try:
        point = perf_gate.session.measure(perf_context, repeats=kw.get("repeats"),
                                          warmup=kw.get("warmup"))
        if perf_gate.update:
            return GatePoint(point)
        try:
            comparison = perf_gate.judge(point)
        except BaselineMissing as e:
            return GatePoint(point, problem=str(e))
        if perf_gate.session.progress:
            perf_gate.session.progress(
                f"ctx={perf_context}: ratio {comparison.ratio:.3f} to baseline {comparison.expected:.1f} "
                f"[{comparison.ratio_low:.3f}, {comparison.ratio_high:.3f}] {comparison.status.upper()}")
        for name, value in (("ratio", comparison.ratio), ("baseline_tps", comparison.expected),
                            ("status", comparison.status)):
            request.node.user_properties.append((f"perf_{name}", value))
        return GatePoint(point, comparison)
    except ServiceError:
        request.session.shouldstop = "perftests: the service under test failed; no verdict"
        raise
    except MeasurementError as e:
        # Every attempt was invalid: no figure to judge. The test fails with the reasons.
        return GatePoint(None, problem=f"invalid measurement: {e}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    sess = config.stash.get(_KEY, None)
    if sess is None or (not sess.points and not sess.run_error):
        return
    tr = terminalreporter
    tr.write_sep("=", f"perftests: {sess.profile.name} ({sess.profile.service.engine})")
    if sess.points:
        tr.write_line(curve_table(list(sess.points.values())))
    gate = config.stash.get(_GATE, None)
    if gate is not None:
        _summarize_gate(tr, gate)
    if sess.run_error:
        tr.write_line("")
        tr.write_line(f"RUN ERROR (not a regression): {sess.run_error}", red=True, bold=True)
    path = Path(config.getoption("perf_json") or f".perftests/last-run-{sess.profile.name}.json")
    try:
        record = sess.record()
        if gate is not None and gate.verdict is not None:
            record.verdict = gate.verdict.to_dict()
        record.write(path)
        tr.write_line(f"run record: {path}")
    except (OSError, PerftestsError) as e:
        tr.write_line(f"could not write run record {path}: {e}", red=True)


def _summarize_gate(tr: Any, gate: Gate) -> None:
    for w in gate.warnings:
        tr.write_line(f"WARNING: {w}", yellow=True)
    if gate.comparisons:
        b = gate._baseline
        tag = " PROVISIONAL" if b is not None and b.provisional else ""
        tr.write_sep("-", f"against{tag} baseline {_rel(gate.baseline_path)}")
        tr.write_line(comparison_table(list(gate.comparisons.values())))
    if gate.verdict is not None:
        v = gate.verdict
        tr.write_line("")
        for i, line in enumerate(v.explanation().splitlines()):
            tr.write_line(line, green=v.passed and i == 0, red=not v.passed and i == 0, bold=i == 0)
    if gate.written is not None:
        tr.write_sep("-", f"baseline written: {_rel(gate.baseline_path)}")
        tr.write_line(gate.written)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
