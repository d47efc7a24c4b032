"""The gate's fixtures. The whole measuring campaign (every launch, every context) runs in the
first gate test's `perf_outcome`, so a failing service or a busy machine is a pytest ERROR there
(an error of the run, never a regression), while the tests' assertions are the FAILs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from perftests.ab import ABRun
from perftests.errors import PerftestsError
from perftests.outcome import Outcome, OutcomeKind
from perftests.record import PointResult
from perftests.reports.fields import point_properties
from perftests.run import GateRun

from .live import install_sigterm_handler
from .targets import RUNS, run_for, targets


class RunError(PerftestsError):
    """The run could not measure (service, machine): an ERROR of every gate test."""


@pytest.fixture(scope="session")
def _perf_runs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Installs the SIGTERM handler for runs that use the gate, and nothing else: each run
    closes its own services as it goes."""
    install_sigterm_handler()
    yield
    del request


@pytest.fixture
def perf_target(request: pytest.FixtureRequest) -> str:
    """The name of the service a test measures (parametrized when the run has several)."""
    return targets(request.config)[0].name


@pytest.fixture
def perf_run(request: pytest.FixtureRequest, _perf_runs: None, perf_target: str) -> GateRun | ABRun:
    """This target's gate run: configuration, launches, points, judgement, outcome."""
    return run_for(request.config, perf_target)


@pytest.fixture
def perf_outcome(request: pytest.FixtureRequest, perf_run: GateRun | ABRun) -> Outcome:
    """The run's outcome, measuring first if no test has yet. A run error or a machine that is
    busy or not the baseline's raises here: an ERROR, not a FAIL."""
    outcome = perf_run.execute()
    if outcome.kind in (OutcomeKind.RUN_ERROR, OutcomeKind.MACHINE):
        if len(request.config.stash.get(RUNS, {})) <= 1 and len(targets(request.config)) == 1:
            request.session.shouldstop = f"perftests: {outcome.headline}; no verdict"
        raise RunError("\n".join([outcome.headline, *outcome.lines]))
    return outcome


@pytest.fixture
def perf_point(
    request: pytest.FixtureRequest, perf_run: GateRun | ABRun, perf_outcome: Outcome, perf_context: int
) -> PointResult:
    """One context's result; its figures also go to pytest's junitxml as perf_* properties."""
    result = next(r for r in perf_run.record().results() if r.context == perf_context)
    for name, value in point_properties(result):
        request.node.user_properties.append((f"perf_{name}", value))
    return result
