"""Reports end to end: a gate run's JUnit XML parsed back field by field against its own JSON
record, pytest's --junitxml carrying the same properties, the Markdown step summary, the PNG plot
read back, the terminal summary's width, and `perftests compare` / `perftests report`.

The runs are against the SGLang stand-in (tests/sglang_standin.py: SGLang's documented schema,
deterministic speculative figures: 4 tokens per verify step), so acceptance length and step time
are known and every property can be checked; the measuring path itself is tested against the
real llama-server elsewhere (and in test_fanout.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from perftests.record import RunRecord
from perftests.reports import plot
from tests.standins.sglang import SGLangStandIn
from tests.test_plugin import GATE, sglang_profile

CLI = [sys.executable, "-m", "perftests.cli"]


def _props(element: ET.Element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.findall("./properties/property")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A baseline from one stand-in, an unchanged run, and a run where every verify step got
    50% slower (a uniform regression), each with every report written."""
    root = tmp_path_factory.mktemp("reports")
    out: dict[str, dict] = {}

    def run(name: str, sg: SGLangStandIn, *extra: str) -> None:
        d = root / name
        d.mkdir()
        sglang_profile(root, sg.url)
        summary = d / "step-summary.md"
        summary.write_text("# earlier step\n")
        env = {
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_REPOSITORY": "team/serving",
            "GITHUB_RUN_ID": "4242",
            "PERFTESTS_ARTIFACT": "perftests-standin",
        }
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(root),
            "-p",
            "no:cacheprovider",
            "-v",
            "--perf-baseline",
            str(root / "baseline.yaml"),
            "--perf-json",
            str(d / "run.json"),
            "--perf-junit",
            str(d / "gate.xml"),
            "--perf-plot",
            str(d / "curve.png"),
            "--junitxml",
            str(d / "pytest.xml"),
            "--perf-log-dir",
            str(d / "logs"),
            *extra,
        ]
        import os

        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=d, timeout=300, env={**os.environ, **env}
        )
        out[name] = {"dir": d, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    with SGLangStandIn(accept_length=4.0, step_ms=2.0) as sg:
        run("create", sg, "--update-baselines", "--reason", "first baseline of the stand-in")
        run("same", sg)
    with SGLangStandIn(accept_length=4.0, step_ms=3.0) as slow:
        run("slow", slow)
    return out


def test_junit_cases_match_the_record_field_by_field(runs):
    r = runs["same"]
    assert r["rc"] == 0, r["stdout"][-3000:]
    record = RunRecord.read(r["dir"] / "run.json")
    root = ET.parse(r["dir"] / "gate.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "perftests.standin"
    assert suite.get("tests") == "3" and suite.get("failures") == "0" and suite.get("errors") == "0"
    sprops = _props(suite)
    assert sprops["profile"] == "standin" and sprops["engine"] == "sglang"
    assert sprops["verdict"] == "pass" and sprops["baseline"].endswith("baseline.yaml")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"decode_throughput[ctx=64]", "decode_throughput[ctx=256]", "curve_verdict"}
    comps = {c.context: c for c in record.comparisons}
    for p in record.points:
        case = cases[f"decode_throughput[ctx={p.context}]"]
        assert case.get("classname") == "perftests.standin"
        assert float(case.get("time")) == pytest.approx(p.elapsed_s, abs=1e-3)
        assert p.elapsed_s > 0
        props = _props(case)
        s, c = p.tps(), comps[p.context]
        assert float(props["tps"]) == pytest.approx(s.median, abs=0.01)
        assert int(props["launches"]) == 1 and int(props["baseline_launches"]) == 1
        assert float(props["tps_within_rcv"]) == pytest.approx(s.rcv, abs=1e-4)
        assert int(props["n"]) == s.n >= 3
        assert float(props["baseline_tps"]) == pytest.approx(c.expected, abs=0.01)
        assert float(props["ratio"]) == pytest.approx(c.ratio, abs=1e-4)
        assert props["launch_noise_source"] == "profile"  # attached, one round: not measured
        assert float(props["ratio_ci_low"]) <= float(props["ratio"]) <= float(props["ratio_ci_high"])
        assert float(props["acceptance_length"]) == pytest.approx(4.0, rel=0.05)
        assert float(props["baseline_acceptance_length"]) == pytest.approx(4.0, rel=0.05)
        # The stand-in sleeps 2 ms + 0.5 ms per 1k context per verify step.
        assert float(props["step_ms"]) == pytest.approx(2.0 + 0.5 * p.context / 1000, rel=0.25)
        assert props["status"] == c.status == "pass"
        assert props["verdict"] == "pass"
        assert case.find("failure") is None and case.find("error") is None
    assert _props(cases["curve_verdict"])["verdict"] == "pass"


def test_pytest_junitxml_carries_the_same_properties(runs):
    r = runs["same"]
    ours = {c.get("name"): _props(c) for c in ET.parse(r["dir"] / "gate.xml").getroot().iter("testcase")}
    theirs = {c.get("name"): _props(c) for c in ET.parse(r["dir"] / "pytest.xml").getroot().iter("testcase")}
    for ctx in (64, 256):
        mine = ours[f"decode_throughput[ctx={ctx}]"]
        pyt = theirs[f"test_decode_throughput[ctx={ctx}]"]
        for name in (
            "tps",
            "ratio",
            "ratio_ci_low",
            "ratio_ci_high",
            "baseline_tps",
            "acceptance_length",
            "step_ms",
            "status",
        ):
            assert name in mine, name
            assert pyt[f"perf_{name}"] == mine[name], name
    assert theirs["test_curve_verdict[standin]"]["perf_verdict"] == "pass"


def test_regression_is_a_junit_failure_with_the_explanation(runs):
    r = runs["slow"]
    assert r["rc"] == 1
    suite = ET.parse(r["dir"] / "gate.xml").getroot().find("testsuite")
    assert suite.get("failures") == "3"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    fail = cases["decode_throughput[ctx=64]"].find("failure")
    assert fail is not None and "FAIL" in fail.get("message") and "ctx=64" in fail.get("message")
    assert fail.get("type") == "uniform regression"
    curve = cases["curve_verdict"].find("failure")
    assert curve.get("message") == "verdict: uniform regression"
    assert "verdict: UNIFORM REGRESSION" in curve.text and "constant term" in curve.text
    assert _props(cases["decode_throughput[ctx=64]"])["status"] == "fail"


def test_step_summary_is_appended_with_table_verdict_and_artifact_link(runs):
    md = (runs["slow"]["dir"] / "step-summary.md").read_text()
    assert md.startswith("# earlier step\n"), "the summary must be appended, not overwritten"
    assert "### perftests `standin` (sglang): ❌ UNIFORM REGRESSION" in md
    assert "| context | tok/s | launches | baseline | ratio |" in md
    record = RunRecord.read(runs["slow"]["dir"] / "run.json")
    for p in record.points:
        row = next(line for line in md.splitlines() if line.startswith(f"| {p.context} |"))
        assert f"{p.tps().median:.1f}" in row and "**FAIL**" in row
    assert "verdict: UNIFORM REGRESSION" in md
    assert (
        "`curve.png`, `run.json` in [perftests-standin]"
        "(https://github.example/team/serving/actions/runs/4242#artifacts)"
    ) in md
    assert "✅ PASS" in (runs["same"]["dir"] / "step-summary.md").read_text()


def test_plot_is_written_and_reads_back(runs):
    from PIL import Image

    path = runs["slow"]["dir"] / "curve.png"
    assert path.stat().st_size > 20_000
    with Image.open(path) as im:
        assert im.format == "PNG" and im.width >= 900 and im.height >= 600
        assert im.text["Title"] == "perftests standin"
        assert im.text["Description"] == "verdict: uniform regression"
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 50, "a near-blank image"
    # The failing points are drawn in the failure colour.
    red = tuple(int(plot.STATUS_COLOURS["fail"][i : i + 2], 16) for i in (1, 3, 5))
    assert any(rgb == red for _, rgb in colours)

    fig = plot.figure(RunRecord.read(runs["slow"]["dir"] / "run.json"))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == [
        "decode tok/s",
        "measured / baseline\n(95% CI)",
        "ms per verify step",
        "acceptance length\n(tokens / step)",
    ]
    assert fig.axes[-1].get_xlabel() == "context length (tokens, log scale)"
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    assert "UNIFORM REGRESSION" in fig.texts[0].get_text()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("baseline model") for t in legend)
    assert any("tolerance" in t for t in legend)
    assert "measured, fail (95% CI of the judgement)" in legend


def test_terminal_summary_fits_100_columns_and_shows_progress_per_point(runs):
    out = runs["slow"]["stdout"]
    section = out[out.index("perftests: standin (sglang)") :]
    section = section[: section.index("short test summary info")]  # ours ends where pytest's begins
    too_wide = [line for line in section.splitlines() if len(line) > 100]
    assert not too_wide, too_wide
    for want in ("against baseline", "verdict: UNIFORM REGRESSION", "JUnit XML:", "plot:", "run record:"):
        assert want in section, want
    # -v: each point's line carries its figures.
    line = next(x for x in out.splitlines() if "test_decode_throughput[ctx=64]" in x and "FAILED (" in x)
    assert "tok/s, ratio 0." in line and "fail" in line


def test_compare_prints_the_verdict_of_b_against_a(runs):
    a, b = runs["same"]["dir"] / "run.json", runs["slow"]["dir"] / "run.json"
    res = subprocess.run([*CLI, "compare", str(a), str(b)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "verdict: UNIFORM REGRESSION" in res.stdout
    assert "FAIL" in res.stdout and "baseline" in res.stdout
    same = subprocess.run([*CLI, "compare", str(a), str(a)], capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and "verdict: PASS" in same.stdout
    assert "1.000" in same.stdout


def test_compare_names_a_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something/else"}')
    res = subprocess.run([*CLI, "compare", str(bad), str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert f"{bad}: not a perftests run record" in res.stderr
    res = subprocess.run(
        [*CLI, "compare", str(tmp_path / "nope.json"), str(bad)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "nope.json: no such run record" in res.stderr
    res = subprocess.run(
        [*CLI, "compare", str(tmp_path / "nope.yaml"), str(bad)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "nope.yaml: no such baseline file" in res.stderr


def test_report_rerenders_a_saved_record(runs, tmp_path):
    rec = runs["slow"]["dir"] / "run.json"
    res = subprocess.run(
        [
            *CLI,
            "report",
            str(rec),
            "--junit",
            str(tmp_path / "j.xml"),
            "--plot",
            str(tmp_path / "p.png"),
            "--markdown",
            str(tmp_path / "s.md"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "verdict: UNIFORM REGRESSION" in res.stdout
    # The same JUnit as the live run wrote (timestamps and hostnames aside).
    live = ET.parse(runs["slow"]["dir"] / "gate.xml").getroot()
    again = ET.parse(tmp_path / "j.xml").getroot()
    assert [_props(c) for c in live.iter("testcase")] == [_props(c) for c in again.iter("testcase")]
    assert (tmp_path / "p.png").stat().st_size > 20_000
    assert "UNIFORM REGRESSION" in (tmp_path / "s.md").read_text()


def test_record_round_trips_with_its_judgement(runs):
    path = runs["slow"]["dir"] / "run.json"
    data = json.loads(path.read_text())
    again = RunRecord.from_dict(data).to_dict()
    assert again == data
