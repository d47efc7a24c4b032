"""pytest-xdist fan-out: several services measured in parallel, each owned by exactly one worker.

Two measurements on one service at once corrupt both (they share its batch, its GPU and its KV
cache), so ownership is enforced here rather than left to the user's --dist choice:

- each worker tags every gate test with its service (`nodeid@perftests:<service>`), and the
  controller schedules by that tag (xdist's group scheduling), so all of one service's tests run
  on one worker, in collection order (the points, then the curve's verdict). With one service
  and `-n 4`, every gate test still runs on one worker: nothing interleaves;
- `--dist each` (every test on every worker) is refused when the run contains gate tests;
- each worker sends its records back at the end (xdist's workeroutput), and the controller
  merges them into one report (plugin.pytest_sessionfinish).

Registered by the plugin only when xdist is installed, since these hooks exist only with it."""

from __future__ import annotations

from typing import Any

import pytest

from perftests.record import RunRecord

GROUP_TAG = "@perftests:"


class FanOut:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    # -- controller --------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        # load / worksteal would spread one service's points over workers; group scheduling keeps
        # each tagged group on one worker and spreads untagged tests as `load` does. loadscope
        # and loadfile already keep the gate's module on one worker, so they are left alone.
        if config.getvalue("dist") in ("load", "worksteal", "loadgroup"):
            from xdist.scheduler import LoadGroupScheduling

            return LoadGroupScheduling(config, log)
        return None

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["perftests_dist"] = self.config.getvalue("dist")

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from perftests.plugin import MERGED

        records = (getattr(node, "workeroutput", None) or {}).get("perftests_records") or []
        self.config.stash.setdefault(MERGED, []).extend(RunRecord.from_dict(r) for r in records)

    # -- worker ------------------------------------------------------------------------------
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not hasattr(config, "workerinput"):
            return
        from perftests.plugin import targets

        gate_items = [i for i in items if "perf_target" in getattr(i, "fixturenames", ())]
        if not gate_items:
            return
        if config.workerinput.get("perftests_dist") == "each":
            raise pytest.UsageError(
                "--dist each runs every test on every worker: every service would be measured by "
                "several workers at once, corrupting the figures. Use -n N with the default "
                "distribution; perftests gives each service to one worker.")
        default = targets(config)[0].name
        for item in gate_items:
            callspec = getattr(item, "callspec", None)
            target = callspec.params.get("perf_target", default) if callspec else default
            item._nodeid = f"{item.nodeid}{GROUP_TAG}{target}"  # as xdist's own loadgroup does

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            from perftests.plugin import local_records

            config.workeroutput["perftests_records"] = [r.to_dict() for r in local_records(config)]
