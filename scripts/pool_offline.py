"""Leave one lease out: the 7B's unchanged H200 runs of each lease judged, as the gate would,
against a baseline of one other lease and against the other two pooled (`baseline.pool`), from
the records the three leases left in docs/gpu-validation/. Also the ~5% change (34 layers) of
the second lease against the first and third pooled. Prints a Markdown table.

    .venv/bin/python scripts/pool_offline.py [--tolerance 0.04]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from perftests import baseline as bl
from perftests import profiles
from perftests.compare import compare_point
from perftests.record import RunRecord
from perftests.shape import compare_shapes, shape_tests
from perftests.verdict import classify

D = Path(__file__).resolve().parent.parent / "docs" / "gpu-validation"
LEASES = {  # lease -> its unchanged 7B runs (one launch each) and its refresh, if any
    "1 (12-04 am)": [D / "7b/records/refresh.json", *(D / f"7b/records/aa-{i}.json" for i in range(1, 11))],
    "2 (12-04 pm)": [D / f"2026-12-04-lease2/records/xaa-{i}.json" for i in range(1, 4)],
    "3 (12-05)": [D / f"2026-12-05-lease3/records/xaa-{i}.json" for i in range(1, 6)],
}
CHANGED = {"2 (12-04 pm)": [D / f"2026-12-04-lease2/records/l34-{i}.json" for i in range(1, 6)]}


def session(paths: list[Path]) -> bl.Baseline:
    """One lease's launches as one refresh would have stored them (`perftests baseline pool` builds the
    same); its A/A false alarms at the tolerance of their day are part of its spread."""
    recs = [RunRecord.read(p) for p in paths]
    return bl.session_from_records(recs, [p.name for p in paths], include_failed=True)


def judge(
    base: bl.Baseline, run: RunRecord, tol: float, d: profiles.GateDefaults
) -> tuple[str, float, float]:
    """(verdict, worst point ratio, detectable drop at the longest context)."""
    ests = run.estimates()
    ctxs = sorted(ests)
    fam = len(ctxs) + shape_tests(ctxs)
    comps = [
        compare_point(
            base,
            ests[c],
            tol,
            launch_noise_prior=d.launch_noise,
            family=fam,
            session_noise_prior=d.session_noise,
        )
        for c in ctxs
    ]
    shapes = compare_shapes(
        base, run.points, tol, shape_noise_prior=d.shape_noise or d.launch_noise, family=fam, rounds=False
    )
    v = classify(comps, base, shapes)
    return v.kind.value, min(c.ratio for c in comps), comps[-1].detectable_drop


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tolerance", type=float)
    args = ap.parse_args()
    d = profiles.load("h200-llamacpp-7b", []).defaults
    tol = args.tolerance or d.tolerance
    sessions = {k: session(v) for k, v in LEASES.items()}
    print(
        f"tolerance {tol:.0%}, launch_noise {d.launch_noise:.1%}, session_noise "
        f"{(d.session_noise or d.launch_noise):.1%} (the 7B profile's)\n"
    )
    print(
        "| runs of lease | against | sessions | launches | regression / inconclusive / runs "
        "| verdicts | worst ratio | catches at the longest |"
    )
    print("|---|---|---:|---:|---|---|---:|---:|")
    for held, paths in {**LEASES, **{f"{k}, 34 layers": v for k, v in CHANGED.items()}}.items():
        lease = held.split(",")[0]
        runs = [RunRecord.read(p) for p in paths if p.name != "refresh.json"]
        others = [k for k in LEASES if k != lease]
        bases = {f"lease {k}": sessions[k] for k in others}
        b0, b1 = (sessions[k] for k in others)
        bases[f"leases {others[0][0]} + {others[1][0]} pooled"] = bl.pool(b1, b0, keep=3)
        for name, base in bases.items():
            res = [judge(base, r, tol, d) for r in runs]
            fails = sum(1 for v, _, _ in res if v not in ("pass", "inconclusive"))
            unsure = sum(1 for v, _, _ in res if v == "inconclusive")
            kinds = sorted({v for v, _, _ in res})
            print(
                f"| {held} | {name} | {base.session_count} | {base.launches} | "
                f"{fails} / {unsure} / {len(res)} | "
                f"{', '.join(kinds)} | {min(r for _, r, _ in res):.3f} | "
                f"{min(c for _, _, c in res):.1%}-{max(c for _, _, c in res):.1%} |"
            )


if __name__ == "__main__":
    main()
