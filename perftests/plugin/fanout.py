"""pytest-xdist fan-out: several services measured in parallel, each owned by exactly one worker.

Two measurements on one service at once corrupt both (they share its batch, its GPU and its KV
cache), so ownership is enforced here rather than left to the user's --dist choice:

- every gate test's id names its service or its context (`[ctx=64]`, `[host:port-ctx=64]`,
  `[cpu-reference]`), and the controller knows the services from the options, so it schedules
  all of one service's tests as one unit on one worker, in collection order (the points, then
  the curve's verdict, which needs the points in the same process). With one service and
  `-n 4`, every gate test still runs on one worker: nothing interleaves. Other tests are spread
  one by one, as `load` does;
- `--dist each` (every test on every worker) is refused when the run contains gate tests;
- each worker sends its records back at the end (xdist's workeroutput), and the controller
  merges them into one report (the plugin's pytest_sessionfinish).

Registered by the plugin only when xdist is installed, since these hooks exist only with it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from perftests.record import RunRecord

from .targets import MERGED, local_records, targets

_CTX = re.compile(r"ctx=\d+")


def owner(nodeid: str, target_names: list[str]) -> str | None:
    """The service a test belongs to, from its id; None for a test that is not the gate's."""
    tail = nodeid.rsplit("::", 1)[-1]
    if not tail.endswith("]") or "[" not in tail:
        return None
    params = tail[tail.index("[") + 1 : -1]
    for name in target_names:
        if params == name:
            return name
        if params.startswith(f"{name}-") and _CTX.fullmatch(params[len(name) + 1 :]):
            return name
    if len(target_names) == 1 and _CTX.fullmatch(params):
        return target_names[0]
    return None


class ServiceScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, where a scope is a service (for the gate's tests) or a single
    test (for everything else)."""

    def __init__(self, config: pytest.Config, log: Any, target_names: list[str]) -> None:
        super().__init__(config, log)
        self.target_names = target_names

    def _split_scope(self, nodeid: str) -> str:
        name = owner(nodeid, self.target_names)
        return f"perftests-service:{name}" if name is not None else nodeid


EACH_REFUSED = (
    "--dist each runs every test on every worker: every service would be measured by "
    "several workers at once, corrupting the figures. Use -n N with the default "
    "distribution; perftests gives each service to one worker."
)


class FanOut:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # Refused up front when the gate is plainly asked for; otherwise the workers refuse it
        # at collection (xdist then reports their refusal as an internal error, but nothing runs).
        asked = (
            config.getoption("perf_hw")
            or config.getoption("perf_service_url")
            or any(
                str(a).rstrip("/").split("::")[0].endswith(("perftests", "test_gate.py")) for a in config.args
            )
        )
        if config.getvalue("dist") == "each" and asked:
            raise pytest.UsageError(EACH_REFUSED)

    # -- controller --------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        # load / worksteal / loadgroup would spread one service's points over workers. loadscope
        # and loadfile already keep the gate's module on one worker, so they are left alone.
        if config.getvalue("dist") in ("load", "worksteal", "loadgroup"):
            return ServiceScheduling(config, log, [t.name for t in targets(config)])
        return None

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["perftests_dist"] = self.config.getvalue("dist")

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        records = (getattr(node, "workeroutput", None) or {}).get("perftests_records") or []
        self.config.stash.setdefault(MERGED, []).extend(RunRecord.from_dict(r) for r in records)

    # -- worker ------------------------------------------------------------------------------
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not hasattr(config, "workerinput"):
            return
        if config.workerinput.get("perftests_dist") != "each":
            return
        if any("perf_run" in getattr(i, "fixturenames", ()) for i in items):
            raise pytest.UsageError(EACH_REFUSED)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            out = config.workeroutput  # type: ignore[attr-defined]  # set by xdist on workers
            out["perftests_records"] = [r.to_dict() for r in local_records(config)]
