"""GateRun without a service: configuration checked before anything is launched, judging as a
pure function of what was measured, the outcome's policies, and the record's typed round trip.
(The measuring loop itself runs against the real server in test_gate_e2e.py and test_cli.py.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perftests import baseline as bl
from perftests.config import resolve
from perftests.control import ControlRange, Reading
from perftests.engines.base import RequestResult
from perftests.errors import ConfigError
from perftests.measure import Pair, Point
from perftests.outcome import OutcomeKind
from perftests.record import RunRecord
from perftests.reports import junit
from perftests.reports.terminal import plain, summary
from perftests.run import GateRun
from tests.test_verdict import make_baseline

CURVE = {64: 900.0, 512: 800.0, 2048: 500.0}


def profile_dir(
    tmp_path: Path, *, inconclusive: str = "pass", fingerprint: str = "warn", engine: str = "llamacpp"
) -> Path:
    d = tmp_path / "profiles"
    d.mkdir(exist_ok=True)
    (d / "unit.yaml").write_text(
        f"name: unit\nengine: {engine}\nservice:\n  url: http://127.0.0.1:9\n"
        f"sweep:\n  contexts: [64, 512, 2048]\n"
        f"defaults:\n  tolerance: 0.10\n  reruns: 0\n  launch_noise: 0.03\n"
        f"  inconclusive: {inconclusive}\n  fingerprint_mismatch: {fingerprint}\n"
    )
    return d


def stored_baseline(
    tmp_path: Path,
    *,
    machine: dict | None = None,
    launch_sd: float | None = 0.02,
    control: ControlRange | None = None,
) -> Path:
    b = make_baseline(CURVE, launch_sd=launch_sd, name="unit")
    b.provenance = {"machine": machine} if machine else {}
    b.control = control
    path = tmp_path / "unit.yaml"
    bl.save(b, path)
    return path


def point(ctx: int, tps: float, launch: int = 0, n: int = 5) -> Point:
    p = Point(ctx, 8, 264, "warm", launch=launch)
    for i in range(n):
        t = 256 / (tps * (1 + 0.002 * (i - n // 2)))
        p.pairs.append(
            Pair(
                ctx,
                i,
                RequestResult("x", 8, 0.05, 0, ctx, 8, ctx - 1, "length"),
                RequestResult("x", 264, 0.05 + t, 0, ctx, 264, ctx - 1, "length"),
                "warm",
            )
        )
    return p


def make_run(tmp_path: Path, values: dict | None = None, **kw) -> GateRun:
    d = profile_dir(tmp_path, **kw)
    path = tmp_path / "unit.yaml"
    if not path.exists():
        stored_baseline(tmp_path)
    cfg = resolve({"hw": "unit", "profile_dir": [str(d)], "baseline": str(path), **(values or {})}, tmp_path)
    return GateRun(dataclasses.replace(cfg, control=False))


def test_judging_is_pure_and_names_a_uniform_drop(tmp_path):
    run = make_run(tmp_path)
    run.points = [point(c, t * 0.8) for c, t in CURVE.items()]
    first = run.judge()
    assert run.judge() == first  # judging again measures nothing and changes nothing
    assert len(run.points) == 3
    assert all(c.status == "fail" for c in first.values())
    outcome = run.conclude()
    assert outcome.kind is OutcomeKind.REGRESSION and outcome.exit_code == 1
    assert outcome.failing_contexts == (64, 512, 2048)
    assert run.verdict is not None and run.verdict.kind.value == "uniform regression"


def test_unchanged_figures_pass(tmp_path):
    run = make_run(tmp_path)
    run.points = [point(c, t * 1.01) for c, t in CURVE.items()]
    o = run.conclude()
    assert o.kind is OutcomeKind.PASS and o.exit_code == 0 and not o.failed


@pytest.mark.parametrize("policy, failed, code", [("pass", False, 0), ("fail", True, 1)])
def test_inconclusive_policy_is_applied_once_for_tests_exit_and_junit(tmp_path, policy, failed, code):
    # A 15% drop against a one-launch baseline with 10% launch noise: beyond tolerance, not
    # significant.
    stored_baseline(tmp_path, launch_sd=None)
    run = make_run(tmp_path, {"tolerance": 0.1}, inconclusive=policy)
    run.config = dataclasses.replace(run.config, launch_noise=0.10)
    run.points = [point(64, 900 * 0.85), point(512, 800.0), point(2048, 500.0)]
    o = run.conclude()
    assert run.comparisons[64].status == "inconclusive"
    assert o.kind is OutcomeKind.INCONCLUSIVE and o.failed is failed and o.exit_code == code
    assert (64 in o.failing_contexts) is failed
    rec = RunRecord.from_dict(json.loads(json.dumps(run.record().to_dict())))
    xml = junit.to_string([rec])
    assert ("<failure" in xml) is failed  # the JUnit writer reads the same decision


def _slower_machine_run(tmp_path: Path) -> GateRun:
    ctl = ControlRange({"cpu_gflops": (40.0, 42.0, 41.0)})
    stored_baseline(tmp_path, control=ctl)
    run = make_run(tmp_path)
    run.config = dataclasses.replace(run.config, control=True)
    run.readings = [
        Reading("before", 0, 0.3, cpu_gflops=25.0, cpu_rcv=0.01, foreign_cpu=0.0),
        Reading("after", 0, 0.3, cpu_gflops=25.5, cpu_rcv=0.01, foreign_cpu=0.0),
    ]
    return run


def test_a_drop_on_a_slower_machine_is_an_error_of_the_run_not_a_regression(tmp_path):
    run = _slower_machine_run(tmp_path)
    run.points = [point(c, t * 0.6) for c, t in CURVE.items()]  # a 40% "drop"
    o = run.conclude()
    assert o.kind is OutcomeKind.MACHINE and o.exit_code == 3
    assert "DIFFERS" in o.headline
    assert any("CPU matmul GFLOP/s: 25.2 now" in line for line in o.lines)
    # the verdict it would have had is said, not given
    assert any("would read verdict: UNIFORM REGRESSION" in line for line in o.lines), o.lines
    rec = RunRecord.from_dict(json.loads(json.dumps(run.record().to_dict())))
    assert rec.outcome is not None and rec.outcome.kind is OutcomeKind.MACHINE
    assert "<failure" not in junit.to_string([rec])  # an error of the run, not a failed test
    # the advice: the baseline names no machine, so this one gets a variant of its own ...
    text = " ".join(plain(summary(rec)).split())
    assert "give this kind of machine a baseline of its own" in text and "unit@NAME.yaml" in text
    # ... and a machine of the baseline's own kind that reads slower refreshes that file
    assert rec.judged_against is not None and rec.judged_against.baseline is not None
    rec.judged_against.baseline.provenance = {"machine": rec.machine}
    text = " ".join(plain(summary(rec)).split())
    assert "refresh" in text and "unit.yaml on it" in text and "@NAME" not in text


def test_a_pass_on_a_slower_machine_stands_and_says_the_machine(tmp_path):
    # A slower machine makes the service look slower, never faster: figures as the baseline's
    # measured on it are a pass (the fresh VM of 2026-12-04 was refused here with tok/s matched).
    run = _slower_machine_run(tmp_path)
    run.points = [point(c, t * 1.01) for c, t in CURVE.items()]
    o = run.conclude()
    assert o.kind is OutcomeKind.PASS and o.exit_code == 0
    assert run.machine_check is not None and run.machine_check.status == "differs"
    assert any("slower than the baseline's; the verdict stands" in line for line in o.lines)


def test_an_acceptance_verdict_on_a_slower_machine_stands():
    # Pure: acceptance is counted per verify step, so a slower machine cannot cause it.
    from perftests.control import MachineCheck
    from perftests.outcome import Policy, conclude
    from perftests.verdict import CurveVerdict, Kind

    slower = MachineCheck("differs", ("CPU matmul GFLOP/s: 25.2 now: OUTSIDE (slower)",))
    for kind, code in ((Kind.ACCEPTANCE_COLLAPSE, 1), (Kind.UNIFORM, 3), (Kind.PASS, 0)):
        verdict = CurveVerdict(kind, [])
        o = conclude(policy=Policy(), errors=[], machine=slower, problems={}, comparisons={}, verdict=verdict)
        assert o.exit_code == code, (kind, o)
    busy = MachineCheck("busy", ("launch 1 (before): other processes took 60% of the CPU time",))
    o = conclude(
        policy=Policy(),
        errors=[],
        machine=busy,
        problems={},
        comparisons={},
        verdict=CurveVerdict(Kind.PASS, []),
    )
    assert o.kind is OutcomeKind.MACHINE  # a busy machine refuses every verdict, a pass too


def test_truncated_baseline_is_refused_before_launch_naming_the_file(tmp_path):
    path = stored_baseline(tmp_path)
    path.write_text(path.read_text()[: len(path.read_text()) // 3])
    d = profile_dir(tmp_path)
    with pytest.raises(ConfigError, match=str(path)):
        resolve({"hw": "unit", "profile_dir": [str(d)], "baseline": str(path)}, tmp_path)


def test_missing_baseline_is_refused_before_launch_with_the_refresh_command(tmp_path):
    d = profile_dir(tmp_path)
    with pytest.raises(ConfigError, match="--update-baselines --reason"):
        resolve({"hw": "unit", "profile_dir": [str(d)], "baseline": str(tmp_path / "no.yaml")}, tmp_path)
    # a sweep may measure without one
    cfg = resolve({"hw": "unit", "profile_dir": [str(d)]}, tmp_path, mode="sweep")
    assert cfg.baseline is None


def test_fingerprint_fail_policy_is_refused_in_every_front_end(tmp_path):
    stored_baseline(tmp_path, machine={"cpu_model": "Other CPU", "cpu_count": 512, "gpus": []})
    d = profile_dir(tmp_path, fingerprint="fail")
    for mode in ("gate", "sweep"):
        with pytest.raises(ConfigError, match="fingerprint_mismatch: fail"):
            resolve(
                {"hw": "unit", "profile_dir": [str(d)], "baseline": str(tmp_path / "unit.yaml")},
                tmp_path,
                mode=mode,
            )


def test_a_machine_variant_beside_the_baseline_judges_a_run_on_its_kind_of_machine(tmp_path):
    """baselines/unit.yaml made on another machine, baselines/unit@here.yaml on this one: a run
    without --perf-baseline is judged against the variant and says why; without a matching
    variant it is the profile's file, with the way to make one; a refresh is never written over
    the other machine's file unasked."""
    from perftests.machine import fingerprint

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "baselines").mkdir()
    d = profile_dir(tmp_path)
    values = {"hw": "unit", "profile_dir": [str(d)]}
    refresh = {**values, "update_baselines": True, "reason": "r"}
    other = {"cpu_model": "Other CPU", "cpu_count": 512, "gpus": []}
    elsewhere = make_baseline(CURVE, launch_sd=0.02, name="unit")
    elsewhere.provenance = {"machine": other}
    bl.save(elsewhere, tmp_path / "baselines/unit.yaml")
    cfg = resolve(values, tmp_path)
    assert cfg.baseline_path == tmp_path / "baselines/unit.yaml" and not cfg.notes
    hint = next(w for w in cfg.warnings if "NOT THE BASELINE'S" in w)
    assert "--update-baselines --perf-baseline" in hint and "unit@NAME.yaml" in hint

    bl.save(elsewhere, tmp_path / "baselines/unit@a-other.yaml")  # matches nothing here
    # a variant of no machine here: a refresh would replace the other machine's file; refused
    with pytest.raises(ConfigError, match=r"unit.yaml was made on Other CPU \(512 CPUs\).*--perf-baseline"):
        resolve(refresh, tmp_path)
    here = make_baseline({c: t * 0.5 for c, t in CURVE.items()}, launch_sd=0.02, name="unit")
    here.provenance = {"machine": fingerprint()}
    imported = dataclasses.replace(here, provisional=True)
    bl.save(imported, tmp_path / "baselines/unit@b-provisional.yaml")  # never chosen
    bl.save(here, tmp_path / "baselines/unit@here.yaml")
    said: list[str] = []
    cfg = resolve(values, tmp_path)
    assert cfg.baseline_path == tmp_path / "baselines/unit@here.yaml"
    assert cfg.baseline is not None and cfg.baseline.point(64).tps == pytest.approx(450.0)
    assert not any("NOT THE BASELINE'S" in w for w in cfg.warnings)
    (note,) = cfg.notes
    assert note.startswith("baseline unit@here.yaml: made on a machine like this one")
    assert "unit.yaml was made on Other CPU (512 CPUs)" in note
    run = GateRun(dataclasses.replace(cfg, control=False), progress=said.append)
    assert said == [note]  # said at the run's start
    run.points = [point(c, t * 0.5) for c, t in CURVE.items()]  # this machine's level: a pass
    assert run.conclude().kind is OutcomeKind.PASS
    # a refresh on this machine rewrites the variant, not the other machine's file
    assert resolve(refresh, tmp_path).baseline_path.name == "unit@here.yaml"
    # --perf-baseline names the file: no choosing
    assert resolve({**values, "baseline": str(tmp_path / "baselines/unit.yaml")}, tmp_path).notes == ()
    # no profile's file: the variant, said so
    (tmp_path / "baselines/unit.yaml").unlink()
    assert "there is no unit.yaml" in resolve(values, tmp_path).notes[0]
    # the profile's own file made here wins over a variant
    bl.save(here, tmp_path / "baselines/unit.yaml")
    assert resolve(values, tmp_path).baseline_path == tmp_path / "baselines/unit.yaml"
    # two variants as like this machine: which one judges is not guessed
    bl.save(elsewhere, tmp_path / "baselines/unit.yaml")
    bl.save(here, tmp_path / "baselines/unit@here2.yaml")
    with pytest.raises(
        ConfigError, match=r"unit@here.yaml, .*unit@here2.yaml were all made on a machine like"
    ):
        resolve(values, tmp_path)
    # a variant of another profile is an error wherever it sorts and whatever matches
    (tmp_path / "baselines/unit@here2.yaml").unlink()
    stray = make_baseline(CURVE, name="pro6000")
    stray.provenance = {"machine": other}
    bl.save(stray, tmp_path / "baselines/unit@zz-stray.yaml")
    with pytest.raises(
        ConfigError, match=r"unit@zz-stray.yaml: a baseline of 'pro6000' named as a machine variant"
    ):
        resolve(values, tmp_path)


def test_a_gpu_runner_matches_its_variant_by_card_when_its_driver_moved(tmp_path):
    """Across leases a runner's driver or host CPU may change (baseline._serving_hardware): the
    variant of the same cards is still the one, and an exact match beats it."""
    h200 = {"cpu_model": "Xeon", "cpu_count": 16, "gpus": [{"name": "NVIDIA H200", "driver": "580"}]}
    h100 = {**h200, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580"}]}
    for name, machine in (("gpu.yaml", h200), ("gpu@h100.yaml", h100)):
        b = make_baseline(CURVE, name="gpu")
        b.provenance = {"machine": machine}
        bl.save(b, tmp_path / name)
    new_driver = {**h100, "cpu_count": 32, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "590"}]}
    assert bl.machine_match(h100, new_driver) == 1 and bl.machine_match(h200, new_driver) == 0
    path, why = bl.for_machine(tmp_path / "gpu.yaml", "gpu", new_driver)
    assert path.name == "gpu@h100.yaml" and why and "gpu.yaml was made on NVIDIA H200" in why
    assert bl.for_machine(tmp_path / "gpu.yaml", "gpu", h200) == (tmp_path / "gpu.yaml", None)
    exact = make_baseline(CURVE, name="gpu")
    exact.provenance = {"machine": new_driver}
    bl.save(exact, tmp_path / "gpu@h100-590.yaml")
    assert bl.for_machine(tmp_path / "gpu.yaml", "gpu", new_driver)[0].name == "gpu@h100-590.yaml"
    bare = make_baseline(CURVE, name="gpu")  # made before machines were recorded
    bl.save(bare, tmp_path / "gpu.yaml")
    assert "; gpu.yaml records no machine" in str(bl.for_machine(tmp_path / "gpu.yaml", "gpu", h100)[1])


def test_cold_cache_on_an_adapter_that_cannot_verify_it_is_refused(tmp_path):
    d = profile_dir(tmp_path, engine="openai")
    stored_baseline(tmp_path)
    with pytest.raises(ConfigError, match="openai.*cold|cold.*openai"):
        resolve(
            {
                "hw": "unit",
                "profile_dir": [str(d)],
                "baseline": str(tmp_path / "unit.yaml"),
                "cache_mode": "cold",
            },
            tmp_path,
        )


def test_bad_option_values_name_the_flag(tmp_path):
    d = profile_dir(tmp_path)
    stored_baseline(tmp_path)
    base = {"hw": "unit", "profile_dir": [str(d)], "baseline": str(tmp_path / "unit.yaml")}
    for key, value, flag in [
        ("tolerance", 1.5, "--perf-tolerance"),
        ("launches", 0, "--perf-launches"),
        ("repeats", 0, "--perf-repeats"),
        ("contexts", "64,x", "--perf-contexts"),
    ]:
        with pytest.raises(ConfigError, match=flag):
            resolve({**base, key: value}, tmp_path)
    with pytest.raises(ConfigError, match="--reason"):
        resolve({**base, "update_baselines": True}, tmp_path)


def test_launches_pool_into_one_estimate_and_the_record_round_trips(tmp_path):
    run = make_run(tmp_path)
    run.points = [
        point(c, t * f, launch=i) for i, f in enumerate((0.98, 1.02, 1.0)) for c, t in CURVE.items()
    ]
    run.conclude()
    c = run.comparisons[512]
    assert c.launches == 3 and c.noise_source == "launches"
    rec = run.record()
    back = RunRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.comparisons == rec.comparisons
    assert back.outcome == rec.outcome
    assert back.verdict is not None and back.verdict.kind == rec.verdict.kind
    assert (
        back.baseline is not None
        and back.baseline.point(512).launch_tps == rec.baseline.point(512).launch_tps
    )
    est = back.estimates()[512]
    assert est.launches == 3 and est.launch_tps == pytest.approx((784.0, 816.0, 800.0), rel=0.01)


class FakeLaunch:
    """Stands in for PerfSession in the orchestration tests below (what a launch measures is
    tested on the real server elsewhere): every launch measures the unchanged curve."""

    def __init__(self, **kw) -> None:
        self.launch, self.server, self.url = 0, {}, "http://127.0.0.1:9"
        self.launched, self.startup_s = True, 0.1

    def open(self) -> None:
        return None

    def measure_all(self, contexts):
        return {c: point(c, CURVE[c], launch=self.launch) for c in contexts}

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    "busy_launches, outcome, discarded, kept",
    [({0}, OutcomeKind.PASS, [True, False], 1), ({0, 1, 2}, OutcomeKind.MACHINE, [True, True, False], 2)],
    ids=["busy-once", "busy-throughout"],
)
def test_a_launch_the_machine_was_busy_around_is_dropped_and_taken_again(
    tmp_path, monkeypatch, busy_launches, outcome, discarded, kept
):
    import perftests.run as run_mod
    from tests.test_control import r

    def reading(when, launch):
        return r(when, launch, foreign=0.6 if when == "after" and launch in busy_launches else 0.0)

    monkeypatch.setattr(run_mod, "PerfSession", FakeLaunch)
    monkeypatch.setattr(run_mod.control, "measure", reading)
    monkeypatch.setattr(run_mod, "BUSY_PAUSE_S", 0.0)
    monkeypatch.setattr(run_mod, "ROUND_GAP_S", 0.0)  # the unit profile is attached: rounds
    run = make_run(tmp_path)
    run.config = dataclasses.replace(run.config, control=True)
    o = run.execute()
    assert o.kind is outcome, o
    assert [x.discarded is not None for x in run.launches] == discarded
    assert {p.launch for p in run.points} == {kept}  # the discarded launches' figures are gone
    if outcome is OutcomeKind.MACHINE:
        assert "other processes took 60%" in " ".join(o.lines)  # the last attempt's numbers
    rec = RunRecord.from_dict(json.loads(json.dumps(run.record().to_dict())))
    assert rec.launches[0].discarded and "other processes took 60%" in rec.launches[0].discarded


def test_server_arguments_that_differ_from_the_baselines_are_said():
    """A changed DDTree budget or page size moves tok/s; the run says so beside its verdict."""
    from perftests.run import server_differences

    base = dataclasses.replace(
        make_baseline({64: 100.0, 1024: 90.0}),
        provenance={
            "engine_version": "0.5.23",
            "server_args": {"speculative_ddtree_budget": 32, "page_size": 1},
        },
    )
    same = {"version": "0.5.23", "args": {"speculative_ddtree_budget": 32, "page_size": 1}}
    assert server_differences(base, same) == []
    now = {"version": "0.5.24", "args": {"speculative_ddtree_budget": None, "page_size": 1}}
    assert server_differences(base, now) == [
        "engine version 0.5.24 now, 0.5.23 in the baseline",
        "server argument speculative_ddtree_budget: None now, 32 in the baseline",
    ]
    assert server_differences(None, now) == [] and server_differences(base, {"error": "x"}) == []
    # Another home for the same model file, or a key one side does not report: not a difference.
    b2 = dataclasses.replace(base, provenance={"server_args": {"model_alias": "/root/.cache/m/t-1a.gguf"}})
    assert server_differences(b2, {"args": {"model_alias": "/tmp/h/m/t-1a.gguf", "n_ctx": 9}}) == []
    assert server_differences(b2, {"args": {"model_alias": "/tmp/h/m/t-2b.gguf"}}) != []


def test_pooling_is_checked_before_anything_is_launched(tmp_path):
    d = profile_dir(tmp_path)
    path = stored_baseline(tmp_path)  # no launch argv in its provenance: not this profile's service
    base = {"hw": "unit", "profile_dir": [str(d)], "baseline": str(path)}
    with pytest.raises(ConfigError, match="--perf-pool-sessions: only with --update-baselines"):
        resolve({**base, "pool_sessions": 2}, tmp_path)
    with pytest.raises(ConfigError, match="--perf-pool-sessions: expected a positive integer"):
        resolve({**base, "update_baselines": True, "reason": "x", "pool_sessions": 0}, tmp_path)
    with pytest.raises(ConfigError, match=rf"cannot pool with {path}: .*attaches to a running service"):
        resolve({**base, "update_baselines": True, "reason": "x", "pool_sessions": 2}, tmp_path)
    # replacing it (the default, 1) needs no such match
    cfg = resolve({**base, "update_baselines": True, "reason": "x"}, tmp_path)
    assert cfg.pool_sessions == 1
