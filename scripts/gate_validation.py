#!/usr/bin/env python3
"""Gate self-validation on the real reference service, every run a whole GateRun as `pytest
perftests` does it (fresh launches, machine control, judging, reruns, outcome):

1. refresh: one baseline from the profile's refresh_launches launches (--refresh-launches);
2. A/A: --aa gate runs of the unchanged service: every failing outcome is a false alarm;
3. busy: --busy runs with a CPU-bound process competing, started before the run and, in as many
   again, 20 s into it: the outcome must be the named machine outcome or a pass, never a
   regression;
4. injected regressions, each a change to the served model or server (--inject, --runs each):
   ff5 / ff10 (a wider FFN), layer (one more layer), kvf32 (f32 KV cache: context-dependent),
   kvq8 (q8_0 KV cache: context-dependent on the AMD EPYC VM, faster on an Intel Xeon one);
   their real size is the ratio they measure;
5. analysis: false alarms and the rate that can be claimed, between-launch spread per context,
   whether normalising by the machine control narrows it, the launches a 5% drop needs, wall
   times.

    python scripts/gate_validation.py --aa 20 --busy 2 --runs 3 --out docs/gate-validation/run.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from perftests.compare import launches_needed
from perftests.config import RunConfig, resolve
from perftests.profiles import Profile
from perftests.run import GateRun

INJECT = {  # name: (model override, extra server args, expected verdict)
    "ff5": ("target@n_ff=1664", (), "uniform regression"),
    "ff10": ("target@n_ff=1792", (), "uniform regression"),
    "layer": ("target@n_layer=5", (), "uniform regression"),
    "kvq8": (None, ("--cache-type-k", "q8_0", "--cache-type-v", "q8_0"), "context-dependent regression"),
    "kvf32": (None, ("--cache-type-k", "f32", "--cache-type-v", "f32"), "context-dependent regression"),
}


def variant(p: Profile, *, model: str | None = None, extra: tuple[str, ...] = ()) -> Profile:
    assert p.service.launch is not None
    argv = list(p.service.launch.argv)
    if model:
        argv = [a.replace("{model:target}", "{model:" + model + "}") for a in argv]
    launch = replace(p.service.launch, argv=tuple(argv) + extra)
    return replace(p, service=replace(p.service, launch=launch))


def one_run(cfg: RunConfig, quiet: bool = True) -> dict[str, Any]:
    t0 = time.perf_counter()
    run = GateRun(cfg, progress=None if quiet else print)
    outcome = run.execute()
    rec = run.record()
    by_launch: dict[int, dict[str, float]] = {}
    for p in rec.points:
        s = p.tps()
        if s.n:
            by_launch.setdefault(p.launch, {})[str(p.context)] = s.median
    return {
        "outcome": outcome.kind.value,
        "headline": outcome.headline,
        "failed": outcome.failed,
        "verdict": rec.verdict.kind.value if rec.verdict else None,
        "ratios": {str(c.context): round(c.ratio, 4) for c in rec.comparisons},
        "ratio_high": {str(c.context): round(c.ratio_high, 4) for c in rec.comparisons},
        "mde": {str(c.context): round(c.mde, 4) for c in rec.comparisons},
        "status": {str(c.context): c.status for c in rec.comparisons},
        "shapes": {
            str(x.context): {"ratio": round(x.ratio, 4), "high": round(x.ratio_high, 4), "status": x.status}
            for x in (rec.verdict.shapes if rec.verdict else [])
        },
        "discarded": sum(x.discarded is not None for x in rec.launches),
        "launch_tps": {str(k): v for k, v in sorted(by_launch.items())},
        "control": [r.to_dict() for r in rec.control],
        "machine": rec.machine_check.to_dict() if rec.machine_check else None,
        "launches": len(rec.launches),
        "wall_s": round(time.perf_counter() - t0, 1),
        "errors": rec.errors,
    }


def series(name: str, cfg: RunConfig, n: int, out: dict[str, Any], *, busy: str | None = None) -> None:
    runs = out["series"].setdefault(name, [])
    for i in range(n):
        hog = None
        if busy == "before":
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1)
        timer = None
        if busy == "during":
            holder: list[subprocess.Popen[bytes]] = []

            def start(h: list[subprocess.Popen[bytes]] = holder) -> None:
                h.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

            timer = threading.Timer(20.0, start)
            timer.start()
        try:
            r = one_run(cfg)
        finally:
            if timer is not None:
                timer.cancel()
                for h in holder:
                    h.kill()
            if hog is not None:
                hog.kill()
        runs.append(r)
        ratios = " ".join(f"{c}:{x:.3f}" for c, x in r["ratios"].items())
        print(
            f"  {name} {i + 1}/{n}: {r['outcome']:<20} {r['verdict'] or '-':<28} {ratios} "
            f"launches {r['launches']} ({r['wall_s']:.0f} s)",
            flush=True,
        )


def analyse(res: dict[str, Any]) -> dict[str, Any]:
    aa = res["series"].get("aa", [])
    out: dict[str, Any] = {}
    n = len(aa)
    fa = sum(r["failed"] and r["outcome"] == "regression" for r in aa)
    out["aa"] = {
        "runs": n,
        "false_alarms": fa,
        "other_outcomes": sorted({r["outcome"] for r in aa} - {"pass"}),
        "rate_95_upper": (1 - 0.05 ** (1 / n)) if n and fa == 0 else None,
        "verdicts": {v: sum(r["verdict"] == v for r in aa) for v in {r["verdict"] for r in aa}},
    }
    # Between-launch spread, raw and normalised by the control read before each launch.
    launches = []  # (ctx -> tps, control before)
    for r in aa:
        before = {c["launch"]: c for c in r["control"] if c["when"] == "before"}
        for k, tps in r["launch_tps"].items():
            if int(k) in before:
                launches.append((tps, before[int(k)]))
    contexts = sorted({c for t, _ in launches for c in t}, key=int)
    noise = {}
    for c in contexts:
        xs = [(t[c], ctl) for t, ctl in launches if c in t]
        y = np.log([t for t, _ in xs])
        row: dict[str, Any] = {
            "launches": len(xs),
            "median_tps": round(float(np.exp(np.median(y))), 1),
            "sd_raw": round(float(np.std(y, ddof=1)), 4) if len(xs) > 1 else None,
        }
        for m in ("cpu_gflops", "mem_gbs"):
            ctl = np.log([cc[m] for _, cc in xs])
            if len(xs) > 2:
                row[f"sd_over_{m}"] = round(float(np.std(y - ctl, ddof=1)), 4)
                row[f"spearman_{m}"] = round(float(sps.spearmanr(y, ctl).statistic), 3)
        ref = contexts[0]
        q = [np.log(t[c] / t[ref]) for t, _ in launches if c in t and ref in t]
        row["sd_quotient"] = round(float(np.std(q, ddof=1)), 4) if c != ref and len(q) > 1 else None
        sd = row["sd_raw"] or 0.05
        K = res.get("refresh_launches", 5)
        row["launches_for_5pct"] = launches_needed(sd, K, 0.05, df=float(max(K - 1, 1)) + len(xs) - 1)
        row["launches_for_10pct"] = launches_needed(sd, K, 0.10, df=float(max(K - 1, 1)) + len(xs) - 1)
        noise[c] = row
    out["noise"] = noise
    out["aa_mde"] = {
        c: statistics.median(r["mde"][c] for r in aa if c in r["mde"])
        for c in contexts
        if any(c in r["mde"] for r in aa)
    }
    out["aa_wall_s_median"] = statistics.median(r["wall_s"] for r in aa) if aa else None
    det = {}
    for name, runs in res["series"].items():
        if name == "aa" or not runs:
            continue
        expected = INJECT[name][2] if name in INJECT else None
        ratios = {
            c: round(statistics.median(r["ratios"][c] for r in runs if c in r["ratios"]), 3)
            for c in contexts
            if any(c in r["ratios"] for r in runs)
        }
        det[name] = {
            "runs": len(runs),
            "failed": sum(r["failed"] for r in runs),
            "regression": sum(r["outcome"] == "regression" for r in runs),
            "named": sum(r["verdict"] == expected for r in runs) if expected else None,
            "outcomes": [r["outcome"] for r in runs],
            "verdicts": [r["verdict"] for r in runs],
            "median_ratios": ratios,
            "launches": [r["launches"] for r in runs],
            "wall_s_median": statistics.median(r["wall_s"] for r in runs),
        }
    out["series"] = det
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="cpu-reference")
    ap.add_argument("--aa", type=int, default=20)
    ap.add_argument("--busy", type=int, default=2, help="runs with a competitor, before and during")
    ap.add_argument("--inject", default="ff5,ff10,layer,kvq8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--refresh-launches", type=int, default=None)
    ap.add_argument("--baseline", help="use this baseline instead of refreshing one")
    ap.add_argument("--out", default=".perftests/gate-validation.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gate-validation-"))
    base = Path(args.baseline) if args.baseline else work / "baseline.yaml"
    values: dict[str, Any] = {"hw": args.hw, "baseline": str(base), "log_dir": str(work / "logs")}
    res: dict[str, Any] = {"profile": args.hw, "series": {}, "started": time.strftime("%FT%T%z")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not args.baseline:
        cfg = resolve(
            {
                **values,
                "update_baselines": True,
                "reason": "gate validation",
                "launches": args.refresh_launches,
            },
            Path.cwd(),
        )
        print(f"refresh: {cfg.launches} launches -> {base}", flush=True)
        res["refresh"] = one_run(cfg, quiet=False)
        res["refresh_launches"] = cfg.launches
        if res["refresh"]["outcome"] != "baseline refreshed":
            print(f"refresh failed: {res['refresh']['headline']} {res['refresh']['errors']}")
            out.write_text(json.dumps(res, indent=1) + "\n")
            return 1
    cfg = resolve(values, Path.cwd())
    res["defaults"] = {
        "launches": cfg.launches,
        "reruns": cfg.reruns,
        "tolerance": cfg.tolerance,
        "repeats": cfg.settings.repeats,
        "contexts": list(cfg.settings.contexts),
    }
    series("aa", cfg, args.aa, res)
    out.write_text(json.dumps(res, indent=1) + "\n")
    if args.busy:
        series("busy-before", cfg, args.busy, res, busy="before")
        series("busy-during", cfg, args.busy, res, busy="during")
    for name in [k for k in args.inject.split(",") if k]:
        model, extra, _ = INJECT[name]
        series(name, replace(cfg, profile=variant(cfg.profile, model=model, extra=extra)), args.runs, res)
        out.write_text(json.dumps(res, indent=1) + "\n")  # raw runs first: analysis must not lose them
    res["analysis"] = analyse(res)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["analysis"], indent=1))
    print(f"\nfigures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
