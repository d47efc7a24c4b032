"""`perftests baseline pool`: a baseline pooled over sessions from the run records that three H200 leases
left in docs/gpu-validation/ (real runs of the 7B profile) and a fourth lease's, on an H100."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from perftests import baseline as bl
from perftests.cli import main

D = Path(__file__).resolve().parent.parent / "docs" / "gpu-validation"
LEASE1 = [D / "7b/records/refresh.json", *(D / f"7b/records/aa-{i}.json" for i in range(1, 11))]
LEASE2 = [D / f"2026-12-04-lease2/records/xaa-{i}.json" for i in range(1, 4)]  # xaa-2 failed at 3%
LEASE3 = [D / f"2026-12-05-lease3/records/xaa-{i}.json" for i in range(1, 6)]
H100 = [D / f"2026-12-07-lease6/records/xaa-{i}.json" for i in range(1, 3)]


def medians(paths: list[Path], ctx: int) -> list[float]:
    """The kept launches' medians at `ctx`, read from the JSON as written (not via the package)."""
    out = []
    for p in paths:
        d = json.loads(p.read_text())
        dropped = {x["index"] for x in d["launches"] if x.get("discarded")}
        out += [
            x["summary"]["tps"]["median"]
            for x in d["points"]
            if x["context"] == ctx and x["launch"] not in dropped
        ]
    return out


def gm(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def pool(out: Path, *sessions: list[Path], extra: tuple[str, ...] = ()) -> int:
    argv = ["baseline", "pool", str(out), "--reason", "three leases pooled", *extra]
    for s in sessions:
        argv += ["--session", *map(str, s)]
    return main(argv)


def test_three_leases_pool_into_one_baseline_each_lease_weighing_the_same(tmp_path, capsys):
    out = tmp_path / "h200-llamacpp-7b.yaml"
    shutil.copy(Path(__file__).resolve().parent.parent / "baselines/h200-llamacpp-7b.yaml", out)
    before = bl.load(out)
    assert pool(out, LEASE1, LEASE2, LEASE3, extra=("--include-failed",)) == 0
    b = bl.load(out)
    assert b.session_count == 3 and b.reason == "three leases pooled"
    assert [s["launches"] for s in b.sessions] == [15, 3, 5]
    assert [s["created"][:10] for s in b.sessions] == ["2026-12-04", "2026-12-04", "2026-12-05"]
    for ctx in (64, 4096, 16384):
        p = b.point(ctx)
        assert p is not None and p.launch_session == (0,) * 15 + (1,) * 3 + (2,) * 5
        want = gm([gm(medians(s, ctx)) for s in (LEASE1, LEASE2, LEASE3)])
        assert p.tps == pytest.approx(want, rel=1e-5)  # the mean of the leases', not of 23 launches
    # the replaced file is the first entry of the history, as after a refresh
    assert b.history[0]["created"] == before.created and b.history[0]["reason"] == before.reason
    assert "pooled: 3 sessions" in capsys.readouterr().out


@pytest.mark.parametrize(
    "sessions, extra, needle",
    [
        ((LEASE1, LEASE2), (), "xaa-2.json: cannot go into a baseline: its outcome is 'regression'"),
        ((LEASE1, H100), (), "measured on NVIDIA H200, this run on NVIDIA H100 80GB HBM3"),
        ((LEASE1, [LEASE3[0], H100[0]]), (), "xaa-1.json: not of one session with"),
        ((LEASE1,), (), "at least two sessions"),
        ((LEASE1, [D / "7b/records/missing.json"]), (), "missing.json: no such file"),
        ((LEASE1, [D / "7b/records/layer33.json"]), (), "launch argv"),
    ],
    ids=["failed-run", "other-card", "two-machines-one-session", "one-session", "no-file", "other-service"],
)
def test_what_cannot_be_pooled_is_named_and_the_old_file_stays(tmp_path, capsys, sessions, extra, needle):
    out = tmp_path / "b.yaml"
    shutil.copy(Path(__file__).resolve().parent.parent / "baselines/h200-llamacpp-7b.yaml", out)
    old = out.read_bytes()
    assert pool(out, *sessions, extra=extra) == 2
    assert needle in capsys.readouterr().err
    assert out.read_bytes() == old


def test_one_session_is_one_lease_and_sessions_come_oldest_first(tmp_path, capsys):
    out = tmp_path / "b.yaml"
    # leases 2 and 3 share host name, CPU, driver, engine and model: only their dates tell them apart
    assert pool(out, LEASE1, [*LEASE2, *LEASE3], extra=("--include-failed",)) == 2
    err = capsys.readouterr().err
    assert "xaa-1.json: made" in err and "h after" in err and "are two sessions" in err
    assert pool(out, LEASE1, LEASE3, LEASE2, extra=("--include-failed",)) == 2
    assert "give the sessions oldest first" in capsys.readouterr().err
    assert not out.exists()


def test_a_pooled_file_goes_first_and_keep_drops_the_oldest(tmp_path, capsys):
    first = tmp_path / "two.yaml"
    assert pool(first, LEASE1, LEASE2, extra=("--include-failed",)) == 0  # a new file: no history
    assert bl.load(first).history == []
    out = tmp_path / "kept.yaml"
    assert pool(out, [first], LEASE3, extra=("--keep", "2")) == 0
    b = bl.load(out)
    assert [s["launches"] for s in b.sessions] == [3, 5]  # lease 1 dropped, lease 2 and 3 kept
    p = b.point(16384)
    assert p is not None and p.tps == pytest.approx(
        gm([gm(medians(LEASE2, 16384)), gm(medians(LEASE3, 16384))]), rel=1e-4
    )
    capsys.readouterr()
    # a file of several sessions only as the oldest; the file written over must be the same hardware's
    assert pool(tmp_path / "x.yaml", LEASE1, [first]) == 2
    assert "can only come first" in capsys.readouterr().err
    other = tmp_path / "tiny.yaml"
    shutil.copy(Path(__file__).resolve().parent.parent / "baselines/h200-llamacpp.yaml", other)
    assert pool(other, LEASE1, LEASE3) == 2
    assert "holds the baseline of 'h200-llamacpp', not 'h200-llamacpp-7b'" in capsys.readouterr().err


AMX = D.parent / "gate-validation" / "2026-12-08-amx"
REFUSED = AMX / "refused-pooled-refresh.json"  # a real refresh whose pooled write was refused


def test_a_refused_refresh_s_launches_still_make_a_session(tmp_path, capsys):
    """The pooled refresh of 2026-12-08 on the AMX VM measured 5 clean launches and was refused
    at the write (another HOME's model path, since fixed); its record is taken as a session, so
    the launches are not lost. A record with any other error, or without every context, is not."""
    first = AMX / "session1-variant.yaml"  # the variant it was to be pooled with
    out = tmp_path / "pooled.yaml"
    assert pool(out, [first], [REFUSED]) == 0, capsys.readouterr().err
    b = bl.load(out)
    assert [s["launches"] for s in b.sessions] == [5, 5]
    old = bl.load(first)
    for ctx in (64, 512, 2048, 8192):
        p, o = b.point(ctx), old.point(ctx)
        assert p is not None and o is not None
        assert p.tps == pytest.approx(gm([gm(list(o.launch_tps)), gm(medians([REFUSED], ctx))]), rel=1e-4)
    d = json.loads(REFUSED.read_text())
    died = tmp_path / "died.json"
    died.write_text(json.dumps({**d, "errors": [*d["errors"], "service died at ctx=2048"]}))
    short = tmp_path / "short.json"
    short.write_text(json.dumps({**d, "points": [x for x in d["points"] if x["context"] != 8192]}))
    for rec in (died, short):
        assert pool(tmp_path / "x.yaml", [first], [rec]) == 2
        assert f"{rec.name}: cannot go into a baseline: it has errors" in capsys.readouterr().err
