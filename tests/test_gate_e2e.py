"""The gate end to end on the real reference service: create a baseline with the refresh
command, re-run unchanged (pass), then a real injected change of each kind, to the served model
or server (never to the measurement), gets its verdict.

The service runs with flash attention on: on the 2-core AMD EPYC VM these tests were last tuned on
it was both faster and far steadier between launches than the non-flash path (three runs at
64 / 1024 / 4096 tokens: 1179 / 762 / 400 and 1160 / 805 / 395 tok/s; flash attention off:
1076 / 680 / 325 and 898 / 534 / 310, and 35% apart at 64 tokens on other runs).

The changes, as tok/s ratios to the unchanged service at 64 / 1024 / 4096 tokens of context
(two launches each, `perftests sweep`, same machine):
- f32 weights instead of f16 (`target@dtype=f32`): twice the weight bytes per token; on that CPU
  0.55 / 0.69 / 0.80 (the drop is largest where attention is cheap), on a Xeon VM earlier
  0.62 / 0.68 / 0.65: a uniform (systemic) regression either way;
- the KV cache in f32 instead of f16 (`--cache-type-k f32 --cache-type-v f32`): the weights are
  unchanged, attention reads twice the bytes per cached token: within each launch tok/s at 4096
  over tok/s at 64 falls to 0.60 of the unchanged service's on the Intel Xeon CI VM (2026-12-05:
  0.785 / 0.47 at 64 / 4096 tokens) and to 0.60 on a 2-core AMD EPYC VM (2026-12-06):
  context-dependent, the kind of change a KV-cache dtype or attention-backend regression is.
  (A q8_0 cache, used here before, is not a regression on every CPU: on the EPYC VM it cost
  0.97 / 0.77 / 0.29, on the Xeon VM it ran 1.25 / 1.7 / 1.9x *faster*, and the gate rightly
  said IMPROVEMENT, failing a CI run; f32 costs more bytes on both);
- speculative decoding with the target's own weights as the draft (every draft accepted), then an
  unrelated draft (almost none accepted): an acceptance collapse.
The profile's tolerance is 20%. The verdicts rest on drops of 30-50% (f32 and twice the layers),
on the f32 cache's cost at 4096 tokens *within each launch* (tok/s at 4096 over tok/s at 64 of
the same launch, shape.py: 0.60 of the baseline's quotient, where launch-to-launch
swings of the whole machine hid it from every per-point ratio in one CI run), and on acceptance
falling from 5 to 1 token per step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import reference_argv

pytestmark = pytest.mark.server  # every test here runs the real llama-server

GATE = str(Path(__file__).resolve().parents[1] / "perftests")
CONTEXTS = "[64, 1024, 4096]"


def _profile(
    dir: Path, *, model: str = "target", draft: str | None = None, extra: tuple[str, ...] = ()
) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    argv = list(
        reference_argv(
            ctx_size=4608, draft="draft-identical" if draft else None, extra=("--flash-attn", "on", *extra)
        )
    )
    argv[argv.index("{model:target}")] = "{model:" + model + "}"
    if draft:
        argv[argv.index("{model:draft-identical}")] = "{model:" + draft + "}"
    quoted = ", ".join(f'"{a}"' for a in argv)
    (dir / "gate-ref.yaml").write_text(
        f"name: gate-ref\nengine: llamacpp\nservice:\n  launch:\n    argv: [{quoted}]\n"
        f"    startup_timeout_s: 900\nsweep:\n  contexts: {CONTEXTS}\n"
        f"defaults:\n  repeats: 5\n  warmup: 1\n  tolerance: 0.20\n  reruns: 1\n"
        f"  refresh_launches: 3\n  launch_noise: 0.15\n  shape_noise: 0.12\n"
    )
    return dir


class Result:
    """A gate run in a subprocess: its exit status, output and pytest's outcome counts."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.ret = proc.returncode
        self.out = proc.stdout + proc.stderr
        last = [line for line in proc.stdout.splitlines() if line.startswith("=")][-1:] or [""]
        self.outcomes = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?)", last[0])}


class Gate:
    """Runs the gate on variants of the reference; each baseline is made (by the refresh
    command) on first use, so every test also passes when run alone (-k)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: dict[str, Result] = {}

    def run(self, profile_dir: Path, *args: str, baseline: str = "gate-ref.yaml") -> Result:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            GATE,
            "--hw",
            "gate-ref",
            "--perf-profile-dir",
            str(profile_dir),
            "--perf-baseline",
            str(self.root / "baselines" / baseline),
            "--perf-log-dir",
            str(self.root / "logs"),
            "-p",
            "no:cacheprovider",
            "--perf-plot",
            "none",
            "--perf-json",
            str(self.root / f"run-{profile_dir.name}.json"),
            *args,
        ]
        return Result(subprocess.run(cmd, capture_output=True, text=True, cwd=self.root, timeout=1200))

    def judged(self, profile_dir: Path, *args: str) -> Result:
        """A run that is to reach a verdict against gate-ref.yaml. When its machine control says
        the machine is slower than when the baseline was made (MACHINE DIFFERS: the gate refused
        to judge, rightly), the baseline is made again on the machine as it is now and the run
        repeated, once. A fresh-clone CI run (2026-12-04 22:10) read the CPU matmul at 0.74x of a
        baseline made three minutes earlier in the same session."""
        result = self.run(profile_dir, *args)
        rec = json.loads((self.root / f"run-{profile_dir.name}.json").read_text())
        if "DIFFERS" in ((rec.get("outcome") or {}).get("headline") or ""):
            print(f"{profile_dir.name}: the machine moved since the baseline; made again, run again")
            self.created.pop("gate-ref.yaml", None)
            made = self.baseline()
            assert made.ret == 0, made.out[-3000:]
            result = self.run(profile_dir, *args)
        return result

    def baseline(self, name: str = "gate-ref.yaml", draft: str | None = None) -> Result:
        if name not in self.created:
            self.created[name] = self.run(
                _profile(self.root / f"create-{name}", draft=draft),
                "--update-baselines",
                "--reason",
                f"e2e: baseline {name}",
                baseline=name,
            )
        return self.created[name]


@pytest.fixture(scope="module")
def gate(tmp_path_factory) -> Gate:
    return Gate(tmp_path_factory.mktemp("gate-e2e"))


def test_create_then_unchanged_passes(gate):
    created = gate.baseline()
    assert created.outcomes == {"passed": 4}, created.out[-3000:]
    assert (gate.root / "baselines" / "gate-ref.yaml").exists()
    assert "baseline written" in created.out
    stored = (gate.root / "baselines" / "gate-ref.yaml").read_text()
    assert "launch_tps:" in stored and "control:" in stored  # launches and the machine control
    unchanged = _profile(gate.root / "base")
    again = gate.judged(unchanged)
    if again.ret != 0:
        # As PyTorch's HUD does, a failure counts when it repeats: one unchanged run may fall
        # outside a 95% interval by chance (docs/gate-validation.md); two in a row should not.
        again = gate.run(unchanged)
    assert again.ret == 0, again.out[-4000:]
    assert any(f"verdict: {k}" in again.out for k in ("PASS", "IMPROVEMENT", "INCONCLUSIVE"))


def test_f32_weights_and_twice_the_layers_are_a_uniform_regression(gate):
    # f32 alone (0.55-0.8 of the tok/s) is within what one launch can tell from the 20-30%
    # launch-to-launch swings this VM showed on 2026-12-03; with twice the layers too it is not.
    gate.baseline()
    result = gate.judged(_profile(gate.root / "f32", model="target@dtype=f32,n_layer=8"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.out[-4000:]
    assert "verdict: UNIFORM REGRESSION" in result.out
    assert "constant" in result.out


def test_f32_kv_cache_is_a_context_dependent_regression(gate):
    gate.baseline()
    profile = _profile(gate.root / "kvf32", extra=("--cache-type-k", "f32", "--cache-type-v", "f32"))
    result = gate.judged(profile, "--perf-launches", "3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.out[-4000:]
    rec = json.loads((gate.root / "run-kvf32.json").read_text())
    ratio = {c["context"]: c["ratio"] for c in rec["comparisons"]}
    shape = {s["context"]: s["ratio"] for s in rec["verdict"]["shapes"]}
    print(f"kvf32: ratios {ratio}, within-launch quotients {shape}")
    # Twice the KV bytes costs more where more is cached: the quotient at 4096 was 0.60 of the
    # unchanged service's on both CI CPUs (alternating sweeps, 2026-12-05/06), while the level at 64
    # tokens swings with the machine (0.4-0.8). Within each launch the swing cancels: the
    # quotient at 4096 must fail, and the verdict name it.
    assert "verdict: CONTEXT-DEPENDENT REGRESSION" in result.out
    assert "the ratio worsens with context" in result.out
    assert shape[4096] < 0.8, shape


def test_unrelated_draft_is_an_acceptance_collapse(gate):
    spec = gate.baseline("gate-ref-spec.yaml", draft="draft-identical")
    assert spec.outcomes == {"passed": 4}, spec.out[-3000:]
    result = gate.run(
        _profile(gate.root / "spec-unrelated", draft="draft-unrelated"), baseline="gate-ref-spec.yaml"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.out[-4000:]
    assert "verdict: ACCEPTANCE COLLAPSE" in result.out
    assert "acceptance fell" in result.out and "almost all rejected" in result.out


def test_partly_rejected_drafts_are_an_acceptance_regression(gate):
    """A draft blended 0.3% towards an unrelated model (draft-mix-0.003; about 0.6 of its drafts
    accepted where the identical draft gets all). In a fresh-clone CI run acceptance fell at 64
    tokens only (3.37 tokens/step against 5.02; held at 1024 and 4096: it depends on the text a
    context holds), and the median over all points read "held", so the verdict said UNIFORM. The
    points that dropped are the ones attributed: an acceptance regression, not a collapse."""
    spec = gate.baseline("gate-ref-spec.yaml", draft="draft-identical")
    assert spec.outcomes == {"passed": 4}, spec.out[-3000:]
    result = gate.run(
        _profile(gate.root / "spec-mix", draft="draft-mix-0.003"), baseline="gate-ref-spec.yaml"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.out[-4000:]
    assert "verdict: ACCEPTANCE REGRESSION" in result.out, result.out[-4000:]
    assert "a partial drop, the drafts are still partly accepted" in result.out
    assert "by factor at ctx=" in result.out


def test_a_pooled_refresh_keeps_the_stored_launches_as_an_earlier_session(gate):
    from perftests import baseline as bl

    assert gate.baseline().ret == 0
    first = bl.load(gate.root / "baselines" / "gate-ref.yaml")
    pooled = gate.root / "baselines" / "pooled.yaml"
    pooled.write_text((gate.root / "baselines" / "gate-ref.yaml").read_text())
    # the same service measured the same way, refreshed as a second session of 2 launches
    again = gate.run(
        _profile(gate.root / "pool"),
        "--update-baselines",
        "--perf-pool-sessions",
        "3",
        "--perf-launches",
        "2",
        "--reason",
        "e2e: a second session",
        baseline="pooled.yaml",
    )
    assert again.ret == 0, again.out[-3000:]
    assert "pooled: 2 sessions" in again.out
    b = bl.load(pooled)
    assert (b.session_count, len(b.sessions), b.reason) == (2, 2, "e2e: a second session")
    for p in b.points:
        old = first.point(p.context)
        k = old.launches
        assert p.launch_tps[:k] == old.launch_tps and len(p.launch_tps) == k + 2
        assert p.launch_session == (0,) * k + (1,) * 2
    # judged against it, the run's own record carries the session term in every point
    out = subprocess.run(
        [sys.executable, "-m", "perftests.cli", "compare", str(pooled), str(gate.root / "run-pool.json")],
        capture_output=True,
        text=True,
        cwd=gate.root,
    )
    assert out.returncode == 0 and "between the baseline's 2 sessions" in out.stdout, out.stdout + out.stderr
    # a refresh of another service (a wider FFN) is refused before it launches anything: no
    # server log is written
    logs = set((gate.root / "logs").rglob("*"))
    other = gate.run(
        _profile(gate.root / "pool-ff", model="target@n_ff=3072"),
        "--update-baselines",
        "--perf-pool-sessions",
        "3",
        "--reason",
        "e2e: not the same service",
        baseline="pooled.yaml",
    )
    assert other.ret != 0 and "cannot pool" in other.out and "launch argv" in other.out, other.out[-3000:]
    assert set((gate.root / "logs").rglob("*")) == logs
    assert bl.load(pooled).sessions == b.sessions  # untouched
