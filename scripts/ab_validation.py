#!/usr/bin/env python3
"""Same-runner A/B validation on the real reference service, every campaign a whole ABRun as
`perftests ab` runs it (fresh launches alternating in random ABBA blocks, the machine control,
paired judging, more pairs while unknown, the outcome):

1. A/A: --aa campaigns of the unchanged service against itself (B = A with an unused
   environment variable): every SLOWER or FASTER is a false "different";
2. injected changes, each a change to the served model or server (--inject, --runs each):
   ff5 / ff10 (a wider FFN), layer (one more layer), layer2 (two more), kvq8 (q8_0 KV cache:
   context-dependent on the AMD EPYC VM, faster on an Intel Xeon one), kvf32 (f32 KV cache:
   context-dependent on both); their real size is the B/A they measure;
3. analysis: decisions, pairs and launches used, wall time, the paired sd against the unpaired
   between-launch sd, and the launches the stored-curve gate would need for the same drops
   (compare.launches_needed against a 5-launch baseline) beside the pairs the A/B needs
   (paired.pairs_needed).

    python scripts/ab_validation.py --aa 10 --runs 1 --out docs/ab-validation/run.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from perftests.ab import ABRun, resolve_ab
from perftests.compare import launches_needed
from perftests.paired import LaunchFigure, compare_pair_shapes, compare_pairs, pairs_needed

INJECT: dict[str, dict[str, Any]] = {  # name: the candidate's change, as `perftests ab` options
    "ff5": {"ab_replace": ["{model:target}={model:target@n_ff=1664}"]},
    "ff10": {"ab_replace": ["{model:target}={model:target@n_ff=1792}"]},
    "layer": {"ab_replace": ["{model:target}={model:target@n_layer=5}"]},
    "layer2": {"ab_replace": ["{model:target}={model:target@n_layer=6}"]},
    "kvq8": {"ab_arg": ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]},
    "kvf32": {"ab_arg": ["--cache-type-k", "f32", "--cache-type-v", "f32"]},
}
EXPECTED = {
    "layer2": "uniform regression",
    "kvq8": "context-dependent regression",
    "kvf32": "context-dependent regression",
}


def one(values: dict[str, Any], root: Path) -> dict[str, Any]:
    a, b, ab = resolve_ab(values, root)
    t0 = time.perf_counter()
    run = ABRun(a, b, ab)
    outcome = run.execute()
    rec = run.record()
    fa, fb = run.figures()
    return {
        "outcome": outcome.kind.value,
        "failed": outcome.failed,
        "verdict": rec.verdict.kind.value if rec.verdict else None,
        "status": {str(c.context): c.status for c in rec.comparisons},
        "ratio": {str(c.context): round(c.ratio, 4) for c in rec.comparisons},
        "low": {str(c.context): round(c.ratio_low, 4) for c in rec.comparisons},
        "high": {str(c.context): round(c.ratio_high, 4) for c in rec.comparisons},
        "paired_sd": {str(c.context): round(c.noise_sd, 4) for c in rec.comparisons},
        "catches": {str(c.context): round(c.detectable_drop, 4) for c in rec.comparisons},
        "shapes": {
            str(s.context): {"ratio": round(s.ratio, 4), "status": s.status, "sd": round(s.noise_sd, 4)}
            for s in run.shapes
        },
        "a_tps": {str(c): [round(x.tps, 1) for x in v] for c, v in fa.items()},
        "b_tps": {str(c): [round(x.tps, 1) for x in v] for c, v in fb.items()},
        "mann_whitney": {str(c): round(p, 4) for c, p in (rec.ab.mann_whitney if rec.ab else {}).items()},
        "pairs": run.pairs,
        "order": run.order,
        "needed": run.needed,
        "launches": sum(len(s.launches) for s in run.sides.values()),
        "discarded": sum(x.discarded is not None for s in run.sides.values() for x in s.launches),
        "wall_s": round(time.perf_counter() - t0, 1),
        "errors": rec.errors,
        "warnings": rec.warnings,
    }


def series(
    name: str, values: dict[str, Any], n: int, root: Path, out: dict[str, Any], save: Any = None
) -> None:
    runs = out["series"].setdefault(name, [])
    for i in range(n):
        r = one(values, root)
        runs.append(r)
        if save is not None:
            save()
        ratios = " ".join(f"{c}:{x:.3f}[{r['low'][c]:.2f},{r['high'][c]:.2f}]" for c, x in r["ratio"].items())
        print(
            f"  {name} {i + 1}/{n}: {r['outcome']:<14} {r['verdict'] or '-':<28} {ratios} "
            f"pairs {r['pairs']} launches {r['launches']} ({r['wall_s']:.0f} s)",
            flush=True,
        )


def rejudge(
    r: dict[str, Any], tolerance: float, looks: int, priors: tuple[float, float] = (0.0, 0.0)
) -> dict[str, str]:
    """A campaign's statuses judged again from its saved launch medians with the current rules
    and `looks` (the within-launch se is not saved: the floor stands in for it)."""
    fa = {int(c): [LaunchFigure(x, 0.0) for x in v] for c, v in r["a_tps"].items()}
    fb = {int(c): [LaunchFigure(x, 0.0) for x in v] for c, v in r["b_tps"].items()}
    if not fa:
        return {}
    family = (len(fa) + len(fa) - 1) * looks
    out = {
        str(c): compare_pairs(
            c, fa[c], fb[c], tolerance, family=family, pairs_n=len(fa[c]), prior_sd=priors[0]
        ).status
        for c in sorted(fa)
    }
    for sh in compare_pair_shapes(fa, fb, tolerance, family=family, prior_sd=priors[1]):
        out[f"{sh.context}/{sh.reference}"] = sh.status
    return out


def analyse(
    res: dict[str, Any],
    tolerance: float,
    refresh_launches: int = 5,
    priors: tuple[float, float] = (0.0, 0.0),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    aa = res["series"].get("aa", [])
    pairs0, pairs_max = int(res["args"]["pairs"]), int(res["args"]["max_pairs"])
    looks = 1 + math.ceil(max(0, pairs_max - pairs0) / 2)
    # The campaigns as judged live, and judged again with the final rules (looks and prior).
    judged = [rejudge(r, tolerance, looks) for r in aa]
    final = [rejudge(r, tolerance, looks, priors) for r in aa]
    out["aa_rejudged"] = {
        "looks": looks,
        "priors": priors,
        "over_looks": judged,
        "over_looks_false_different": sum(s in ("fail", "improved") for j in judged for s in j.values()),
        "final": final,
        "final_false_different": sum(s in ("fail", "improved") for j in final for s in j.values()),
    }
    different = sum(s in ("fail", "improved") for r in aa for s in r["status"].values())
    different += sum(x["status"] in ("fail", "improved") for r in aa for x in r["shapes"].values())
    out["aa"] = {
        "runs": len(aa),
        "false_different_tests": different,
        "runs_with_a_false_different": sum(
            any(s in ("fail", "improved") for s in r["status"].values())
            or any(x["status"] in ("fail", "improved") for x in r["shapes"].values())
            for r in aa
        ),
        "outcomes": [r["outcome"] for r in aa],
        "pairs": [r["pairs"] for r in aa],
        "launches": [r["launches"] for r in aa],
        "wall_s_median": statistics.median(r["wall_s"] for r in aa) if aa else None,
    }
    # Paired against unpaired noise, from every A/A launch: sd of log B/A over pairs, and the sd
    # of log tok/s between launches of one side (what a stored-curve gate's launches see).
    contexts = sorted({c for r in aa for c in r["ratio"]}, key=int)
    noise = {}
    for c in contexts:
        # Campaigns that ended MACHINE BUSY keep the pairs they had; one with none has no figures.
        had = [r for r in aa if c in r["a_tps"]]
        diffs = [math.log(b / a) for r in had for a, b in zip(r["a_tps"][c], r["b_tps"][c], strict=True)]
        runs_sd = []  # per campaign, so the machine's slow drift across campaigns is not counted
        for r in had:
            xs = np.log(r["a_tps"][c] + r["b_tps"][c])
            if len(xs) > 2:
                runs_sd.append(float(np.std(xs, ddof=1)))
        paired_sd = float(np.std(diffs, ddof=1) / math.sqrt(2)) if len(diffs) > 2 else None
        unpaired = statistics.median(runs_sd) if runs_sd else None
        row: dict[str, Any] = {
            "pairs": len(diffs),
            "sd_paired_log_ratio": round(float(np.std(diffs, ddof=1)), 4) if len(diffs) > 2 else None,
            "sd_per_launch_from_pairs": round(paired_sd, 4) if paired_sd else None,
            "sd_between_launches_unpaired": round(unpaired, 4) if unpaired else None,
        }
        sd_d = row["sd_paired_log_ratio"]
        for drop in (0.05, 0.10, 0.25):
            tag = f"{round(drop * 100)}pct"
            # A/B: pairs for the interval's half-width to reach half the drop (pairs_needed's rule).
            row[f"ab_pairs_{tag}"] = pairs_needed(sd_d, drop, family=3) if sd_d else None
            # Stored curve: run launches for `drop` to be detectable against a K-launch baseline.
            row[f"gate_launches_{tag}"] = (
                launches_needed(unpaired, refresh_launches, drop, df=float(refresh_launches - 1), family=3)
                if unpaired
                else None
            )
        noise[c] = row
    out["noise"] = noise
    det = {}
    for name, runs in res["series"].items():
        if name == "aa" or not runs:
            continue
        det[name] = {
            "runs": len(runs),
            "outcomes": [r["outcome"] for r in runs],
            "verdicts": [r["verdict"] for r in runs],
            "expected": EXPECTED.get(name),
            "status": [r["status"] for r in runs],
            "ratio": [r["ratio"] for r in runs],
            "shapes": [r["shapes"] for r in runs],
            "pairs": [r["pairs"] for r in runs],
            "launches": [r["launches"] for r in runs],
            "wall_s": [r["wall_s"] for r in runs],
            "rejudged_final": [rejudge(r, tolerance, looks, priors) for r in runs],
        }
    out["series"] = det
    out["tolerance"] = tolerance
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="cpu-reference")
    ap.add_argument("--contexts", default="64,4096")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=None, help="default: the profile's")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--max-pairs", type=int, default=8)
    ap.add_argument("--aa", type=int, default=10, help="A/A campaigns")
    ap.add_argument("--inject", default="ff5,ff10,layer,layer2,kvq8")
    ap.add_argument("--runs", type=int, default=1, help="campaigns per injected change")
    ap.add_argument("--out", type=Path, default=Path("ab-validation.json"))
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    base: dict[str, Any] = {
        "hw": args.hw,
        "contexts": args.contexts,
        "repeats": args.repeats,
        "ab_pairs": args.pairs,
        "ab_max_pairs": args.max_pairs,
        "log_dir": "/tmp/ab-validation-logs",
    }
    if args.tolerance is not None:
        base["tolerance"] = args.tolerance
    a, _, _ = resolve_ab({**base, "ab_env": ["PERFTESTS_AB_UNUSED=1"]}, root)
    res: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "series": {}}
    res["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    t0 = time.time()

    def save() -> None:
        # The raw campaigns first: an analysis that fails must not lose an hour of launches.
        res["elapsed_s"] = round(time.time() - t0)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))
        priors = (math.sqrt(2) * a.launch_noise, math.sqrt(2) * a.shape_noise)
        res["analysis"] = analyse(res, a.tolerance, priors=priors)
        args.out.write_text(json.dumps(res, indent=1))

    if args.aa:
        print(f"A/A: {args.aa} campaigns", flush=True)
        series("aa", {**base, "ab_env": ["PERFTESTS_AB_UNUSED=1"]}, args.aa, root, res, save)
        save()
    for name in [x for x in args.inject.split(",") if x]:
        print(f"{name}: {args.runs} campaign(s)", flush=True)
        series(name, {**base, **INJECT[name]}, args.runs, root, res, save)
        save()
    save()
    print(json.dumps(res["analysis"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
