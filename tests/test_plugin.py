"""The pytest plugin end to end, in a subprocess: options, profile errors, run errors, secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perftests.service import free_port
from tests.standins.sglang import VERSIONS, SGLangStandIn
from tests.standins.vllm import VLLMStandIn

REPO = Path(__file__).resolve().parents[1]
GATE = str(REPO / "perftests")
SECRET = "sk-perftests-do-not-leak-7f3a9c"


def sglang_profile(dir: Path, url: str, api_key_env: str | None = None, engine: str = "sglang") -> None:
    key = f"  api_key_env: {api_key_env}\n" if api_key_env else ""
    (dir / "standin.yaml").write_text(
        f"name: standin\nengine: {engine}\nservice:\n  url: {url}\n{key}"
        "sweep:\n  contexts: [64, 256]\ndefaults:\n  repeats: 3\n  warmup: 1\n"
        # The stand-in's tests are about the gate's flow, not the machine's: a neighbour's burst
        # must not turn them into MACHINE BUSY (the control is tested in test_control.py and on
        # the real server in test_gate_e2e.py).
        "  control: false\n"
    )


def test_help_shows_one_option_group(pytester):
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    group = out[out.index("perftests: decode-throughput regression gate") :]
    for opt in (
        "--perf-hw=NAME, --hw=NAME",
        "--perf-service-url=URL, --service-url=URL",
        "--perf-api-key-env=VAR",
        "--perf-repeats=N",
        "--perf-contexts=L1,L2,...",
    ):
        assert opt in group.split("\n\n")[0], opt


def test_unknown_hw_lists_known_profiles(pytester):
    result = pytester.runpytest_subprocess(GATE, "--hw", "b200-typo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "unknown hardware profile 'b200-typo'" in err
    assert "cpu-reference" in err and "pro6000" in err


def test_malformed_profile_is_a_usage_error_naming_the_line(pytester):
    bad = pytester.path / "profiles"
    bad.mkdir()
    (bad / "broken.yaml").write_text(
        "name: broken\nengine: llamacpp\nsweep:\n  contexts: [64, x]\nservice:\n  url: http://127.0.0.1:1\n"
    )
    result = pytester.runpytest_subprocess(GATE, "--hw", "broken", "--perf-profile-dir", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{bad / 'broken.yaml'}:4: field 'sweep.contexts'" in result.stderr.str()


def standin_baseline(path: Path) -> Path:
    from perftests import baseline as bl
    from tests.test_verdict import make_baseline

    bl.save(make_baseline({64: 250.0, 256: 240.0}, acceptance=4.0, name="standin"), path)
    return path


def test_unreachable_service_is_a_run_error_not_a_failure(pytester):
    sglang_profile(pytester.path, f"http://127.0.0.1:{free_port()}")
    base = standin_baseline(pytester.path / "b.yaml")
    result = pytester.runpytest_subprocess(
        GATE,
        "--hw",
        "standin",
        "--perf-profile-dir",
        str(pytester.path),
        "-p",
        "no:cacheprovider",
        "--perf-baseline",
        str(base),
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) >= 1 and "failed" not in outcomes and "passed" not in outcomes
    assert "RUN ERROR (not a regression)" in result.stdout.str()
    assert "cannot attach" in result.stdout.str()


@pytest.mark.parametrize("version", VERSIONS)
def test_gate_against_sglang_standin_never_shows_the_api_key(pytester, monkeypatch, version):
    monkeypatch.setenv("STANDIN_KEY", SECRET)
    base_file = pytester.path / "baselines" / "standin.yaml"
    common = [
        "--hw",
        "standin",
        "--perf-profile-dir",
        str(pytester.path),
        "-p",
        "no:cacheprovider",
        "--perf-baseline",
        str(base_file),
        "--perf-log-dir",
        str(pytester.path / "logs"),
    ]
    # The stand-in's server info carries api_key unredacted, as SGLang's does.
    with SGLangStandIn(version=version, api_key=SECRET, accept_length=4.0, step_ms=2.0) as sg:
        sglang_profile(pytester.path, sg.url, api_key_env="STANDIN_KEY")
        create = pytester.runpytest_subprocess(
            GATE, *common, "--update-baselines", "--reason", "first baseline for the stand-in"
        )
        record = pytester.path / "run.json"
        result = pytester.runpytest_subprocess(
            GATE,
            *common,
            "-v",
            "-rA",
            "--perf-json",
            str(record),
            "--junitxml",
            str(pytester.path / "junit.xml"),
        )
        assert sg.headers_seen and all(h.get("Authorization") == f"Bearer {SECRET}" for h in sg.headers_seen)
    create.assert_outcomes(passed=3)
    assert "baseline written" in create.stdout.str()
    result.assert_outcomes(passed=3)
    out = result.stdout.str() + result.stderr.str()
    assert "ctx=64" in out and "ctx=256" in out
    assert "verdict: PASS" in out
    data = json.loads(record.read_text())
    assert data["schema"] == "perftests.run/2"
    assert data["verdict"]["kind"] == "pass"
    assert [p["context"] for p in data["points"]] == [64, 256]
    assert data["points"][0]["summary"]["acceptance_length"]["median"] == pytest.approx(4.0, rel=0.05)
    texts = [
        out,
        create.stdout.str(),
        record.read_text(),
        base_file.read_text(),
        (pytester.path / "junit.xml").read_text(),
    ]
    texts += [p.read_text(errors="replace") for p in (pytester.path / "logs").rglob("*") if p.is_file()]
    assert not any(SECRET in t for t in texts), "the API key leaked into output, record or logs"


def test_gate_against_vllm_standin_reads_acceptance_and_the_engine_clock(pytester):
    """The whole gate through the vLLM adapter: attach (the key checked on /v1), a refresh, a
    gate run; acceptance from the per-request spec stats, decode time from per-request metrics."""
    common = ["--hw", "standin", "--perf-profile-dir", str(pytester.path), "-p", "no:cacheprovider"]
    common += ["--perf-baseline", str(pytester.path / "b.yaml")]
    with VLLMStandIn(
        num_speculative_tokens=4, accepted_per_step=3, per_request_metrics=True, per_request_spec=True
    ) as vl:
        sglang_profile(pytester.path, vl.url, engine="vllm")
        create = pytester.runpytest_subprocess(
            GATE, *common, "--update-baselines", "--reason", "vllm stand-in"
        )
        record = pytester.path / "run.json"
        result = pytester.runpytest_subprocess(GATE, *common, "--perf-json", str(record))
    create.assert_outcomes(passed=3)
    result.assert_outcomes(passed=3)
    data = json.loads(record.read_text())
    assert data["verdict"]["kind"] == "pass" and data["server"]["version"] == "0.34.0"
    for p in data["points"]:
        assert p["summary"]["acceptance_length"]["median"] == pytest.approx(4.0, rel=0.05)
        assert p["summary"]["engine_tps"]["median"] > 0


def test_missing_baseline_is_refused_before_launching_saying_how_to_create_it(pytester):
    with SGLangStandIn() as sg:
        sglang_profile(pytester.path, sg.url)
        result = pytester.runpytest_subprocess(
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(pytester.path),
            "-p",
            "no:cacheprovider",
            "--perf-baseline",
            str(pytester.path / "none.yaml"),
        )
        assert not sg.headers_seen, "nothing may be measured before the baseline is known"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "no baseline for hardware 'standin'" in err
    assert "--update-baselines --reason" in err


def test_truncated_baseline_is_a_usage_error_before_anything_is_measured(pytester):
    base = standin_baseline(pytester.path / "b.yaml")
    base.write_text(base.read_text()[:200])
    with SGLangStandIn() as sg:
        sglang_profile(pytester.path, sg.url)
        result = pytester.runpytest_subprocess(
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(pytester.path),
            "-p",
            "no:cacheprovider",
            "--perf-baseline",
            str(base),
        )
        assert not sg.headers_seen
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(base) in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize(
    "marker, needle",
    [
        ("perf(repeats=0)", "expected an integer >= 1"),
        ("perf(reps=3)", "unknown argument 'reps'"),
        ("perf(3)", "keyword arguments only"),
    ],
)
def test_perf_marker_arguments_are_validated(pytester, marker, needle):
    base = standin_baseline(pytester.path / "b.yaml")
    sglang_profile(pytester.path, f"http://127.0.0.1:{free_port()}")
    pytester.makepyfile(
        test_mine=f"import pytest\npytestmark = pytest.mark.{marker}\n"
        "from perftests.test_gate import test_decode_throughput\n"
    )
    result = pytester.runpytest_subprocess(
        "test_mine.py",
        "--hw",
        "standin",
        "--perf-profile-dir",
        str(pytester.path),
        "--perf-baseline",
        str(base),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in result.stderr.str()


def test_update_without_reason_is_a_usage_error(pytester):
    result = pytester.runpytest_subprocess(GATE, "--hw", "cpu-reference", "--update-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--update-baselines needs --reason" in result.stderr.str()


def test_invalid_measurement_fails_with_its_reason(pytester):
    # A server that truncates every request to 100 tokens: no pair can ever be valid.
    with SGLangStandIn(max_tokens_cap=100) as sg:
        sglang_profile(pytester.path, sg.url)
        result = pytester.runpytest_subprocess(
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(pytester.path),
            "-p",
            "no:cacheprovider",
            "--perf-baseline",
            str(pytester.path / "none.yaml"),
            "--perf-contexts",
            "64",
            "--update-baselines",
            "--reason",
            "refused: no valid point",
        )
    result.assert_outcomes(failed=2)  # the point, and the curve: invalid, nothing written
    assert not (pytester.path / "none.yaml").exists()
    out = result.stdout.str()
    assert "invalid measurement" in out
    assert "long request returned 100 tokens, asked 264" in out


def test_sweep_and_the_pytest_gate_reach_the_same_outcome(pytester):
    """One GateRun behind both front ends: the same profile, baseline and policies give the same
    outcome and exit status (here a uniform regression: every verify step 50% slower)."""
    import subprocess
    import sys

    base = standin_baseline(pytester.path / "b.yaml")
    with SGLangStandIn(accept_length=4.0, step_ms=2.0) as sg:
        sglang_profile(pytester.path, sg.url)
        # the baseline: from the service as it is
        made = pytester.runpytest_subprocess(
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(pytester.path),
            "-p",
            "no:cacheprovider",
            "--perf-baseline",
            str(base),
            "--update-baselines",
            "--reason",
            "x",
        )
        made.assert_outcomes(passed=3)
    with SGLangStandIn(accept_length=4.0, step_ms=3.0) as slow:
        sglang_profile(pytester.path, slow.url)
        gate = pytester.runpytest_subprocess(
            GATE,
            "--hw",
            "standin",
            "--perf-profile-dir",
            str(pytester.path),
            "-p",
            "no:cacheprovider",
            "--perf-baseline",
            str(base),
            "--perf-json",
            str(pytester.path / "gate.json"),
        )
        sweep = subprocess.run(
            [
                sys.executable,
                "-m",
                "perftests.cli",
                "sweep",
                "--hw",
                "standin",
                "--profile-dir",
                str(pytester.path),
                "--baseline",
                str(base),
                "--json",
                str(pytester.path / "sweep.json"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    g = json.loads((pytester.path / "gate.json").read_text())["outcome"]
    s = json.loads((pytester.path / "sweep.json").read_text())["outcome"]
    assert g["kind"] == s["kind"] == "regression", (g, s)
    assert g["exit_code"] == s["exit_code"] == sweep.returncode == 1
    assert gate.ret == pytest.ExitCode.TESTS_FAILED
    assert "verdict: UNIFORM REGRESSION" in sweep.stdout
