#!/usr/bin/env python3
"""Gate self-validation on the real reference service: how often does the gate cry wolf, and does
it catch, and correctly name, real regressions?

Every run below is a whole gate run as `pytest perftests` does it (launch the service, measure
each context, judge it against the stored baseline with the profile's tolerance and rerun
policy, classify the curve), driven through the same classes, so that 20+ runs fit in minutes:

1. A/A: one refresh writes a baseline, then --aa runs against the same, unchanged service
   configuration (each a fresh launch, as on a CI runner): every failing verdict is a false alarm.
2. Injected regressions, each a change to the served model or server: `uniform` (f32 weights: twice
   the bytes per token), `context` (the KV cache quantised to q8_0: attention dequantises every
   cached token), `acceptance` (speculative decoding, the identical draft swapped for an unrelated
   one, against a baseline made with the identical draft). --runs each: verdicts, ratios, detection.
3. From the A/A pairs: the minimum detectable drop per context at 3..25 repeats (the gate's own
   formula), the spread of run medians between launches, and false-alarm and detection counts
   re-judged at tolerances 5..20%.
4. Where a default run's time goes: launch, server prefill and generation (the engine's own
   timings), client and HTTP overhead, and time outside requests.

Figures print as tables and are saved as JSON (--out). Example (about 35 minutes on 2 cores):

    python scripts/gate_validation.py --aa 20 --runs 5 --out docs/gate-validation/run.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from perftests import profiles
from perftests.compare import MEDIAN_EFFICIENCY, SE_FLOOR, Z95
from perftests.gate import Gate
from perftests.profiles import Profile
from perftests.session import PerfSession, Settings
from perftests.stats import MAD_TO_SIGMA

EXPECTED = {"uniform": "uniform regression", "context": "context-dependent regression",
            "acceptance": "acceptance collapse"}


def variant(p: Profile, *, model: str | None = None, draft: str | None = None,
            extra: tuple[str, ...] = ()) -> Profile:
    """The profile with its launch changed: another target model or draft, extra server flags."""
    argv = list(p.service.launch.argv)
    if model:
        argv = [a.replace("{model:target}", "{model:" + model + "}") for a in argv]
    if draft:
        argv = [a.replace("{model:draft-identical}", "{model:" + draft + "}") for a in argv]
    launch = replace(p.service.launch, argv=tuple(argv) + extra)
    return replace(p, service=replace(p.service, launch=launch))


def one_run(p: Profile, base: Path, log_dir: Path, *, refresh: str | None = None) -> dict[str, Any]:
    """One whole gate run (or a refresh, with `refresh` as its reason); returns its figures."""
    d = p.defaults
    t0 = time.perf_counter()
    sess = PerfSession(profile=p, settings=Settings.from_profile(p), log_dir=log_dir)
    gate = Gate(session=sess, baseline_path=base, tolerance=d.tolerance, reruns=d.reruns,
                update=refresh is not None, reason=refresh, warn=lambda m: None)
    launch_s = 0.0
    try:
        svc = sess.open()
        launch_s = time.perf_counter() - t0
        for ctx in sess.settings.contexts:
            point = sess.measure(ctx)
            if refresh is None:
                gate.judge(point)
        if refresh is None:
            gate.conclude()
        else:
            gate.refresh()
    finally:
        sess.close()
    total_s = time.perf_counter() - t0
    rec = gate.record()
    req_wall = prefill = decode = 0.0
    for pt in rec.points:
        for pair in pt.warmup + pt.pairs:
            for r in (pair.warm, pair.short, pair.long):
                if r is None:
                    continue
                req_wall += r.wall_s
                prefill += (r.engine_prompt_ms or 0.0) / 1000
                decode += (r.engine_decode_ms or 0.0) / 1000
    measured_s = sum(pt.elapsed_s for pt in rec.points)
    return {
        "verdict": rec.verdict["kind"] if rec.verdict else "refresh",
        "passed": rec.verdict["passed"] if rec.verdict else True,
        "ratios": {c["context"]: round(c["ratio"], 4) for c in rec.comparisons},
        "ratio_high": {c["context"]: round(c["ratio_high"], 4) for c in rec.comparisons},
        "status": {c["context"]: c["status"] for c in rec.comparisons},
        "tps": {pt.context: round(pt.tps().median, 2) for pt in rec.points},
        "pair_tps": {pt.context: [round(x.tps, 2) for x in pt.valid_pairs] for pt in rec.points},
        "acceptance": {pt.context: round(pt.acceptance_length().median, 3)
                       for pt in rec.points if pt.acceptance_length().n},
        "reruns": sum(1 for pt in rec.points for n in pt.notes if n.startswith("re-measured")),
        "time": {"total_s": round(total_s, 2), "launch_s": round(launch_s, 2),
                 "server_startup_s": round(svc.startup_s or 0.0, 2),
                 "measure_s": round(measured_s, 2), "requests_s": round(req_wall, 2),
                 "engine_prefill_s": round(prefill, 2), "engine_decode_s": round(decode, 2)},
    }


def series(name: str, p: Profile, base: Path, logs: Path, n: int, out: dict[str, Any]) -> None:
    runs = out["series"].setdefault(name, [])
    for i in range(n):
        r = one_run(p, base, logs)
        runs.append(r)
        ratios = " ".join(f"{c}:{x:.3f}" for c, x in r["ratios"].items())
        print(f"  {name} {i + 1}/{n}: {r['verdict']:<30} {ratios}  ({r['time']['total_s']:.0f} s)",
              flush=True)


def mde(rel_mad: float, n: int) -> float:
    """The gate's detectable drop at n pairs against a baseline of n pairs (compare.py)."""
    se = max(SE_FLOOR, MEDIAN_EFFICIENCY * MAD_TO_SIGMA * rel_mad / math.sqrt(n))
    return 1 - math.exp(-Z95 * math.hypot(se, se))


def analyse(raw: dict[str, Any], tolerance: float) -> dict[str, Any]:
    res = raw["series"]
    aa = res["aa"]
    contexts = sorted(aa[0]["tps"], key=int)
    out: dict[str, Any] = {"contexts": contexts}
    # False alarms and detection, and what they would have been at other tolerances (re-judged
    # from each run's ratios and upper interval bounds, as compare.judge does).
    def fails_at(run: dict[str, Any], tol: float) -> bool:
        return any(run["ratios"][c] < 1 - tol and run["ratio_high"][c] < 1 for c in run["ratios"])

    tols = [0.05, 0.075, 0.10, 0.15, 0.20]
    out["by_tolerance"] = {f"{t:.3f}": {k: sum(fails_at(r, t) for r in runs) for k, runs in res.items()
                                        if isinstance(runs, list)} for t in tols}
    out["runs"] = {k: len(v) for k, v in res.items() if isinstance(v, list)}
    out["false_alarms"] = sum(not r["passed"] for r in aa)
    n = len(aa)
    # With 0 of n, the one-sided 95% upper bound of the rate is 1 - 0.05**(1/n) (~3/n).
    out["false_alarm_rate_95_upper"] = 1 - 0.05 ** (1 / n) if out["false_alarms"] == 0 else None
    out["detection"] = {k: {"expected": EXPECTED[k], "named": sum(r["verdict"] == EXPECTED[k] for r in runs),
                            "failed": sum(not r["passed"] for r in runs), "runs": len(runs),
                            "verdicts": [r["verdict"] for r in runs],
                            "median_ratios": {c: round(statistics.median(r["ratios"][c] for r in runs), 3)
                                              for c in runs[0]["ratios"]}}
                        for k, runs in res.items() if k in EXPECTED and runs}
    # Noise: within a run (pairs) and between launches (run medians), per context.
    noise = {}
    for c in contexts:
        pairs = [x for r in aa for x in r["pair_tps"][c]]
        med = statistics.median(pairs)
        rel_mad = statistics.median(abs(x - med) for x in pairs) / med
        within = statistics.median(
            statistics.median(abs(x - statistics.median(r["pair_tps"][c])) for x in r["pair_tps"][c])
            / statistics.median(r["pair_tps"][c]) for r in aa)
        logs = [math.log(r["tps"][c]) for r in aa]
        noise[c] = {"median_tps": round(med, 1), "within_run_rel_mad": round(within, 4),
                    "pooled_rel_mad": round(rel_mad, 4),
                    "between_run_sd": round(statistics.stdev(logs), 4) if len(logs) > 1 else None,
                    "run_median_range": [round(min(r["tps"][c] for r in aa), 1),
                                         round(max(r["tps"][c] for r in aa), 1)],
                    "mde_by_repeats": {k: round(mde(within, k), 4) for k in (3, 5, 9, 15, 25)}}
    out["noise"] = noise
    times = [r["time"] for r in aa]
    out["time_median"] = {k: round(statistics.median(t[k] for t in times), 2) for k in times[0]}
    out["reruns_per_run"] = statistics.mean(r["reruns"] for r in aa)
    out["tolerance"] = tolerance
    return out


def report(a: dict[str, Any]) -> str:
    lines = [f"A/A: {a['false_alarms']} false alarms in {a['runs']['aa']} runs"
             + (f" (rate < {a['false_alarm_rate_95_upper']:.1%} at 95% confidence)"
                if a["false_alarm_rate_95_upper"] is not None else "")
             + f"; re-measured points per run: {a['reruns_per_run']:.2f}", ""]
    lines.append(f"{'context':>8} {'tok/s':>8} {'within rMAD':>12} {'between sd':>11} "
                 f"{'run medians':>17}   detectable drop at n = 3 / 5 / 9 / 15 / 25")
    for c, x in a["noise"].items():
        m = x["mde_by_repeats"]
        lines.append(f"{c:>8} {x['median_tps']:>8.1f} {x['within_run_rel_mad']:>12.2%} "
                     f"{x['between_run_sd'] or 0:>11.2%} {x['run_median_range'][0]:>8.1f}-"
                     f"{x['run_median_range'][1]:<8.1f}   "
                     + " / ".join(f"{m[k]:.1%}" for k in (3, 5, 9, 15, 25)))
    lines += ["", "runs failing at each tolerance (A/A: false alarms; others: detections)"]
    kinds = list(a["runs"])
    lines.append(f"{'tolerance':>10} " + " ".join(f"{k:>12}" for k in kinds))
    for t, row in a["by_tolerance"].items():
        lines.append(f"{float(t):>10.1%} " + " ".join(f"{row[k]:>8}/{a['runs'][k]:<3}" for k in kinds))
    lines += ["", "injected regressions at the profile's tolerance"]
    for k, d in a["detection"].items():
        ratios = ", ".join(f"{c}: {r}" for c, r in d["median_ratios"].items())
        lines.append(f"  {k}: named '{d['expected']}' in {d['named']}/{d['runs']}, failed "
                     f"{d['failed']}/{d['runs']}; median ratios {ratios}")
        others = sorted(set(d["verdicts"]) - {d["expected"]})
        if others:
            lines.append(f"    other verdicts: {', '.join(others)}")
    t = a["time_median"]
    other = t["total_s"] - t["launch_s"] - t["measure_s"]
    lines += ["", f"a default run (median): {t['total_s']:.1f} s = launch {t['launch_s']:.1f} s "
              f"(server ready {t['server_startup_s']:.1f} s) + measuring {t['measure_s']:.1f} s + "
              f"judging/teardown {other:.1f} s",
              f"  measuring: requests {t['requests_s']:.1f} s (engine prefill {t['engine_prefill_s']:.1f} s, "
              f"generation {t['engine_decode_s']:.1f} s, client+HTTP "
              f"{t['requests_s'] - t['engine_prefill_s'] - t['engine_decode_s']:.1f} s), outside requests "
              f"{t['measure_s'] - t['requests_s']:.1f} s (prompts, tokenizer calls, health checks)"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="cpu-reference", help="the profile under test (default cpu-reference)")
    ap.add_argument("--spec-hw", default="cpu-reference-spec", help="its speculative twin")
    ap.add_argument("--aa", type=int, default=20, help="unchanged re-runs (default 20)")
    ap.add_argument("--runs", type=int, default=5, help="runs per injected regression (default 5)")
    ap.add_argument("--kinds", default="uniform,context,acceptance")
    ap.add_argument("--out", default=".perftests/gate-validation.json")
    args = ap.parse_args()
    p = profiles.load(args.hw, [])
    work = Path(tempfile.mkdtemp(prefix="gate-validation-"))
    logs = work / "logs"
    res: dict[str, Any] = {"profile": args.hw, "argv": list(p.service.launch.argv),
                           "defaults": p.defaults.__dict__ | {"contexts": list(p.sweep.contexts)},
                           "series": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    base = work / "baseline.yaml"
    print(f"baseline: one refresh run of {args.hw} -> {base}", flush=True)
    res["refresh"] = one_run(p, base, logs, refresh="gate validation: the unchanged service")
    series("aa", p, base, logs, args.aa, res)
    kinds = [k for k in args.kinds.split(",") if k]
    if "uniform" in kinds:
        series("uniform", variant(p, model="target@dtype=f32"), base, logs, args.runs, res)
    if "context" in kinds:
        series("context", variant(p, extra=("--cache-type-k", "q8_0", "--cache-type-v", "q8_0")),
               base, logs, args.runs, res)
    if "acceptance" in kinds:
        sp = profiles.load(args.spec_hw, [])
        sbase = work / "baseline-spec.yaml"
        print(f"speculative baseline: one refresh run of {args.spec_hw}", flush=True)
        res["refresh_spec"] = one_run(sp, sbase, logs, refresh="gate validation: identical draft")
        series("acceptance", variant(sp, draft="draft-unrelated"), sbase, logs, args.runs, res)
    out.write_text(json.dumps(res, indent=1) + "\n")  # the raw runs first: analysis must not lose them
    res["analysis"] = analyse(res, p.defaults.tolerance)
    text = report(res["analysis"])
    print("\n" + text)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"\nfigures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
