"""vLLM's OpenAI-compatible server: POST /v1/completions, read against the vllm 0.34.0 wheel
(paths below are inside it; tests/standins/vllm.py follows the same files).

What is measured from the engine, and what it needs:
- cached prompt tokens: `usage.prompt_tokens_details.cached_tokens`, sent only when the server
  runs with --enable-prompt-tokens-details (entrypoints/openai/completion/serving.py
  request_output_to_completion_response; without it the key is absent, not null), counted in
  whole KV blocks of the size the engine reports in vllm:cache_config_info;
- speculative acceptance: per request from `metrics.speculative_decoding` when the server runs
  with --per-request-spec-decode-metrics, else the /metrics counters vllm:spec_decode_* read
  before and after each request (v1/spec_decode/metrics.py SpecDecodingProm). The measurement
  keeps one request in flight, so the difference is that request's; the counters of its last step
  are recorded before its answer can be sent (v1/engine/async_llm.py output_handler: outputs
  are queued, then logger.record, with no await between). vLLM counts only steps that had
  drafts (scheduler.py records `if scheduled_spec_token_ids`): with a method that sometimes
  proposes nothing (ngram, suffix), tokens per verify step are overstated; EAGLE, MTP and draft
  models always propose;
- engine decode time: `metrics.generation_time_ms` (last token - first token) with
  --enable-per-request-metrics (entrypoints/generate/base/serving.py
  build_per_request_timing_metrics);
- cold requests: a fresh `cache_salt` per request is hashed into the first block
  (v1/core/kv_cache_utils.py generate_block_hash_extra_keys), so nothing cached is reused; no flush needed."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from perftests.engines.base import Capabilities, Prompt, RequestResult, ServerInfo
from perftests.engines.openai import OpenAIAdapter
from perftests.engines.prom import counter_sums
from perftests.errors import EngineError, NotSupportedError

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
# The effective KV block, as the engine settled it (v1/engine/core_client.py syncs block_size
# back from the engine; v1/metrics/loggers.py log_metrics_info exposes CacheConfig.metrics_info()
# as the labels of this gauge).
_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_PER_POS = re.compile(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"', re.M)
DETAILS_FLAG = "--enable-prompt-tokens-details"


class VLLMAdapter(OpenAIAdapter):
    name = "vllm"
    health_path = "/health"
    # Only /v1, /v2, /inference and /cohere are guarded (serve/middleware/authenticate.py
    # GUARDED_PREFIX): /health, /metrics and /tokenize answer any key.
    auth_path: ClassVar[str] = "/v1/models"
    capabilities = Capabilities(
        bypass_cache=True,  # a fresh cache_salt per request
        flush_cache=True,  # POST /reset_prefix_cache, with VLLM_SERVER_DEV_MODE=1 only
        cached_tokens=True,  # usage.prompt_tokens_details, with --enable-prompt-tokens-details
        spec_counters=True,  # per-request metrics, else /metrics differences around the request
        engine_timing=True,  # metrics.generation_time_ms, with --enable-per-request-metrics
    )
    # The KV block a prefix hit is counted in: config/cache.py DEFAULT_BLOCK_SIZE = 64 until the
    # server info reads the engine's own (an attention backend may change it).
    cache_page_tokens = 64

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._speculative: bool | None = None  # learnt from /metrics on first use
        self.num_speculative_tokens: int | None = None  # k, from the per-position counters

    @classmethod
    def launch_problems(cls, argv: Sequence[str]) -> list[str]:
        problems = []
        if DETAILS_FLAG not in argv:
            problems.append(
                f"vLLM reports cached prompt tokens only when started with {DETAILS_FLAG}: add "
                "it, or no request could be shown to have reused (or not) its cached prefix"
            )
        return problems

    # -- service calls ----------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        # POST /tokenize (no /v1 prefix; serve/tokenize/api_router.py), `prompt` a string.
        data = self._json("POST", "/tokenize", json={"prompt": text, "add_special_tokens": False})
        return [int(t) for t in self._require(data, "tokens", "/tokenize")]

    def flush_cache(self) -> None:
        # serve/dev/cache/api_router.py: registered only with VLLM_SERVER_DEV_MODE=1; answers
        # {"success": false} while blocks are held, "callers may retry".
        for _ in range(20):
            try:
                data = self._json("POST", "/reset_prefix_cache")
            except NotSupportedError:
                raise NotSupportedError(
                    "vllm: POST /reset_prefix_cache answered 404: it exists only when the server "
                    "runs with VLLM_SERVER_DEV_MODE=1 in its environment"
                ) from None
            if data.get("success"):
                return
            time.sleep(0.25)
        raise EngineError("vllm: /reset_prefix_cache kept answering success=false for 5 s")

    def server_info(self) -> ServerInfo:
        version = self._json("GET", "/version").get("version")
        cards = self._json("GET", "/v1/models").get("data") or []
        first = cards[0] if cards else {}
        args: dict[str, Any] = {
            "served_model_names": [c.get("id") for c in cards],
            "max_model_len": first.get("max_model_len"),
        }
        text = self._metrics_text()
        notes = []
        if text is not None and (m := _CACHE_INFO.search(text)):
            cache = dict(_LABEL.findall(m.group(1)))
            if cache.get("block_size", "").isdigit():
                self.cache_page_tokens = args["block_size"] = int(cache["block_size"])
            args["enable_prefix_caching"] = cache.get("enable_prefix_caching")
            if cache.get("enable_prefix_caching") == "False":
                notes.append("prefix caching is off: no warm request can reuse its prompt")
        if text is not None:
            positions = {int(p) for p in _PER_POS.findall(text)}
            args["speculative"] = bool(counter_sums(text, SPEC))
            if positions:
                args["num_speculative_tokens"] = self.num_speculative_tokens = max(positions) + 1
        return ServerInfo(engine=self.name, version=version, model=first.get("root"), args=args, notes=notes)

    def _metrics_text(self) -> str | None:
        resp = self._request("GET", "/metrics")
        return resp.text if resp.status_code == 200 else None

    def _spec_now(self) -> dict[str, float] | None:
        text = self._metrics_text()
        found = counter_sums(text, SPEC) if text is not None else {}
        if self._speculative is None:
            # The counters exist only with a speculative config (spec_decode/metrics.py).
            self._speculative = bool(found)
        return found if self._speculative else None

    # -- one request ------------------------------------------------------------------------
    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        body = self._completion_body(prompt, max_tokens, ignore_eos)
        if bypass_cache:
            body["cache_salt"] = f"perftests-{uuid.uuid4().hex}"
        before = self._spec_now() if self._speculative is not False else None
        data, t0, wall = self._timed_post("/v1/completions", body)
        result = self.parse(data, requested=max_tokens, started=t0, wall=wall)
        if result.spec_verify_steps is None and before is not None:
            after = self._spec_now() or {}
            result = self._with_counter_difference(result, before, after)
        return result

    def _with_counter_difference(
        self, r: RequestResult, before: dict[str, float], after: dict[str, float]
    ) -> RequestResult:
        steps, drafted, accepted = (int(after.get(k, 0) - before.get(k, 0)) for k in SPEC)
        # The first token comes from prefill; every verify step then emits its accepted drafts
        # plus one token of the target's own. The last step counts all its accepted drafts
        # before the request is cut at max_tokens (scheduler.py: num_accepted = generated -
        # sampled, then _update_request_with_output truncates): up to k - 1 more than emitted.
        # More than that, or drafts beyond k a step, means another request ran in between.
        k = self.num_speculative_tokens or (-(-drafted // steps) if steps else 0)
        plausible = (
            min(steps, drafted, accepted) >= 0
            and accepted <= drafted <= steps * max(k, 1)
            and steps + accepted <= r.completion_tokens - 1 + max(k - 1, 0)
        )
        if not plausible:
            raise EngineError(
                f"vllm: the speculative counters moved by {steps} steps and {accepted} accepted "
                f"tokens around a {r.completion_tokens}-token request: another client is using "
                "the service, so no request's acceptance can be read from them"
            )
        return replace(r, spec_verify_steps=steps, spec_drafted_tokens=drafted, spec_accepted_tokens=accepted)

    @classmethod
    def parse(cls, data: dict[str, Any], *, requested: int, started: float, wall: float) -> RequestResult:
        base = super().parse(data, requested=requested, started=started, wall=wall)
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details")
        if not isinstance(details, dict) or details.get("cached_tokens") is None:
            raise EngineError(
                "vllm: usage has no prompt_tokens_details.cached_tokens: start the server with "
                f"{DETAILS_FLAG}, without which no request can be shown to be warm or cold"
            )
        metrics = data.get("metrics") or {}
        gen_ms = metrics.get("generation_time_ms")
        n = base.completion_tokens
        spec = metrics.get("speculative_decoding") or {}
        return replace(
            base,
            cached_tokens=int(details["cached_tokens"]),
            engine_prompt_ms=metrics.get("time_to_first_token_ms"),
            engine_decode_ms=gen_ms,
            # generation_time is first token to last: n - 1 tokens decoded in it.
            engine_decode_tps=(n - 1) / (gen_ms / 1000) if gen_ms and n > 1 else None,
            spec_verify_steps=spec.get("num_spec_steps"),
            spec_drafted_tokens=spec.get("num_draft_tokens"),
            spec_accepted_tokens=spec.get("num_accepted_draft_tokens"),
        )
