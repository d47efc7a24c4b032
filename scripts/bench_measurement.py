"""Benchmark of the measurement core against the reference service (issue: measurement core).

Prints, per context length:
- the gate's two-point tok/s, the engine's own decode rate over the same span (difference of
  predicted_ms), and llama.cpp's predicted_per_second of the long request, with their ratios
  (goal: two-point within 2% of the engine);
- the sweep's wall time against the sum of the server's own time on every request it served
  (prompt_ms + predicted_ms, warm-up requests included), (goal: at most 1.15);
and, with --spec, acceptance length and step time per context with the identical draft.

    python scripts/bench_measurement.py [--contexts 64,256,1024,4096,8192] [--repeats 5] [--spec]
    python scripts/bench_measurement.py --json bench.json

Figures are medians over repeats measured side by side in one run, on whatever this machine is
doing: quote them with the command and the machine."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from perftests.measure import Point, TwoPointMeter
from perftests.profiles import LaunchSpec, ServiceSpec
from perftests.prompts import PromptSource
from perftests.service import launch

ARGV = [
    "{llama_server}",
    "--model",
    "{model:target}",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--threads",
    "2",
    "--ctx-size",
    "9216",
    "--parallel",
    "1",
    "--flash-attn",
    "off",
    "--slot-save-path",
    "{cache:slots}/",
    "--no-ui",
]
SPEC = ["--model-draft", "{model:draft-identical}", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"]


def server_ms(point: Point) -> float:
    total = 0.0
    for pair in point.warmup + point.pairs:
        for r in (pair.warm, pair.short, pair.long):
            if r is not None:
                total += (r.engine_prompt_ms or 0.0) + (r.engine_decode_ms or 0.0)
    return total


def run(contexts: list[int], repeats: int, spec: bool) -> dict:
    argv = ARGV + (SPEC if spec else [])
    svc = launch(
        ServiceSpec(engine="llamacpp", request_timeout_s=600),
        LaunchSpec(argv=tuple(argv)),
        log_dir=Path(".perftests/logs"),
        label="bench",
        progress=print,
    )
    rows = []
    try:
        meter = TwoPointMeter(svc.adapter, PromptSource(svc.adapter), before_request=svc.check_alive)
        for ctx in contexts:
            t0 = time.perf_counter()
            p = meter.measure(ctx, repeats=repeats, warmup=1)
            wall = time.perf_counter() - t0
            pps = statistics.median(q.long.engine_decode_tps for q in p.valid_pairs)
            row = {
                "context": ctx,
                "tps": p.tps().median,
                "rcv": p.tps().rcv,
                "engine_tps": p.engine_tps().median,
                "predicted_per_second": pps,
                "wall_s": wall,
                "server_s": server_ms(p) / 1000,
                "n": p.tps().n,
            }
            if spec:
                row["acceptance_length"] = p.acceptance_length().median
                row["step_ms"] = p.step_ms().median
            rows.append(row)
            print(_row(row, spec), flush=True)
    finally:
        svc.close()
    wall = sum(r["wall_s"] for r in rows)
    server = sum(r["server_s"] for r in rows)
    return {
        "spec": spec,
        "repeats": repeats,
        "rows": rows,
        "sweep_wall_s": wall,
        "server_s": server,
        "wall_over_server": wall / server,
    }


def _row(r: dict, spec: bool) -> str:
    s = (
        f"{r['context']:>7} {r['tps']:>9.1f} {r['engine_tps']:>9.1f} {r['tps'] / r['engine_tps']:>7.3f} "
        f"{r['predicted_per_second']:>9.1f} {r['tps'] / r['predicted_per_second']:>7.3f} "
        f"{r['rcv']:>6.1%} {r['wall_s']:>7.1f} {r['server_s']:>7.1f} {r['wall_s'] / r['server_s']:>6.3f}"
    )
    if spec:
        s += f" {r['acceptance_length']:>6.2f} {r['step_ms']:>8.2f}"
    return s


HEAD = (
    f"{'context':>7} {'2pt t/s':>9} {'eng t/s':>9} {'2pt/eng':>7} {'pred/s':>9} {'2pt/pps':>7} "
    f"{'rCV':>6} {'wall s':>7} {'srv s':>7} {'w/srv':>6}"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="64,256,1024,4096,8192")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--spec", action="store_true", help="also run with the identical draft")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    results = []
    for spec in [False, True] if args.spec else [False]:
        print(f"\n== speculative decoding {'on (identical draft, n-max 4)' if spec else 'off'}")
        print(HEAD + (f" {'accept':>6} {'step ms':>8}" if spec else ""))
        res = run(contexts, args.repeats, spec)
        print(
            f"sweep wall {res['sweep_wall_s']:.1f} s, server-side {res['server_s']:.1f} s, "
            f"ratio {res['wall_over_server']:.3f}"
        )
        results.append(res)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
