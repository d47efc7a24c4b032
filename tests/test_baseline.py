"""Baseline files: round trip, bad input named by file and field, atomic refresh under kill and
under concurrency, provisional curves, and points the baseline never measured."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from perftests import baseline as bl
from perftests.compare import compare_point
from perftests.errors import ConfigError
from tests.test_verdict import est, make_baseline, seed_curve


@pytest.fixture
def stored(tmp_path):
    b = make_baseline({64: 700.0, 512: 450.0, 2048: 130.0, 8192: 36.0})
    b.provenance = {"machine": {"cpu_model": "X", "cpu_count": 2, "gpus": []}, "commit": "abc"}
    path = tmp_path / "cpu.yaml"
    bl.save(b, path)
    return path


def test_round_trip(stored):
    b = bl.load(stored)
    assert b.contexts == (64, 512, 2048, 8192)
    assert b.point(512).tps == 450.0
    assert b.model.kind == "token_ms"
    text = stored.read_text()
    assert text.startswith("# perftests baseline")
    assert "reason: test" in text  # human-diffable: plain YAML keys


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda t: t[: len(t) // 2], "corrupt baseline YAML|not a baseline file|field"),
        (lambda t: "points: [1, 2\n", "corrupt baseline YAML"),
        (lambda t: "", "not a baseline file"),
        (lambda t: t.replace("tps: 450.0", "tps: 0"), r"field 'points\[1\]\.tps': must be positive"),
        (lambda t: t.replace("tps: 450.0", "tps: -450.0"), r"field 'points\[1\]\.tps': must be positive"),
        (lambda t: t.replace("tps: 450.0", "tps: fast"), r"field 'points\[1\]\.tps': expected a number"),
        (lambda t: t.replace("context: 512", "context: 0"), r"field 'points\[1\]\.context'"),
        (lambda t: t.replace("context: 512", "context: 64"), "duplicate context lengths"),
        (lambda t: t.replace("n: 5", "n: 0", 1), r"field 'points\[0\]\.n'"),
    ],
)
def test_bad_baseline_names_file_and_field(stored, mutate, needle):
    stored.write_text(mutate(stored.read_text()))
    with pytest.raises(ConfigError, match=needle) as e:
        bl.load(stored)
    assert str(stored) in str(e.value)


def test_point_the_baseline_never_measured_uses_the_model(stored):
    b = bl.load(stored)
    c = compare_point(b, est(4096, b.model.tps(4096)), 0.05, launch_noise_prior=0.02)
    assert c.source == "model"
    assert c.ratio == pytest.approx(1.0)
    assert c.status == "pass"
    inside = compare_point(b, est(512, 450.0), 0.05, launch_noise_prior=0.02)
    assert inside.source == "baseline"


def test_provisional_curve_is_the_other_shape_scaled(tmp_path):
    b300 = make_baseline({60: 285.0, 4096: 97.0}, acceptance=5.0, name="b300")
    prov = bl.provisional_from(b300, "pro6000", 60, 138.0)
    assert prov.provisional and "PROVISIONAL" in prov.reason
    assert prov.point(60).tps == pytest.approx(138.0)
    # The seed's extrapolation: the B300's 2.9x drop to 4k carried over gives ~47 tok/s.
    assert prov.point(4096).tps == pytest.approx(47.0, abs=0.5)
    assert prov.model.tps(4096) == pytest.approx(47.0, rel=0.02)


_SLOW_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from perftests import baseline as bl
    from tests.test_verdict import make_baseline
    real_fsync = os.fsync
    def slow_fsync(fd):
        print("writing", flush=True)
        time.sleep(30)  # killed here: the new file is half-made, the old one untouched
        real_fsync(fd)
    os.fsync = slow_fsync
    bl.save(make_baseline({64: 1.0, 128: 0.5}), Path(sys.argv[1]))
""")


def test_refresh_killed_mid_write_leaves_the_old_file_intact(stored, tmp_path):
    before = stored.read_bytes()
    script = tmp_path / "writer.py"
    script.write_text(_SLOW_WRITER)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(stored)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline().strip() == b"writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert stored.read_bytes() == before
    assert bl.load(stored).point(512).tps == 450.0
    # The killed writer's half-made file is hidden beside it, and the next refresh removes it.
    assert list(stored.parent.glob(f".{stored.name}.*.tmp"))
    bl.save(bl.load(stored), stored)
    assert not list(stored.parent.glob(f".{stored.name}.*.tmp"))


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from perftests import baseline as bl
    from tests.test_verdict import make_baseline
    tps = float(sys.argv[2])
    for i in range(40):
        bl.save(make_baseline({64: tps, 128: tps / 2, 256: tps / 3}), Path(sys.argv[1]))
""")


def test_two_refreshes_at_once_never_corrupt_the_file(stored, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    procs = [
        subprocess.Popen([sys.executable, str(script), str(stored), tps], cwd=root, env=env)
        for tps in ("111", "222")
    ]
    seen = set()
    while any(p.poll() is None for p in procs):
        b = bl.load(stored)  # must always parse: one whole file or the other
        seen.add(b.point(64).tps)
        time.sleep(0.005)
    assert all(p.returncode == 0 for p in procs)
    assert bl.load(stored).point(64).tps in (111.0, 222.0)
    assert seen <= {700.0, 111.0, 222.0}
    assert not [p for p in stored.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_refresh_keeps_the_files_permissions_and_a_new_file_follows_the_umask(tmp_path):
    # The atomic write goes through mkstemp (0600): a runner's baseline must not turn unreadable
    # to the group that shares it on the first refresh.
    path = tmp_path / "b.yaml"
    old = os.umask(0o022)
    try:
        bl.save(make_baseline({64: 1.0, 128: 0.5}), path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o664)
    bl.save(bl.load(path), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_history_keeps_the_previous_curve(tmp_path):
    from perftests.measure import Point
    from perftests.record import RunRecord

    def record(scale: float) -> RunRecord:
        from perftests.engines.base import RequestResult
        from perftests.measure import Pair

        points = []
        for ctx in (64, 512):
            p = Point(ctx, 8, 264, "warm")
            for i in range(3):
                t = 256 / (seed_curve(ctx) * scale)
                p.pairs.append(
                    Pair(
                        ctx,
                        i,
                        RequestResult("x", 8, 0.1, 0, ctx, 8, ctx - 1, "length"),
                        RequestResult("x", 264, 0.1 + t * (1 + 0.01 * i), 0, ctx, 264, ctx - 1, "length"),
                        "warm",
                    )
                )
            points.append(p)
        return RunRecord(
            profile="cpu",
            engine="llamacpp",
            service_url="u",
            launched=True,
            server={"version": "b11434"},
            machine={},
            settings={},
            points=points,
        )

    path = tmp_path / "cpu.yaml"
    first = bl.from_record(record(1.0), reason="first")
    bl.save(first, path)
    second = bl.from_record(record(0.9), reason="intended: f32 weights", previous=bl.load(path))
    bl.save(second, path)
    data = yaml.safe_load(path.read_text())
    assert data["reason"] == "intended: f32 weights"
    assert data["history"][0]["reason"] == "first"
    assert data["history"][0]["points"][64] == pytest.approx(first.point(64).tps, rel=1e-3)
    diff = bl.diff_table(first, second)
    assert "-10.0%" in diff or "-9.9%" in diff or "-10.1%" in diff
    with pytest.raises(ConfigError, match="needs a reason"):
        bl.from_record(record(1.0), reason="  ")
    bad = record(1.0)
    bad.errors.append("service died")
    with pytest.raises(ConfigError, match="run with errors"):
        bl.from_record(bad, reason="x")


# -- a baseline pooled over sessions (refreshes on other machines or days) ------------------


def session(level: float, created: str, *, sd: float = 0.01, k: int = 5) -> bl.Baseline:
    """One refresh's baseline: k launches of spread `sd` around `level` times a fixed curve."""
    b = make_baseline(
        {64: 100 * level, 1024: 90 * level, 4096: 70 * level}, launch_sd=sd if k > 1 else None, launches=k
    )
    b.created = created
    b.provenance = {
        "engine": "llamacpp",
        "engine_version": "b11434",
        "model": "target.gguf",
        "launch_argv": ["{llama_server}", "--model", "{model:target}"],
        "commit": created,
        "machine": {
            "hostname": "vm",
            "cpu_model": "Xeon",
            "cpu_count": 16,
            "gpus": [{"name": "NVIDIA H200"}],
        },
    }
    b.settings = {
        "short_tokens": 8,
        "long_tokens": 264,
        "repeats": 5,
        "cache_mode": "warm",
        "prompt_mode": "corpus",
    }
    return b


def test_a_pooled_baseline_weighs_each_session_the_same_and_round_trips(tmp_path):
    a, b = session(1.00, "2026-12-01", k=5), session(0.96, "2026-12-02", k=3)
    pooled = bl.pool(b, a, keep=3)
    p = pooled.point(64)
    assert (p.sessions, p.launches, pooled.session_count) == (2, 8, 2)
    # each session's launches are symmetric around its level: the figure is the mean of the two
    # sessions' means, not of the eight launches (which would lean to the 5-launch session)
    assert p.tps == pytest.approx(100 * math.sqrt(0.96), rel=1e-9)
    assert p.launch_sd == pytest.approx(0.01, rel=1e-6)  # within a session, pooled
    within = 0.01**2 * (1 / 5 + 1 / 3) / 2
    assert p.session_sd == pytest.approx(math.sqrt(math.log(0.96) ** 2 / 2 - within), rel=1e-6)
    path = tmp_path / "pooled.yaml"
    bl.save(pooled, path)
    back = bl.load(path)
    assert back.point(64).launch_session == (0,) * 5 + (1,) * 3
    assert back.point(64).session_sd == pytest.approx(p.session_sd, rel=1e-4)
    assert [s["created"] for s in back.sessions] == ["2026-12-01", "2026-12-02"]
    assert "pooled: 2 sessions" in bl.diff_table(a, pooled)
    # a third refresh with keep=2 drops the oldest session
    third = bl.pool(session(1.02, "2026-12-03", k=4), back, keep=2)
    assert [s["created"] for s in third.sessions] == ["2026-12-02", "2026-12-03"]
    assert third.point(64).launches == 7
    assert third.point(64).launch_session == (0,) * 3 + (1,) * 4  # renumbered from 0
    assert third.point(64).tps == pytest.approx(100 * math.sqrt(0.96 * 1.02), rel=1e-5)  # saved to 3 decimals


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda b: b.settings.update(long_tokens=128), "settings.long_tokens 264, this run 128"),
        (lambda b: b.provenance.update(launch_argv=["{llama_server}", "--flash-attn", "off"]), "launch argv"),
        (lambda b: b.provenance.update(engine_version="b12000"), "engine_version"),
        (lambda b: b.points.pop(), "contexts 64, 1024, 4096, this run 64, 1024"),
    ],
)
def test_a_refresh_of_another_service_or_measure_is_not_pooled(change, needle):
    new = session(0.98, "2026-12-02")
    change(new)
    with pytest.raises(ConfigError, match="cannot pool") as e:
        bl.pool(new, session(1.0, "2026-12-01"), keep=3)
    assert needle in str(e.value)


def test_the_same_model_under_another_cache_home_pools_another_model_does_not():
    # A runner's HOME (so its model cache) is not the refresh's: the reference model's file name
    # holds its recipe's digest, so it is the same model; another file name is another model.
    old, new = session(1.0, "2026-12-01"), session(0.99, "2026-12-02")
    old.provenance["model"] = "/tmp/h1/.cache/perftests/models/target-08f6c38c4a23.gguf"
    new.provenance["model"] = "/root/.cache/perftests/models/target-08f6c38c4a23.gguf"
    assert bl.pool(new, old, keep=3).session_count == 2
    new.provenance["model"] = "/root/.cache/perftests/models/target-5d1e0c7a9b21.gguf"
    with pytest.raises(ConfigError, match="model '/tmp/h1/.*target-08f6c38c4a23.gguf', this run") as e:
        bl.pool(new, old, keep=3)
    assert "target-5d1e0c7a9b21.gguf" in str(e.value)


def test_sessions_pool_across_machines_of_one_kind_of_card_only():
    old = session(1.0, "2026-12-01")
    other_cpu = session(0.99, "2026-12-02")
    other_cpu.provenance["machine"] = {**old.provenance["machine"], "cpu_model": "EPYC", "cpu_count": 32}
    assert bl.pool(other_cpu, old, keep=3).session_count == 2  # the GPU serves: its CPU may differ
    h100 = session(0.99, "2026-12-02")
    h100.provenance["machine"] = {**old.provenance["machine"], "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    with pytest.raises(ConfigError, match="measured on NVIDIA H200, this run on NVIDIA H100 80GB HBM3"):
        bl.pool(h100, old, keep=3)
    cpu_only = {"cpu_model": "Xeon", "cpu_count": 2, "gpus": []}
    a, b = session(1.0, "2026-12-01"), session(0.99, "2026-12-02")
    a.provenance["machine"], b.provenance["machine"] = cpu_only, {**cpu_only, "cpu_count": 4}
    with pytest.raises(ConfigError, match=r"Xeon \(2 CPUs\), this run on Xeon \(4 CPUs\)"):
        bl.pool(b, a, keep=3)  # no GPU: the CPU serves, and is the hardware


def test_a_bad_launch_session_names_the_field(tmp_path):
    path = tmp_path / "pooled.yaml"
    bl.save(bl.pool(session(0.97, "2026-12-02"), session(1.0, "2026-12-01"), keep=3), path)
    data = yaml.safe_load(path.read_text())
    data["points"][0]["launch_session"] = data["points"][0]["launch_session"][:-1]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"points\[0\]\.launch_session"):
        bl.load(path)
    data["points"][0]["launch_session"] = [0] * 5 + [2] * 5
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="'sessions'"):
        bl.load(path)
    # one point that says a single session beside others that say two
    data["points"][0]["launch_session"] = [0] * 10
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="the point at context 64 has launch_session"):
        bl.load(path)


def test_between_session_spread_widens_the_interval_but_a_large_drop_still_fails():
    pooled = bl.pool(session(0.96, "2026-12-02", k=3), session(1.0, "2026-12-01", k=5), keep=3)
    p = pooled.point(64)
    # the same figure and launches, as one session: what the gate knew before pooling
    flat = make_baseline({64: p.tps, 1024: 90.0, 4096: 70.0}, launch_sd=0.01, launches=8)
    for drop, single, with_sessions in ((0.04, "fail", "inconclusive"), (0.20, "fail", "fail")):
        e = est(64, p.tps * (1 - drop))
        one = compare_point(flat, e, 0.03, launch_noise_prior=0.01)
        two = compare_point(pooled, e, 0.03, launch_noise_prior=0.01)
        assert (one.status, two.status) == (single, with_sessions), (one.describe(), two.describe())
        assert two.noise_source == "sessions" and two.baseline_sessions == 2
        assert two.mde > one.mde  # the session term is in the interval
        assert "session noise" in two.describe()
    # two sessions that agree: the between-session term is the profile's prior alone, pooled
    # (0 for S - 1 = 1 degree of freedom of the data beside PRIOR_DF = 4 of the prior)
    same = bl.pool(session(1.0, "2026-12-02", k=3), session(1.0, "2026-12-01", k=5), keep=3)
    assert same.point(64).session_sd == 0.0
    c = compare_point(
        same, est(64, same.point(64).tps), 0.03, launch_noise_prior=0.01, session_noise_prior=0.02
    )
    w2 = c.noise_sd**2 * (1 / 5 + 1 / 3) / 2
    assert c.session_sd == pytest.approx(math.sqrt(0.8 * 0.02**2 - 0.2 * w2), rel=1e-9)
    assert c.status == "pass"


def test_pooled_sessions_of_one_launch_and_a_context_between_points():
    # one-launch baselines (as schema /1 files are) hold no launch medians of their own
    one = [session(x, f"2026-12-0{i + 1}", k=1) for i, x in enumerate((1.0, 0.97, 1.02))]
    pooled = bl.pool(one[2], bl.pool(one[1], one[0], keep=3), keep=3)
    p = pooled.point(64)
    assert (p.sessions, p.launches, p.launch_sd) == (3, 3, None)
    c = compare_point(pooled, est(64, p.tps * 0.9), 0.05, launch_noise_prior=0.01)
    assert c.noise_source == "sessions" and math.isfinite(c.mde) and c.status == "fail"
    # a context between the baseline's points is judged against the model, with the session term
    m = compare_point(pooled, est(2048, pooled.model.tps(2048)), 0.05, launch_noise_prior=0.01)
    assert m.source == "model" and m.noise_source == "sessions" and m.baseline_sessions == 3


def test_the_shape_test_pairs_launches_within_each_session():
    from perftests.shape import _baseline_logs

    pooled = bl.pool(session(0.97, "2026-12-02", k=2), session(1.0, "2026-12-01", k=3), keep=3)
    logs = _baseline_logs(pooled, 1024, 64)
    assert logs is not None and len(logs) == 5
    assert all(x == pytest.approx(math.log(0.9), abs=1e-9) for x in logs)
    # the same 5 launches split 3 + 2 at one context and 2 + 3 at the other: not pairable
    b, r = pooled.point(1024), pooled.point(64)
    pooled.points[pooled.points.index(b)] = dataclasses.replace(b, launch_session=(0, 0, 1, 1, 1))
    assert _baseline_logs(pooled, 1024, 64) is None
    assert r.launch_session == (0, 0, 0, 1, 1)
