"""Triage without a run (perftests/triage/): importing curves measured elsewhere, carrying
another hardware's curve over with its uncertainty, explain's chain, and the cross-hardware
table, on the source document's own figures (B300: 285 -> 97 tok/s from 60 to 4096 tokens;
PRO 6000: 138 tok/s at short context with ~5 tokens per step; reported: 32 tok/s at ~5k)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perftests import baseline as bl
from perftests.cli import main
from perftests.errors import ConfigError
from perftests.triage import crosshw, imported
from perftests.triage.explain import Report, explain, reference_extrapolated
from perftests.triage.extrapolate import Anchor, Extrapolation, Split
from perftests.verdict import Kind

B300 = ["60:285", "4096:97"]


def b300() -> bl.Baseline:
    pts = [imported.parse_point(x) for x in B300]
    return imported.build("b300", pts, reason="B300 sweep", source="session notes")


# -- import ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, match",
    [
        ("4096", "expected CTX:TPS"),
        ("4096:", "expected CTX:TPS"),
        ("x:97", "the context 'x' is not a whole number"),
        ("4096:-3", "tok/s must be positive"),
        ("4096:97:0.5", "at least 1"),
        ("4096:97:4.9:10", "disagrees with 4.9 tokens/step at 10.0 ms/step"),
        ("1:2:3:4:5", "expected CTX:TPS"),
    ],
)
def test_a_bad_point_is_refused_naming_it(text, match):
    with pytest.raises(ConfigError, match=match) as e:
        imported.parse_point(text)
    assert f"--point '{text}'" in str(e.value)


def test_acceptance_or_step_time_completes_the_other():
    p = imported.parse_point("4096:97:4.9")
    assert p.step_ms == pytest.approx(1000 * 4.9 / 97)
    q = imported.parse_point("4096:97:4.85:50")
    assert q.acceptance == 4.85 and q.step_ms == 50


@pytest.mark.parametrize(
    "points, reason, source, match",
    [
        (["60:285", "60:280"], "r", "s", "context 60 is given twice"),
        (["60:285"], "r", "s", "two or more context lengths"),
        (["60:285:5", "4096:97"], "r", "s", "acceptance is given for some points only"),
        (B300, "", "s", "--reason: required"),
        (B300, "r", "  ", "--source: required"),
    ],
)
def test_a_bad_curve_is_refused_naming_the_field(points, reason, source, match):
    with pytest.raises(ConfigError, match=match):
        imported.build("b300", [imported.parse_point(x) for x in points], reason=reason, source=source)


def test_an_imported_curve_fits_the_same_model_and_says_it_is_imported(tmp_path):
    b = b300()
    assert b.model.kind == "token_ms"
    assert b.model.a_ms == pytest.approx(3.408, abs=0.001)
    assert b.model.b_ms_per_token * 1000 == pytest.approx(1.685, abs=0.001)
    assert imported.is_imported(b) and imported.label(b) == "IMPORTED from session notes"
    path = tmp_path / "b300.yaml"
    bl.save(b, path)
    back = bl.load(path)
    assert back.provenance["imported"] is True and back.provenance["source"] == "session notes"
    assert [p.tps for p in back.points] == [285.0, 97.0]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_sglang_one_batch_server_lines_become_points(tmp_path):
    # Records as sglang 0.5.23's bench_one_batch_server --result-filename writes them
    # (sglang/benchmark/one_batch_server.py): batch 8 is skipped, batch 1 kept.
    rows = [
        {"run_name": "x", "batch_size": 1, "input_len": 1024, "output_len": 256, "latency": 2.1,
         "output_throughput": 130.0, "overall_throughput": 600.0, "last_gen_throughput": 128.0,
         "acc_length": 4.8, "steady_state_output_throughput": 126.0},
        {"run_name": "x", "batch_size": 1, "input_len": 8192, "output_len": 256, "latency": 4.0,
         "output_throughput": 64.0, "overall_throughput": 900.0, "last_gen_throughput": 62.0,
         "acc_length": -1},
        {"run_name": "x", "batch_size": 8, "input_len": 1024, "output_len": 256, "latency": 3.0,
         "output_throughput": 700.0, "overall_throughput": 900.0, "last_gen_throughput": 690.0},
    ]  # fmt: skip
    pts, info = imported.from_sglang(_write(tmp_path / "r.jsonl", rows))
    assert info == {"format": "sglang bench_one_batch_server", "records": 2, "skipped_batched": 1}
    assert [p.context for p in pts] == [1024, 8192]
    assert pts[0].tps == 126.0 and pts[0].acceptance == 4.8  # the steady-state figure when present
    assert pts[1].tps == pytest.approx(64.0 * 255 / 256)  # N tokens in N-1 token-times, corrected
    assert pts[1].acceptance is None  # -1: no speculation


def test_sglang_bench_serving_lines_become_points(tmp_path):
    # bench_serving --output-file writes Infinity for an unlimited request rate.
    line = (
        '{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 1, "completed": 10, '
        '"random_input_len": 4096, "random_range_ratio": 1.0, "total_input_tokens": 40960, '
        '"median_tpot_ms": 25.0, "accept_length": 4.5}\n'
        '{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 1, "completed": 10, '
        '"random_input_len": 4096, "random_range_ratio": 0.0, "total_input_tokens": 20000, '
        '"median_tpot_ms": 20.0, "accept_length": null}\n'
    )
    (tmp_path / "s.jsonl").write_text(line)
    pts, info = imported.from_sglang(tmp_path / "s.jsonl")
    assert info["format"] == "sglang bench_serving"
    # range ratio 0: lengths drawn from 1..4096, so the context is the mean input length.
    assert [(p.context, p.tps) for p in pts] == [(2000, 50.0), (4096, 40.0)]


@pytest.mark.parametrize(
    "content, match",
    [
        ('{"foo": 1}\n', "not a bench_one_batch_server record"),
        ("not json\n", r"r.jsonl:1: not JSON"),
        (
            '{"batch_size": 4, "input_len": 64, "output_len": 8, "output_throughput": 9}\n',
            "no record at one request",
        ),
        ('{"batch_size": 1, "input_len": 64, "output_len": 8}\n', "no usable decode throughput"),
    ],
)
def test_sglang_files_that_cannot_be_read_say_why(tmp_path, content, match):
    (tmp_path / "r.jsonl").write_text(content)
    with pytest.raises(ConfigError, match=match):
        imported.from_sglang(tmp_path / "r.jsonl")


def test_cli_import_writes_the_baseline_and_keeps_a_measured_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    args = ["baseline", "import", "--hw", "b300", "--reason", "B300 sweep", "--source", "notes"]
    assert main([*args, "--point", "60:285", "--point", "4096:97"]) == 0
    assert bl.load(tmp_path / "baselines" / "b300.yaml").provenance["imported"] is True
    # Importing again replaces the imported curve and keeps the old one in the history.
    assert main([*args, "--point", "60:280", "--point", "4096:95"]) == 0
    again = bl.load(tmp_path / "baselines" / "b300.yaml")
    assert again.points[0].tps == 280 and again.history[0]["points"][0]["tps"] == 285
    assert main([*args]) == 2
    assert "give the curve" in capsys.readouterr().err
    # A measured baseline is never replaced by an import unless asked.
    measured = bl.load(tmp_path / "baselines" / "b300.yaml")
    measured.provenance = {"machine": {}}
    bl.save(measured, tmp_path / "baselines" / "b300.yaml")
    assert main([*args, "--point", "60:1", "--point", "4096:1"]) == 2
    assert "holds a measured baseline" in capsys.readouterr().err
    assert bl.load(tmp_path / "baselines" / "b300.yaml").points[0].tps == 280


# -- carrying a curve over ------------------------------------------------------------------


def extrapolation(split: Split | None = None, anchors: tuple[Anchor, ...] | None = None) -> Extrapolation:
    return Extrapolation(b300(), anchors or (Anchor(60, 138.0, 5.0),), split or Split.of())


def test_the_plain_scaling_is_the_documents_estimate():
    central, low, high = extrapolation().predict(4096)
    # The document: 285 -> 97 on the B300 scaled to 138 gives about 47 at 4k.
    assert central == pytest.approx(138 * 97 / 285, rel=0.001)
    assert low < central < high


def test_the_band_is_the_split_range():
    x = extrapolation()
    _, low, high = x.predict(5000)
    # At the band's edges the scaled curve's context term is 2x heavier / lighter.
    assert x.r_needed(5000, low) == pytest.approx(2.0, rel=1e-6)
    assert x.r_needed(5000, high) == pytest.approx(0.5, rel=1e-6)
    narrow = extrapolation(Split.of(bandwidth=4.4, compute=3.3))
    assert narrow.split.factor == pytest.approx(4.4 / 3.3)
    _, nlow, nhigh = narrow.predict(5000)
    assert low < nlow < nhigh < high


@pytest.mark.parametrize(
    "tps, zone",
    [
        (32.0, "consistent"),  # the document's report: inside the band
        (23.0, "inconclusive"),  # just below the band, within the tolerance
        (15.0, "regression"),  # no allowed split explains it
        (80.0, "faster"),
    ],
)
def test_each_provisional_outcome(tps, zone):
    j = extrapolation().judge(5000, tps, 0.10)
    assert j.zone == zone
    assert j.low == pytest.approx(24.6, abs=0.1) and j.high == pytest.approx(62.6, abs=0.1)
    assert any("band 24.6..62.6" in line for line in j.lines)


def test_a_second_point_on_this_hardware_pins_the_curve():
    x = extrapolation(anchors=(Anchor(60, 138.0), Anchor(4096, 40.0)))
    central, low, high = x.predict(5000)
    assert central == low == high  # this hardware's own curve: no split to guess
    assert x.judge(5000, central * 0.85, 0.10).zone == "regression"


def test_split_options_are_checked():
    with pytest.raises(ConfigError, match="go together"):
        Split.of(bandwidth=4.0)
    with pytest.raises(ConfigError, match="at least 1"):
        Split.of(factor=0.5)


# -- explain's chain ------------------------------------------------------------------------


def test_the_documents_report_is_most_likely_expected_scaling():
    x = extrapolation()
    kind, text = explain(Report(5000, 32.0, 5.0), reference_extrapolated(x, 5000), 0.10, "pro6000")
    assert kind is Kind.EXPECTED_SCALING
    assert "1. acceptance held: 5.00 tokens/step (4.00 drafts accepted)" in text
    assert "ms/step: 156.2 now, 36.2 at ctx=60" in text  # 32 t/s at 5 tokens/step: ~155 ms
    assert "the constant term (~35.2 ms/step) does not grow with context" in text
    assert "r = 1.41" in text and "inside the band" in text
    assert "pytest perftests --hw pro6000 --perf-contexts 60,5000" in text
    assert "IMPORTED from session notes" in text and "PROVISIONAL" in text


def test_explain_accepts_drafts_and_a_context_that_includes_the_output(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "baselines").mkdir()
    bl.save(b300(), tmp_path / "baselines" / "b300.yaml")
    rc = main(
        ["explain", "--hw", "pro6000", "--ctx", "5256", "--generated", "256", "--tps", "32",
         "--drafts-accepted", "4", "--from", "b300", "--anchor", "60:138:5"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "judged at ctx=5128: 256 of its tokens were generated" in out
    assert "acceptance held: 5.00 tokens/step" in out
    # A partial acceptance drop in a report is named, with step time checked.
    rc = main(["explain", "--hw", "pro6000", "--ctx", "60", "--tps", "100", "--accept", "3.6",
               "--from", "b300", "--anchor", "60:138:5"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1 and "verdict: ACCEPTANCE REGRESSION" in out and "held: the throughput lost" in out
    assert main(["explain", "--hw", "pro6000", "--ctx", "60", "--tps", "100", "--from", "b300"]) == 2
    assert "needs a figure measured on pro6000: --anchor" in capsys.readouterr().err


# -- two hardwares side by side ---------------------------------------------------------------


def test_cross_hardware_table_per_context_and_per_term():
    pro = imported.build(
        "pro6000",
        [imported.parse_point(x) for x in ("60:138", "4096:40")],
        reason="r",
        source="s",
    )
    c = crosshw.compare(b300(), pro)
    assert [r.context for r in c.rows] == [60, 4096]
    assert c.rows[0].ratio == pytest.approx(138 / 285)
    # PRO 6000 through its two points: 6.982 + 0.004399 * ctx ms/token; B300: 3.408 + 0.001685.
    assert c.constant == pytest.approx(6.982 / 3.408, rel=0.002)
    assert c.per_context == pytest.approx(0.004399 / 0.001685, rel=0.002)
    text = c.table()
    assert "pro6000 pays 2.61x more per token of context and 2.05x more per step" in text
    assert "falls faster with context" in text and "underestimates" in text


# -- a gate run against a provisional curve -------------------------------------------------


@pytest.mark.parametrize(
    "tps, status",
    [(32.0, "pass"), (23.0, "inconclusive"), (15.0, "fail")],
)
def test_a_gate_point_against_a_provisional_curve_is_judged_against_its_band(tps, status):
    from perftests.compare import compare_point
    from tests.test_verdict import est

    prov = bl.provisional_from(b300(), "pro6000", 60, 138.0)
    assert bl.provisional_band(prov, 5000) == pytest.approx((24.6, 62.6), abs=0.1)
    c = compare_point(prov, est(5000, tps, launches=3), 0.10, launch_noise_prior=0.02)
    assert c.status == status
    assert c.ratio == pytest.approx(
        tps / (138 * (3.408 + 1.685e-3 * 60) / (3.408 + 1.685e-3 * 5000)), rel=0.001
    )
    assert "PROVISIONAL: 24.6..62.6" in c.describe()
    # The same figure against a measured curve of that shape fails on the tolerance alone.
    if status == "pass":
        measured = bl.Baseline(**{**prov.__dict__, "provisional": False, "provenance": {}})
        assert (
            compare_point(measured, est(5000, tps, launches=3), 0.10, launch_noise_prior=0.02).status
            == "fail"
        )


def test_a_gate_run_against_an_imported_curve_says_so(tmp_path):
    from perftests.reports import markdown, terminal
    from tests.test_run import CURVE, make_run, point

    pts = [imported.parse_point(f"{c}:{t}") for c, t in CURVE.items()]
    bl.save(imported.build("unit", pts, reason="r", source="vendor sheet"), tmp_path / "unit.yaml")
    run = make_run(tmp_path)
    run.points = [point(c, t) for c, t in CURVE.items()]
    run.conclude()
    rec = run.record()
    assert "(IMPORTED from vendor sheet)" in terminal.plain(terminal.summary(rec))
    assert "IMPORTED from vendor sheet" in markdown.section(rec)
