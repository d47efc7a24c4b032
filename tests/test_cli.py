"""The `perftests` command: help, profiles, explain (triage without a run), sweep on the reference."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from perftests import baseline as bl
from perftests.cli import main
from perftests.machine import fingerprint
from tests.conftest import reference_argv
from tests.test_verdict import make_baseline, seed_curve


def test_help_works():
    out = subprocess.run([sys.executable, "-m", "perftests.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("profiles", "build", "models", "serve", "sweep", "explain"):
        assert cmd in out.stdout


def test_profiles_lists_the_shipped_ones(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "cpu-reference" in out and "pro6000" in out and "sglang" in out


@pytest.fixture
def pro6000_baseline(tmp_path):
    b = make_baseline({c: seed_curve(c) for c in (60, 1024, 3072)}, acceptance=5.0)
    path = tmp_path / "pro6000.yaml"
    bl.save(b, path)
    return path


def test_explain_seed_report_is_expected_scaling(pro6000_baseline, capsys):
    rc = main(
        [
            "explain",
            "--hw",
            "pro6000",
            "--baseline",
            str(pro6000_baseline),
            "--ctx",
            "5000",
            "--tps",
            "32",
            "--accept",
            "4.9",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "verdict: EXPECTED SCALING" in out
    assert "the fitted model (points at" in out and "context scaling, not a regression" in out


def test_explain_regression_exits_nonzero(pro6000_baseline, capsys):
    rc = main(
        ["explain", "--hw", "pro6000", "--baseline", str(pro6000_baseline), "--ctx", "60", "--tps", "100"]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "REGRESSION" in out and "below the band" in out


def test_explain_names_machine_variants_and_uses_the_profiles_file(pro6000_baseline, capsys):
    # A reported figure is the reporter's machine, not this one: the profile's file is used and
    # each variant beside it named with its machine; --baseline picks one. The variant is made
    # on this very machine, so picking by this machine's fingerprint would take it (and pass).
    b = bl.load(pro6000_baseline)
    here = fingerprint()
    slower = dataclasses.replace(
        b,
        points=tuple(dataclasses.replace(p, tps=p.tps * 0.5) for p in b.points),
        provenance={**b.provenance, "machine": here},
    )
    variant = pro6000_baseline.parent / "pro6000@h100.yaml"
    bl.save(slower, variant)
    argv = ["explain", "--hw", str(pro6000_baseline), "--ctx", "60", "--tps", str(seed_curve(60) * 0.5)]
    assert main(argv) == 1  # half the profile's curve: a regression against it
    out = capsys.readouterr().out
    assert f"note: machine variant {variant} ({bl.serving_hardware(here)}): --baseline {variant}" in out
    assert main([*argv, "--baseline", str(variant)]) == 0  # the variant's own curve: as expected
    assert "machine variant" not in capsys.readouterr().out


def test_explain_without_baseline_says_how_to_create_one(tmp_path, capsys):
    rc = main(
        [
            "explain",
            "--hw",
            "pro6000",
            "--baseline",
            str(tmp_path / "none.yaml"),
            "--ctx",
            "60",
            "--tps",
            "100",
        ]
    )
    assert rc == 2
    assert "--update-baselines" in capsys.readouterr().err


def test_explain_rejects_non_positive_input(pro6000_baseline, capsys):
    assert (
        main(
            [
                "explain",
                "--hw",
                "pro6000",
                "--baseline",
                str(pro6000_baseline),
                "--ctx",
                "5000",
                "--tps",
                "-3",
            ]
        )
        == 2
    )


@pytest.mark.server
def test_sweep_on_the_reference_writes_a_record(tmp_path):
    quoted = ", ".join(f'"{a}"' for a in reference_argv(ctx_size=1024))
    (tmp_path / "tiny.yaml").write_text(
        f"name: tiny\nengine: llamacpp\nservice:\n  launch:\n    argv: [{quoted}]\n"
        "    startup_timeout_s: 900\nsweep:\n  contexts: [64, 256]\ndefaults:\n  repeats: 2\n"
    )
    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "perftests.cli",
            "--profile-dir",
            str(tmp_path),
            "sweep",
            "--hw",
            "tiny",
            "--repeats",
            "3",
            "--stream-check",
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout[-2000:]
    assert "ctx=64:" in proc.stderr and "ctx=256:" in proc.stderr  # progress, as each point completes
    assert "stream" in proc.stdout  # the curve table
    data = json.loads(out.read_text())
    assert [p["context"] for p in data["points"]] == [64, 256]
    assert all(p["summary"]["tps"]["n"] == 3 for p in data["points"])
    stream = data["points"][1]["stream"]
    assert stream["completion_tokens"] == 264 and stream["ttft_s"] > 0
    assert stream["tokens_per_event"] == pytest.approx(1.0)  # no speculation: one token per event
