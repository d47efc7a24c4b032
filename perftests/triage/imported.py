"""Curves measured elsewhere, recorded as baselines: points given as CTX:TPS[:ACCEPT[:STEP_MS]],
or read from the JSON lines SGLang's benchmarks write. Marked imported in the provenance (with
the source and the reason, both required) and wherever the curve is shown; fitted with the same
cost model as a measured curve. Every error names the point, file or field."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perftests.baseline import Baseline, BaselinePoint
from perftests.errors import ConfigError
from perftests.scaling import fit_curve

STEP_AGREEMENT = 0.05  # tps, acceptance and step time given together must agree this well


@dataclass(frozen=True)
class ImportedPoint:
    context: int
    tps: float
    acceptance: float | None = None  # tokens per verify step
    step_ms: float | None = None  # per verify step

    def complete(self, where: str) -> ImportedPoint:
        """Derive the missing one of acceptance / step time (tps = 1000 * acceptance / step);
        with all three given they must agree."""
        acc, step = self.acceptance, self.step_ms
        if acc is not None and step is not None:
            implied = 1000 * acc / step
            if abs(implied / self.tps - 1) > STEP_AGREEMENT:
                raise ConfigError(
                    f"{where}: {self.tps} tok/s disagrees with {acc} tokens/step at {step} ms/step "
                    f"({implied:.1f} tok/s); give two of the three, or consistent figures"
                )
            return self
        if acc is not None:
            return ImportedPoint(self.context, self.tps, acc, 1000 * acc / self.tps)
        if step is not None:
            return ImportedPoint(self.context, self.tps, self.tps * step / 1000, step)
        return self


def _pos(text: str, what: str, where: str, *, integer: bool = False) -> Any:
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        raise ConfigError(f"{where}: {what} {text!r} is not a {'whole ' if integer else ''}number") from None
    if not (v > 0 and math.isfinite(v)):
        raise ConfigError(f"{where}: {what} must be positive, got {text!r}")
    return v


def parse_point(text: str, flag: str = "--point") -> ImportedPoint:
    """`4096:97`, `4096:97:4.9` (tokens per step), `4096:97:4.9:50.5` (and ms per step)."""
    where = f"{flag} {text!r}"
    parts = text.split(":")
    if not 2 <= len(parts) <= 4 or any(not p.strip() for p in parts):
        raise ConfigError(f"{where}: expected CTX:TPS[:ACCEPT[:STEP_MS]], e.g. 4096:97 or 4096:97:4.9")
    ctx = _pos(parts[0], "the context", where, integer=True)
    tps = _pos(parts[1], "tok/s", where)
    acc = _pos(parts[2], "the acceptance length", where) if len(parts) > 2 else None
    step = _pos(parts[3], "the step time", where) if len(parts) > 3 else None
    if acc is not None and acc < 1:
        raise ConfigError(f"{where}: the acceptance length is tokens per verify step, at least 1, got {acc}")
    return ImportedPoint(ctx, tps, acc, step).complete(where)


def check(points: Sequence[ImportedPoint], where: str) -> list[ImportedPoint]:
    """At least two distinct contexts, none twice, sorted."""
    seen: dict[int, ImportedPoint] = {}
    for p in points:
        if p.context in seen:
            raise ConfigError(
                f"{where}: context {p.context} is given twice ({seen[p.context].tps} and {p.tps} tok/s)"
            )
        seen[p.context] = p
    if len(seen) < 2:
        raise ConfigError(
            f"{where}: a curve needs points at two or more context lengths (got {len(seen)}); "
            f"for one figure on this hardware use `perftests explain --anchor CTX:TPS`"
        )
    accs = [p.acceptance is not None for p in seen.values()]
    if any(accs) and not all(accs):
        raise ConfigError(
            f"{where}: acceptance is given for some points only; give it for every point or none "
            f"(the cost model is per verify step or per token, not a mix)"
        )
    return [seen[c] for c in sorted(seen)]


def build(
    hardware: str,
    points: Sequence[ImportedPoint],
    *,
    reason: str,
    source: str,
    fmt: str = "points",
    extra: dict[str, Any] | None = None,
) -> Baseline:
    """A baseline from imported points, provenance marked `imported`."""
    if not reason.strip():
        raise ConfigError('--reason: required: why this curve is recorded (e.g. "B300 sweep, session 12")')
    if not source.strip():
        raise ConfigError("--source: required: where the figures come from (a file, a log, a person)")
    pts = check(points, "--point")
    model = fit_curve(
        [p.context for p in pts],
        [p.tps for p in pts],
        [p.acceptance for p in pts] if pts[0].acceptance is not None else None,
    )
    return Baseline(
        hardware=hardware,
        points=[BaselinePoint(p.context, p.tps, 0.0, 1, p.acceptance, p.step_ms) for p in pts],
        model=model,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        reason=reason.strip(),
        provenance={"imported": True, "source": source.strip(), "format": fmt, **(extra or {})},
    )


def is_imported(b: Baseline) -> bool:
    return bool(b.provenance.get("imported"))


def label(b: Baseline) -> str:
    """How an imported curve is named wherever it is shown."""
    return f"IMPORTED from {b.provenance.get('source', '?')}" if is_imported(b) else ""


__all__ = ["ImportedPoint", "build", "check", "is_imported", "label", "parse_point"]


# -- SGLang's benchmark output ----------------------------------------------------------------
# Read from the sglang wheels 0.5.4 and 0.5.23 (in 0.5.23 the scripts moved to
# sglang/benchmark/one_batch_server.py and sglang/benchmark/serving.py; the old names are shims).


def _records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, record) for a JSON array file or JSON lines (Python's json reads the Infinity
    that bench_serving writes for an unlimited request rate)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        whole = json.loads(text)
        rows = whole if isinstance(whole, list) else [whole]
        out = [(f"{path}: record {i + 1}", r) for i, r in enumerate(rows)]
    except json.JSONDecodeError:
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{n}: not JSON: {e.msg}") from None
    for where, r in out:
        if not isinstance(r, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(r).__name__}")
    return out


def _num(r: dict[str, Any], key: str) -> float | None:
    v = r.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _one_batch(where: str, r: dict[str, Any]) -> ImportedPoint | None:
    """bench_one_batch_server (--result-filename JSON lines; 0.5.4's --output-path array; 0.5.23's
    --pydantic-result-filename): batch_size 1 records only. Decode tok/s: 0.5.23's
    steady_state_output_throughput ((N-1) tokens over first-to-last token, stream_metrics.py),
    else output_throughput = N / (latency - ttft) (one_batch_server.py) corrected by (N-1)/N:
    N tokens cannot follow the first token in N token-times. acc_length is tokens per verify
    step including the target's own token (-1 or null without speculation)."""
    if _num(r, "batch_size") != 1:
        return None
    ctx, out_len = _num(r, "input_len"), _num(r, "output_len")
    if not ctx or not out_len:
        raise ConfigError(f"{where}: bench_one_batch_server record without input_len / output_len")
    tps = _num(r, "steady_state_output_throughput")
    if not tps or tps <= 0:
        raw = _num(r, "output_throughput")
        if not raw or raw <= 0 or out_len < 2:
            raise ConfigError(
                f"{where}: no usable decode throughput (output_throughput {r.get('output_throughput')!r})"
            )
        tps = raw * (out_len - 1) / out_len
    acc = _num(r, "acc_length")
    return ImportedPoint(int(ctx), tps, acc if acc and acc >= 1 else None).complete(where)


def _serving(where: str, r: dict[str, Any]) -> ImportedPoint | None:
    """bench_serving --output-file (JSON lines): runs at one request in flight only
    (max_concurrency 1). Decode tok/s = 1000 / median_tpot_ms (TPOT = (latency - ttft) /
    (output_len - 1) per request, serving.py). The context is random_input_len when
    random_range_ratio is 1 (its default 0 draws lengths from 1..random_input_len), else the
    mean input length. accept_length is the server's, cumulative since its last cache flush."""
    if _num(r, "max_concurrency") != 1:
        return None
    tpot = _num(r, "median_tpot_ms")
    if not tpot or tpot <= 0:
        raise ConfigError(f"{where}: bench_serving record without a positive median_tpot_ms")
    ctx = _num(r, "random_input_len") if _num(r, "random_range_ratio") == 1 else None
    if not ctx:
        total, done = _num(r, "total_input_tokens"), _num(r, "completed")
        if not total or not done:
            raise ConfigError(
                f"{where}: cannot tell the context (no random_input_len at range ratio 1, no "
                f"total_input_tokens / completed)"
            )
        ctx = total / done
    acc = _num(r, "accept_length")
    return ImportedPoint(round(ctx), 1000 / tpot, acc if acc and acc >= 1 else None).complete(where)


def from_sglang(path: Path) -> tuple[list[ImportedPoint], dict[str, Any]]:
    """Points from an SGLang benchmark file, one per context (several records at one context:
    their median), and what was read (format, records used and skipped)."""
    by_ctx: dict[int, list[ImportedPoint]] = {}
    skipped, fmt = 0, ""
    for where, r in _records(path):
        if "batch_size" in r and "input_len" in r:
            got, kind = _one_batch(where, r), "sglang bench_one_batch_server"
        elif "median_tpot_ms" in r:
            got, kind = _serving(where, r), "sglang bench_serving"
        else:
            raise ConfigError(
                f"{where}: not a bench_one_batch_server record (batch_size, input_len) nor a "
                f"bench_serving one (median_tpot_ms)"
            )
        fmt = fmt or kind
        if got is None:
            skipped += 1
            continue
        by_ctx.setdefault(got.context, []).append(got)
    if not by_ctx:
        raise ConfigError(
            f"{path}: no record at one request in flight (batch_size 1 / max_concurrency 1); "
            f"{skipped} skipped: decode tok/s of a batch is not the single-request curve"
        )
    points = []
    for ctx, ps in sorted(by_ctx.items()):
        tps = sorted(p.tps for p in ps)[len(ps) // 2]
        accs = sorted(p.acceptance for p in ps if p.acceptance is not None)
        points.append(ImportedPoint(ctx, tps, accs[len(accs) // 2] if accs else None).complete(str(path)))
    info = {
        "format": fmt,
        "records": sum(len(ps) for ps in by_ctx.values()),
        "skipped_batched": skipped,
    }
    return points, info
