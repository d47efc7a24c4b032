"""The two-point decode measurement, with cache control and per-pair validity checks.

For one prompt, a short and a long request (8 and 264 tokens by default); prefill is common to
both, so decode tok/s = (n_long - n_short) / (t_long - t_short). The figure is only right if both
requests ran to their budget and saw the same cached prefix; a pair that did not is invalid, with
its reason, retried with a fresh prompt a bounded number of times, and never averaged in."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perftests.engines.base import EngineAdapter, RequestResult, StreamResult, check_cache_mode
from perftests.errors import NotSupportedError, PerftestsError
from perftests.prompts import PromptSource
from perftests.stats import Summary, summarize

# warm: an untimed request caches the prompt, so both timed requests reuse the same prefix and
#       prefill shrinks to the last token (lowest noise; the default).
# cold: nothing is reused: the engine's cache is bypassed (llama.cpp cache_prompt=false) or
#       flushed before each request, so both pay the same full prefill.
CacheMode = Literal["warm", "cold"]

MAX_SPAN_GROWTH = 4  # the long request may grow to 4x its default when prefill jitter would swamp it
SPAN_HEADROOM = 8  # tokens kept free below the service's context window when a span grows


class MeasurementError(PerftestsError):
    """No valid figure could be produced (every attempt was invalid)."""


@dataclass
class Pair:
    context: int
    index: int
    short: RequestResult
    long: RequestResult
    cache_mode: str
    invalid_reason: str | None = None
    warm: RequestResult | None = None  # the untimed request that cached the prompt (warm mode)

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None

    @property
    def decode_tokens(self) -> int:
        return self.long.completion_tokens - self.short.completion_tokens

    @property
    def decode_s(self) -> float:
        return self.long.wall_s - self.short.wall_s

    @property
    def tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else math.nan

    @property
    def engine_tps(self) -> float | None:
        """The engine's own decode rate over the same span, from its reported decode times."""
        a, b = self.short.engine_decode_ms, self.long.engine_decode_ms
        if a is None or b is None or b <= a:
            return None
        return self.decode_tokens / ((b - a) / 1000.0)

    @property
    def verify_steps(self) -> int | None:
        a, b = self.short.spec_verify_steps, self.long.spec_verify_steps
        return None if a is None or b is None else b - a

    @property
    def acceptance_length(self) -> float | None:
        """Tokens committed per verify step over the span (counter differences, not totals)."""
        steps = self.verify_steps
        return self.decode_tokens / steps if steps else None

    @property
    def step_ms(self) -> float | None:
        steps = self.verify_steps
        return 1000.0 * self.decode_s / steps if steps else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "index": self.index,
            "cache_mode": self.cache_mode,
            "valid": self.valid,
            "invalid_reason": self.invalid_reason,
            "short": self.short.to_dict(),
            "long": self.long.to_dict(),
            "warm": self.warm.to_dict() if self.warm else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pair:
        return cls(
            context=d["context"],
            index=d["index"],
            cache_mode=d["cache_mode"],
            invalid_reason=d["invalid_reason"],
            short=RequestResult(**d["short"]),
            long=RequestResult(**d["long"]),
            warm=RequestResult(**d["warm"]) if d.get("warm") else None,
        )


def warm_floor(context: int, page: int = 1) -> int:
    """The fewest cached prompt tokens a warm request must show. An engine recomputes at least
    the last prompt token and counts hits in whole pages (SGLang's radix cache rounds matches
    down to page_size, vLLM to its KV block), so at most page * floor((context - 1) / page) can
    be cached, and with EAGLE-style drafts one page less (vLLM drops the trailing block of a
    hit, SGLang keys the tree on token pairs): one page of slack. A token-granular cache
    (llama.cpp) keeps 8 tokens of slack."""
    if page <= 1:
        return max(context - 8, 0)
    return page * max((context - 1) // page - 1, 0)


def check_pair(pair: Pair, context: int, short_n: int, long_n: int, page: int = 1) -> str | None:
    """The reason a pair cannot be used, or None. Each check guards a documented hazard."""
    for label, r, n in (("short", pair.short, short_n), ("long", pair.long, long_n)):
        if r.completion_tokens != n:
            return f"{label} request returned {r.completion_tokens} tokens, asked {n}"
        if r.finish_reason != "length":
            return f"{label} request stopped early (finish reason '{r.finish_reason}')"
        if r.prompt_tokens != context:
            return f"{label} request saw a {r.prompt_tokens}-token prompt, expected {context}"
    s, lg = pair.short.cached_tokens, pair.long.cached_tokens
    if s is None or lg is None:
        pass  # the engine does not report it; recorded as unverified at point level
    elif s != lg:
        return f"cache state differs: short had {s} cached prompt tokens, long had {lg}"
    elif pair.cache_mode == "cold" and s != 0:
        return f"cold pair hit the cache ({s} cached prompt tokens)"
    elif pair.cache_mode == "warm" and s < warm_floor(context, page):
        return (
            f"warm pair missed the cache ({s} of {context} prompt tokens cached, at least "
            f"{warm_floor(context, page)} expected with {page}-token cache pages)"
        )
    if pair.decode_s <= 0:
        return f"non-positive decode span ({pair.decode_s * 1000:.1f} ms): timing is swamped by noise"
    return None


@dataclass
class Point:
    """Every pair measured at one context length, and the figures derived from the valid ones."""

    context: int
    short_tokens: int
    long_tokens: int
    cache_mode: str
    pairs: list[Pair] = field(default_factory=list)
    warmup: list[Pair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stream: StreamResult | None = None  # optional streamed cross-check at this context
    elapsed_s: float = 0.0  # wall time of this point's requests, warm-up included
    launch: int = 0  # which launch of the service (or attach round) measured it

    @property
    def valid_pairs(self) -> list[Pair]:
        return [p for p in self.pairs if p.valid]

    def tps(self) -> Summary:
        return summarize([p.tps for p in self.valid_pairs])

    def engine_tps(self) -> Summary:
        return summarize([p.engine_tps for p in self.valid_pairs if p.engine_tps is not None])

    def acceptance_length(self) -> Summary:
        return summarize([p.acceptance_length for p in self.valid_pairs if p.acceptance_length is not None])

    def step_ms(self) -> Summary:
        return summarize([p.step_ms for p in self.valid_pairs if p.step_ms is not None])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "context": self.context,
            "short_tokens": self.short_tokens,
            "long_tokens": self.long_tokens,
            "cache_mode": self.cache_mode,
            "notes": self.notes,
            "summary": {"tps": self.tps().to_dict()},
            "pairs": [p.to_dict() for p in self.pairs],
            "warmup": [p.to_dict() for p in self.warmup],
            "stream": self.stream.to_dict() if self.stream else None,
            "elapsed_s": round(self.elapsed_s, 3),
            "launch": self.launch,
        }
        for name, fn in (
            ("engine_tps", self.engine_tps),
            ("acceptance_length", self.acceptance_length),
            ("step_ms", self.step_ms),
        ):
            s = fn()
            if s.n:
                out["summary"][name] = s.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Point:
        return cls(
            context=d["context"],
            short_tokens=d["short_tokens"],
            long_tokens=d["long_tokens"],
            cache_mode=d["cache_mode"],
            notes=list(d.get("notes", [])),
            pairs=[Pair.from_dict(p) for p in d["pairs"]],
            warmup=[Pair.from_dict(p) for p in d.get("warmup", [])],
            stream=_stream_from_dict(d.get("stream")),
            elapsed_s=float(d.get("elapsed_s", 0.0)),
            launch=int(d.get("launch", 0)),
        )


def _stream_from_dict(d: dict[str, Any] | None) -> StreamResult | None:
    if not d:
        return None
    fields = {k: v for k, v in d.items() if k not in ("decode_tps", "tokens_per_event")}
    fields["events"] = [tuple(e) for e in fields.get("events", [])]
    return StreamResult(**fields)


Progress = Callable[[str], None]


class TwoPointMeter:
    """Measures points on one service. One instance per service; never shared across services."""

    def __init__(
        self,
        adapter: EngineAdapter,
        prompts: PromptSource,
        *,
        short_tokens: int = 8,
        long_tokens: int = 264,
        cache_mode: CacheMode = "warm",
        max_retries: int = 3,
        adaptive_span: bool = True,
        before_request: Callable[[], None] | None = None,
        context_window: int | None = None,
    ) -> None:
        check_cache_mode(type(adapter), cache_mode)  # ConfigError if it cannot honour and verify it
        self.adapter = adapter
        self.prompts = prompts
        self.short_tokens = short_tokens
        self.long_tokens = long_tokens
        self.cache_mode = cache_mode
        self.max_retries = max_retries
        self.adaptive_span = adaptive_span
        self.before_request = before_request  # e.g. Service.check_alive between requests
        # The service's per-request token limit (prompt + generated), where it says: a grown span
        # must stay inside it, or the engine refuses the request (an error of the run).
        self.context_window = context_window
        self._index = 0

    def _request(self, prompt: list[int], n: int) -> RequestResult:
        if self.before_request:
            self.before_request()
        if self.cache_mode == "cold":
            if self.adapter.can_bypass():
                return self.adapter.generate(prompt, n, bypass_cache=True)
            # No per-request bypass: flush first. A failed flush is an error of the run, never
            # passed over: the request would then not be cold.
            self.adapter.flush_cache()
        return self.adapter.generate(prompt, n)

    def pair(self, context: int, long_tokens: int) -> Pair:
        index = self._index
        self._index += 1
        prompt = self.prompts.ids(context, index)
        warm = None
        if self.cache_mode == "warm":
            warm = self._request(prompt, 1)  # untimed: caches the prompt for both requests
        short = self._request(prompt, self.short_tokens)
        long = self._request(prompt, long_tokens)
        pair = Pair(context, index, short, long, self.cache_mode, warm=warm)
        pair.invalid_reason = check_pair(
            pair, context, self.short_tokens, long_tokens, self.adapter.cache_page_tokens
        )
        return pair

    def measure(
        self, context: int, *, repeats: int, warmup: int = 1, progress: Progress | None = None
    ) -> Point:
        """One context's point; MeasurementError when it has too many invalid pairs."""
        point = self.measure_interleaved((context,), repeats=repeats, warmup=warmup, progress=progress)[
            context
        ]
        if isinstance(point, MeasurementError):
            raise point
        return point

    def measure_interleaved(
        self,
        contexts: Sequence[int],
        *,
        repeats: int,
        warmup: int = 1,
        progress: Progress | None = None,
    ) -> dict[int, Point | MeasurementError]:
        """Every context's point, their pairs taken in turn (64, 1024, 4096, 64, 1024, ...).

        Why in turn: a shared machine's speed drifts within a launch (on the 2-core VMs one
        launch measured 1556 tok/s at 64 tokens first and then, context by context, slower than
        its baseline's shape: 0.66 of the baseline's 8192/64 quotient, with nothing changed).
        Interleaved, every context sees the same stretch of the launch, so drift moves them
        together and the within-launch comparisons (shape.py) stay clean; it also shows in each
        point's spread instead of hiding between points. Each pair caches its own prompt first
        (warm mode), so the order does not change what a pair measures."""
        points = {c: Point(c, self.short_tokens, self.long_tokens, self.cache_mode) for c in contexts}
        spans = {c: self.long_tokens for c in contexts}
        for _ in range(warmup):
            for c in contexts:
                t0 = time.perf_counter()
                w = self.pair(c, spans[c])
                points[c].elapsed_s += time.perf_counter() - t0
                points[c].warmup.append(w)
                if self.adaptive_span and w.valid:
                    spans[c] = self._grow_span(w, spans[c], points[c])
        out: dict[int, Point | MeasurementError] = {}
        failures = dict.fromkeys(contexts, 0)
        for c in contexts:
            points[c].long_tokens = spans[c]
        while len(out) < len(points):
            for c, point in points.items():
                if c in out:
                    continue
                t0 = time.perf_counter()
                p = self.pair(c, spans[c])
                point.elapsed_s += time.perf_counter() - t0
                point.pairs.append(p)
                if progress:
                    fig = f"{p.tps:8.1f} tok/s" if p.valid else f"invalid: {p.invalid_reason}"
                    progress(f"ctx={c} pair {len(point.pairs)}: {fig}")
                if not p.valid:
                    failures[c] += 1
                    if failures[c] > self.max_retries:
                        reasons = "; ".join(
                            sorted({q.invalid_reason or "" for q in point.pairs if not q.valid})
                        )
                        out[c] = MeasurementError(
                            f"ctx={c}: {failures[c]} invalid pairs "
                            f"(limit {self.max_retries} retries): {reasons}"
                        )
                        continue
                if len(point.valid_pairs) >= repeats:
                    if point.valid_pairs[0].short.cached_tokens is None:
                        point.notes.append("engine reports no cached-token counts: cache state unverified")
                    page = self.adapter.cache_page_tokens
                    if self.cache_mode == "warm" and page > 1 and warm_floor(c, page) == 0:
                        point.notes.append(
                            f"warm mode, but a {c}-token prompt spans under two {page}-token "
                            "cache pages: a hit cannot be told from a miss, so its warm state "
                            "is unverified"
                        )
                    out[c] = point
        return {c: out[c] for c in contexts}

    def stream_check(self, point: Point) -> StreamResult | None:
        """One streamed request at the point's context, as a cross-check of the two-point figure:
        time to first token, and decode rate from event timestamps (token-normalised)."""
        index = self._index
        self._index += 1
        if self.before_request:
            self.before_request()
        try:
            result = self.adapter.stream(self.prompts.ids(point.context, index), point.long_tokens)
        except NotSupportedError as e:
            point.notes.append(f"no streamed cross-check: {e}")
            return None
        if result.finish_reason != "length" or result.completion_tokens != point.long_tokens:
            point.notes.append(
                f"the streamed cross-check ended early: {result.completion_tokens} of "
                f"{point.long_tokens} tokens, finish reason '{result.finish_reason}'"
            )
        point.stream = result
        return result

    def _grow_span(self, w: Pair, long_tokens: int, point: Point) -> int:
        """Lengthen the decode span when the short request (mostly prefill) rivals it in time:
        prefill jitter would then be a large share of t_long - t_short."""
        cap = self.long_tokens * MAX_SPAN_GROWTH
        if self.context_window:
            cap = max(long_tokens, min(cap, self.context_window - w.context - SPAN_HEADROOM))
        new = long_tokens
        while w.short.wall_s > 0.5 * w.decode_s * (new - self.short_tokens) / w.decode_tokens and new < cap:
            new = min(cap, self.short_tokens + 2 * (new - self.short_tokens))
        if new != long_tokens:
            point.notes.append(
                f"decode span grown to {new} tokens: the short request took "
                f"{w.short.wall_s * 1000:.0f} ms against {w.decode_s * 1000:.0f} ms of decode"
            )
        return new
