"""pytest-xdist fan-out on real reference services: each service owned by exactly one worker, no
two requests ever overlapping on one service, and the workers' results merged into one report.

Each llama-server sits behind a TimelineProxy that records every request's start and end from
outside the gate, so "no overlap" is observed, not taken from the gate's own bookkeeping."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.test_plugin import GATE
from tests.timeline_proxy import TimelineProxy

pytestmark = pytest.mark.server

COMMON = [
    "--hw",
    "cpu-reference",
    "--perf-contexts",
    "64,256",
    "--perf-repeats",
    "3",
    "--perf-warmup",
    "1",
    "--perf-tolerance",
    "0.5",
    # Two services decoding on this machine's two cores make it busy for each other's machine
    # control by construction; these tests are about scheduling, not figures.
    "--perf-no-control",
    "-p",
    "no:cacheprovider",
]


@pytest.fixture(scope="module")
def two_services(launch_reference):
    # Two llama-server processes (the alias only makes them distinct launches of one config), one
    # thread each: on this 2-core machine two 2-thread servers decoding at once slowed to ~1% of
    # their speed (llama.cpp's threads spin-wait for each other), which is not what this tests.
    a = launch_reference(extra=("--alias", "service-a", "--threads", "1"), ctx_size=1024)
    b = launch_reference(extra=("--alias", "service-b", "--threads", "1"), ctx_size=1024)
    return a, b


def _completions(proxy: TimelineProxy) -> list[tuple]:
    return [t for t in proxy.timeline if t[3] == "/completion"]


def test_two_services_two_workers_never_overlap_and_merge(pytester, two_services, tmp_path):
    a, b = two_services
    baseline = tmp_path / "baseline.yaml"
    with TimelineProxy(a.url) as pa, TimelineProxy(b.url) as pb:
        created = pytester.runpytest_subprocess(
            GATE,
            *COMMON,
            "--service-url",
            pa.url,
            "--perf-baseline",
            str(baseline),
            "--update-baselines",
            "--reason",
            "baseline for the fan-out test",
        )
        created.assert_outcomes(passed=3)
        pa.timeline.clear()
        out = tmp_path / "out"
        result = pytester.runpytest_subprocess(
            GATE,
            *COMMON,
            "-n",
            "2",
            "-v",
            "--service-url",
            pa.url,
            "--service-url",
            pb.url,
            "--perf-baseline",
            str(baseline),
            "--perf-json",
            str(out / "run.json"),
            "--perf-junit",
            str(out / "gate.xml"),
            "--perf-plot",
            "none",
        )
    text = result.stdout.str()
    # 2 contexts + 1 curve verdict, per service. Whether they pass depends on how the two servers
    # share this machine's 2 cores, which is not what this tests: only that all ran, none errored.
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 6 and "errors" not in outcomes, text
    for proxy in (pa, pb):
        assert len(_completions(proxy)) >= 2 * 3 * 4  # 2 contexts x (1 warm-up + 3) pairs x 3 requests
        assert proxy.overlaps() == [], "two requests overlapped on one service"

    # Merged into one report: a record per service, each measured by one worker, different ones.
    la, lb = pa.url.removeprefix("http://"), pb.url.removeprefix("http://")
    records = {}
    for label in (la, lb):
        path = out / f"run-{label.replace(':', '_')}.json"
        records[label] = json.loads(path.read_text())
        assert records[label]["target"] == label
        assert [p["context"] for p in records[label]["points"]] == [64, 256]
        assert records[label]["verdict"]["kind"]  # judged, whatever the figures
    workers = {r["worker"] for r in records.values()}
    assert len(workers) == 2 and all(w and w.startswith("gw") for w in workers)
    suites = ET.parse(out / "gate.xml").getroot().findall("testsuite")
    assert sorted(s.get("name") for s in suites) == sorted(f"perftests.{x}" for x in (la, lb))
    assert f"perftests: {la} (llamacpp)" in text and f"perftests: {lb} (llamacpp)" in text
    # Every test of one service ran on that service's worker.
    for label, rec in records.items():
        lines = [x for x in text.splitlines() if f"[{label}-ctx=" in x and x.startswith("[gw")]
        assert len(lines) == 2 and all(f"[{rec['worker']}]" in x for x in lines), lines


def test_one_service_with_n_workers_does_not_interleave(pytester, two_services, tmp_path):
    a, _ = two_services
    baseline = tmp_path / "baseline.yaml"
    with TimelineProxy(a.url) as pa:
        pytester.runpytest_subprocess(
            GATE,
            *COMMON,
            "--service-url",
            pa.url,
            "--perf-baseline",
            str(baseline),
            "--update-baselines",
            "--reason",
            "baseline",
        ).assert_outcomes(passed=3)
        pa.timeline.clear()
        result = pytester.runpytest_subprocess(
            GATE,
            *COMMON,
            "-n",
            "3",
            "-v",
            "--service-url",
            pa.url,
            "--perf-baseline",
            str(baseline),
            "--perf-json",
            str(tmp_path / "run.json"),
            "--perf-plot",
            "none",
        )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 3 and "errors" not in outcomes
    assert len(_completions(pa)) >= 2 * 4 * 3
    assert pa.overlaps() == []
    workers = {line.split("]")[0].split("[")[-1] for line in result.stdout.lines if line.startswith("[gw")}
    assert len(workers) == 1, result.stdout.str()
    assert json.loads((tmp_path / "run.json").read_text())["verdict"] is not None


def test_dist_each_is_refused(pytester, two_services):
    a, _ = two_services
    result = pytester.runpytest_subprocess(GATE, *COMMON, "-n", "2", "--dist", "each", "--service-url", a.url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dist each runs every test on every worker" in result.stderr.str()


def test_refresh_from_several_services_is_refused(pytester):
    result = pytester.runpytest_subprocess(
        GATE,
        "--hw",
        "cpu-reference",
        "--service-url",
        "http://127.0.0.1:1",
        "--service-url",
        "http://127.0.0.1:2",
        "--update-baselines",
        "--reason",
        "x",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give a single --service-url" in result.stderr.str()


def test_same_service_twice_is_refused(pytester):
    result = pytester.runpytest_subprocess(
        GATE,
        "--hw",
        "cpu-reference",
        "--service-url",
        "http://127.0.0.1:1",
        "--service-url",
        "http://127.0.0.1:1",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is given twice" in result.stderr.str()
