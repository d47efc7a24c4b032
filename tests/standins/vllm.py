"""A stand-in for vLLM's OpenAI-compatible server (vllm 0.34.0, read from its wheel on the
package index). vLLM needs GPUs and cannot run here; this server takes its place in the vLLM
adapter's tests. Each behaviour cites the file of the wheel it follows (paths inside the wheel,
line numbers of 0.34.0); nothing else is modelled.

Launch options it models (VLLMStandIn arguments):
  api_key                      --api-key (serve/middleware/register.py)
  enable_prompt_tokens_details --enable-prompt-tokens-details (entrypoints/common/cli_args.py)
  per_request_metrics          --enable-per-request-metrics
  per_request_spec             --per-request-spec-decode-metrics summary
  num_speculative_tokens       --speculative-config '{"num_speculative_tokens": k, ...}'
  dev_mode                     VLLM_SERVER_DEV_MODE=1 (envs.py)
  block_size                   --block-size (config/cache.py DEFAULT_BLOCK_SIZE = 64)
  max_model_len                --max-model-len"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.standins.http import Handler, LocalServer

VERSION = "0.34.0"
# serve/middleware/authenticate.py l.11: only these prefixes need the key.
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
MODEL = "stand-in/model"


class VLLMStandIn(LocalServer):
    def __init__(
        self,
        *,
        api_key: str | None = None,
        enable_prompt_tokens_details: bool = True,
        per_request_metrics: bool = False,
        per_request_spec: bool = False,
        num_speculative_tokens: int = 0,
        accepted_per_step: int = 3,
        dev_mode: bool = False,
        block_size: int = 64,
        max_model_len: int = 8192,
        step_ms: float = 2.0,
        step_ms_per_1k_ctx: float = 0.5,
    ) -> None:
        self.api_key = api_key
        self.details = enable_prompt_tokens_details
        self.per_request_metrics = per_request_metrics
        self.per_request_spec = per_request_spec
        self.k = num_speculative_tokens
        self.accepted_per_step = min(accepted_per_step, num_speculative_tokens)
        self.dev_mode = dev_mode
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.step_ms, self.step_ms_per_1k_ctx = step_ms, step_ms_per_1k_ctx
        self.blocks: set[tuple[Any, ...]] = set()  # hashes of cached full blocks
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.requests: list[dict[str, Any]] = []
        self.error_after_tokens: int | None = None  # a failure mid-stream, after the 200
        self._lock = threading.Lock()
        super().__init__(self._handler())

    # -- the engine -------------------------------------------------------------------------
    @staticmethod
    def tokenize(text: str) -> list[int]:
        return [ord(c) % 1000 + 3 for c in text]

    def _block_keys(self, ids: list[int], salt: str | None) -> list[tuple[Any, ...]]:
        # v1/core/kv_cache_utils.py: each full block's hash chains its parent's; cache_salt is an
        # extra key of the first block only (generate_block_hash_extra_keys l.655-658): it salts all.
        keys, parent = [], ("salt", salt)
        for i in range(len(ids) // self.block_size):
            parent = (parent, tuple(ids[i * self.block_size : (i + 1) * self.block_size]))
            keys.append(parent)
        return keys

    def _cached(self, ids: list[int], salt: str | None) -> int:
        # v1/core/kv_cache_manager.py get_computed_blocks l.318-328: the last prompt token is
        # always recomputed (max hit prompt_length - 1), hits are whole leading blocks
        # (single_type_kv_cache_manager.py FullAttentionManager.find_longest_cache_hit).
        keys = self._block_keys(ids, salt)
        limit = (len(ids) - 1) // self.block_size
        hit = 0
        for key in keys[:limit]:
            if key not in self.blocks:
                break
            hit += 1
        self.blocks.update(keys)
        return hit * self.block_size

    def _validate(self, body: dict[str, Any]) -> tuple[list[int], int] | dict[str, Any]:
        prompt = body.get("prompt")
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt or [])
        if not ids:
            # completion/protocol.py l.612-631
            return _error("Either prompt or prompt_embeds must be provided and non-empty.", "Bad Request")
        salt = body.get("cache_salt")
        bad = not isinstance(salt, str) or not salt or len(salt) > 128 or any(c in salt for c in "@/\\\0")
        if salt is not None and bad:
            # generate/base/protocol.py validate_cache_salt
            return _error(
                "Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt"
            )
        if len(ids) > self.max_model_len:
            # renderers/params.py TokenizeParams._token_len_check l.531-552
            n = len(ids)
            return _error(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your prompt contains {n} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={n})",
                param="input_tokens",
            )
        # completion/protocol.py l.64 (default 16, null -> 16); serve/utils/api_utils.py
        # get_max_tokens: clamped to max_model_len - prompt length, not refused.
        n = body.get("max_tokens")
        n = 16 if n is None else int(n)
        return ids, min(n, self.max_model_len - len(ids))

    def _steps(self, n: int) -> tuple[int, int]:
        """(verify steps, accepted drafts counted) for n tokens: the first from prefill, then
        each step commits its accepted drafts plus one sampled token. Counted before the request
        is cut at max_tokens (v1/core/sched/scheduler.py l.2392-2416: num_accepted = generated -
        sampled, then _update_request_with_output truncates), with drafts not capped to what is
        still needed: the last step counts all its accepted drafts, emitted or not."""
        if not self.k or n <= 1:
            return 0, 0
        steps = math.ceil((n - 1) / (self.accepted_per_step + 1))
        return steps, steps * self.accepted_per_step

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], list[int]]:
        """(status, response body, per-step token counts for streaming)."""
        checked = self._validate(body)
        if isinstance(checked, dict):
            return 400, checked, []
        ids, n = checked
        with self._lock:
            cached = self._cached(ids, body.get("cache_salt"))
        steps, accepted = self._steps(n)
        step_s = (self.step_ms + self.step_ms_per_1k_ctx * len(ids) / 1000) / 1000
        t0 = time.perf_counter()
        time.sleep((len(ids) - cached) * 2e-6)
        first = time.perf_counter()
        decode_steps = steps if self.k else max(n - 1, 0)
        time.sleep(decode_steps * step_s)
        last = time.perf_counter()
        with self._lock:
            # v1/spec_decode/metrics.py SpecDecodingStats.observe_draft, per request per step.
            self.counters["drafts"] += steps
            self.counters["draft_tokens"] += steps * self.k
            self.counters["accepted"] += accepted
        chunks = [1] + ([self.accepted_per_step + 1] * steps if self.k else [1] * (n - 1))
        if chunks and sum(chunks) > n:
            chunks[-1] -= sum(chunks) - n
        usage: dict[str, Any] = {
            "prompt_tokens": len(ids),
            "total_tokens": len(ids) + n,
            "completion_tokens": n,
            "completion_tokens_details": None,
        }
        if self.details:
            # completion/serving.py l.736-743; protocol.py UsageInfo exclude_if None: absent
            # without --enable-prompt-tokens-details.
            usage["prompt_tokens_details"] = {
                "cached_tokens": cached,
                "created_cache_tokens": None,
                "multimodal_tokens": None,
            }
        metrics: dict[str, Any] | None = None
        if self.per_request_metrics:
            # generate/base/serving.py build_per_request_timing_metrics l.38-90 (ms)
            metrics = {
                "time_to_first_token_ms": (first - t0) * 1000,
                "generation_time_ms": (last - first) * 1000,
                "queue_time_ms": 0.0,
                "mean_itl_ms": (last - first) * 1000 / max(n - 1, 1),
                "tokens_per_second": n / (last - t0),
                "speculative_decoding": None,
            }
        if self.per_request_spec and self.k:
            # completion/serving.py l.757-763: the spec stats go in whether or not the timing
            # metrics are on (a PerRequestMetrics with only them); stats.py to_dict l.397-421
            metrics = metrics or dict.fromkeys(
                (
                    "time_to_first_token_ms",
                    "generation_time_ms",
                    "queue_time_ms",
                    "mean_itl_ms",
                    "tokens_per_second",
                )
            )
            metrics["speculative_decoding"] = {
                "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
                "draft_acceptance_rate": accepted / (steps * self.k) if steps else 0.0,
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": steps * self.k,
                "num_spec_tokens": self.k,
            }
        return (
            200,
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "text": "x" * n,
                        "logprobs": None,
                        "finish_reason": "length",  # ignore_eos, or clamped to max_model_len
                        "stop_reason": None,
                    }
                ],
                "usage": usage,
                "metrics": metrics,  # model_dump(): the key is always there, null when off
            },
            chunks,
        )

    def metrics_text(self) -> str:
        # v1/metrics/loggers.py log_metrics_info (l.1114-1135, called at l.1355): the cache
        # config as the labels of a gauge set to 1, block_size as the engine settled it
        # (v1/engine/core_client.py l.909-912); labels sorted, as prometheus_client prints them.
        info = f'block_size="{self.block_size}",enable_prefix_caching="True",engine="0"'
        lines = [f"vllm:cache_config_info{{{info}}} 1.0"]
        if not self.k:
            return "\n".join([*lines, 'vllm:num_requests_running{engine="0"} 0.0']) + "\n"
        # v1/spec_decode/metrics.py SpecDecodingProm; only with a speculative config
        # (l.211-213); `_total` samples plus `_created` companions.
        lab = f'engine="0",model_name="{MODEL}"'
        for name, key in (
            ("vllm:spec_decode_num_drafts", "drafts"),
            ("vllm:spec_decode_num_draft_tokens", "draft_tokens"),
            ("vllm:spec_decode_num_accepted_tokens", "accepted"),
        ):
            lines += [
                f"# HELP {name}_total x",
                f"# TYPE {name}_total counter",
                f"{name}_total{{{lab}}} {float(self.counters[key])}",
                f"{name}_created{{{lab}}} 1.7e9",
            ]
        for pos in range(self.k):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{pos}"}} 0.0')
        return "\n".join(lines) + "\n"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class StandInHandler(Handler):
            def _authorised(self) -> bool:
                path = self.path.split("?")[0]
                if not outer.api_key or not path.startswith(GUARDED_PREFIX):
                    return True
                # authenticate.py verify_token l.30-45: "bearer" case-insensitive.
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                if scheme.lower() == "bearer" and token == outer.api_key:
                    return True
                self._reply(401, {"error": "Unauthorized"})  # a plain string (l.47-62)
                return False

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                path = self.path.split("?")[0]
                if path == "/health":
                    self._send(200, b"")  # serve/instrumentator/health.py: empty body
                elif path == "/version":
                    self._reply(200, {"version": VERSION})
                elif path == "/metrics":
                    self._send(200, outer.metrics_text().encode(), "text/plain; version=1.0.0")
                elif path == "/v1/models":
                    # openai/models/serving.py show_available_models l.64-77
                    card = {
                        "id": MODEL,
                        "object": "model",
                        "created": 0,
                        "owned_by": "vllm",
                        "root": "/models/stand-in",
                        "parent": None,
                        "max_model_len": outer.max_model_len,
                        "permission": [],
                    }
                    self._reply(200, {"object": "list", "data": [card]})
                else:
                    self._reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                if not self._authorised():
                    return
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"{}")
                path = self.path.split("?")[0]
                outer.requests.append({"path": path, "body": body})
                if path == "/tokenize":
                    # serve/tokenize/protocol.py TokenizeCompletionRequest: prompt is a str
                    toks = outer.tokenize(body["prompt"])
                    self._reply(
                        200,
                        {
                            "count": len(toks),
                            "max_model_len": outer.max_model_len,
                            "tokens": toks,
                            "token_strs": None,
                        },
                    )
                elif path == "/reset_prefix_cache" and outer.dev_mode:
                    # serve/dev/cache/api_router.py: success false while blocks are held
                    ok = outer.running == 0
                    if ok:
                        outer.blocks.clear()
                    self._reply(200, {"success": ok})
                elif path == "/v1/completions":
                    self._completion(body)
                else:
                    self._reply(404, {"detail": "Not Found"})

            def _completion(self, body: dict[str, Any]) -> None:
                with outer.in_flight():
                    code, data, chunks = outer.complete(body)
                if code != 200 or not body.get("stream"):
                    self._reply(code, data)
                    return
                self._stream(body, data, chunks)

            def _stream(self, body: dict[str, Any], data: dict[str, Any], chunks: list[int]) -> None:
                # openai/completion/serving.py completion_stream_generator l.343-626: one
                # `data: {json}` event per delta, a usage chunk (choices []) with include_usage,
                # `data: [DONE]` last, even after an error sent as data: {"error": {...}}.
                self._open_stream()
                sent = 0
                for i, k in enumerate(chunks):
                    if outer.error_after_tokens is not None and sent >= outer.error_after_tokens:
                        err = {"message": "engine failure", "type": "InternalServerError", "code": 500}
                        self._event({"error": err})
                        break
                    sent += k
                    last = i == len(chunks) - 1
                    choice = {"index": 0, "text": "x" * k, "finish_reason": "length" if last else None}
                    self._event({"id": data["id"], "object": "text_completion", "choices": [choice]})
                else:
                    if (body.get("stream_options") or {}).get("include_usage"):
                        usage = {k: v for k, v in data["usage"].items() if v is not None}
                        self._event({"id": data["id"], "choices": [], "usage": usage})
                self._close_stream()

        return StandInHandler


def _error(message: str, kind: str = "BadRequestError", param: str | None = None) -> dict[str, Any]:
    # serve/engine/protocol.py ErrorResponse l.79-87: nested {"error": {...}} in 0.34.0
    return {"error": {"message": message, "type": kind, "param": param, "code": 400}}
