"""The pytest plugin (entry point `pytest11: perftests`): options, fixtures, marker, summary.

Measurement happens in the `perf_point` fixture, so a service that fails is a pytest ERROR (an
error of the run) while the test body's assertions are the FAILs (measurement invalid; later,
regressions). The two never mix."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perftests import profiles
from perftests.errors import ConfigError, PerftestsError, ServiceError
from perftests.measure import MeasurementError, Point
from perftests.report import curve_table
from perftests.session import PerfSession, Settings

DEFAULT_HW = "cpu-reference"
_KEY = pytest.StashKey[PerfSession]()


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
    g.addoption("--perf-log-dir", dest="perf_log_dir", default=".perftests/logs", metavar="DIR",
                help="where a launched service's log goes (default .perftests/logs)")
    g.addoption("--perf-json", dest="perf_json", metavar="PATH",
                help="write the run record here (default .perftests/last-run-<hw>.json)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perf(repeats=None, warmup=None): per-test overrides of the gate's settings")
    # An explicit --hw is checked now, so a typo fails before anything is collected or launched.
    if config.getoption("perf_hw"):
        try:
            _session(config)
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None


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
        try:
            contexts = tuple(int(c) for c in opt("perf_contexts").split(","))
        except ValueError:
            raise ConfigError(f"--perf-contexts: expected integers separated by commas, "
                              f"got {opt('perf_contexts')!r}") from None
        if any(c <= 0 for c in contexts):
            raise ConfigError(f"--perf-contexts: context lengths must be positive, got {contexts}")
    settings = Settings.from_profile(
        profile, contexts=contexts, repeats=opt("perf_repeats"), warmup=opt("perf_warmup"),
        cache_mode=opt("perf_cache_mode"), prompt_mode=opt("perf_prompt"), seed=opt("perf_seed"))
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def progress(msg: str) -> None:
        if reporter is not None and config.getoption("verbose") > 0:
            reporter.write_line(f"[perftests] {msg}")

    sess = PerfSession(profile=profile, settings=settings,
                       service_url=opt("perf_service_url"), api_key_env=opt("perf_api_key_env"),
                       log_dir=Path(opt("perf_log_dir")), progress=progress)
    config.stash[_KEY] = sess
    return sess


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


@pytest.fixture
def perf_point(request: pytest.FixtureRequest, perf_session: PerfSession, perf_context: int) -> Point:
    """Measure one context point. Service failures raise here (ERROR, run stops); an invalid
    measurement raises here too, because there is no figure to judge."""
    marker = request.node.get_closest_marker("perf")
    kw = dict(marker.kwargs) if marker else {}
    try:
        return perf_session.measure(perf_context, repeats=kw.get("repeats"), warmup=kw.get("warmup"))
    except ServiceError:
        request.session.shouldstop = "perftests: the service under test failed; no verdict"
        raise
    except MeasurementError:
        raise


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    sess = config.stash.get(_KEY, None)
    if sess is None or (not sess.points and not sess.run_error):
        return
    tr = terminalreporter
    tr.write_sep("=", f"perftests: {sess.profile.name} ({sess.profile.service.engine})")
    if sess.points:
        tr.write_line(curve_table(list(sess.points.values())))
    if sess.run_error:
        tr.write_line("")
        tr.write_line(f"RUN ERROR (not a regression): {sess.run_error}", red=True, bold=True)
    path = Path(config.getoption("perf_json") or f".perftests/last-run-{sess.profile.name}.json")
    try:
        sess.record().write(path)
        tr.write_line(f"run record: {path}")
    except (OSError, PerftestsError) as e:
        tr.write_line(f"could not write run record {path}: {e}", red=True)
