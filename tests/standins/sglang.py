"""A stand-in for an SGLang server, one per supported version (0.5.4 and 0.5.23, both read from
their wheels on the package index). SGLang needs CUDA GPUs and cannot run here; this server takes
its place in the SGLang adapter's tests. Every behaviour cites the file it follows (paths inside
the wheel; "HS" is sglang/srt/entrypoints/http_server.py, "TM" managers/tokenizer_manager.py);
behaviours the measurement does not touch are not modelled.

Launch options it models (SGLangStandIn arguments): --api-key, --admin-api-key (0.5.23),
--enable-metrics, --page-size, --speculative-algorithm, --speculative-num-draft-tokens,
--speculative-ddtree-budget (the DDTree PR, sgl-project/sglang#29907; in no release),
--attention-backend, --context-length."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.standins.http import Handler, LocalServer

VERSIONS = ("0.5.4", "0.5.23")
FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
# 0.5.23 sglang/api/v1/api_types.py SamplingParams: "unknown keys rejected" (the fields we may send)
SAMPLING_KEYS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "min_new_tokens",
    "n",
    "ignore_eos",
    "skip_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "sampling_seed",
)


class SGLangStandIn(LocalServer):
    def __init__(
        self,
        *,
        version: str = "0.5.23",
        api_key: str | None = None,
        admin_api_key: str | None = None,
        enable_metrics: bool = False,
        page_size: int = 1,
        speculative_algorithm: str | None = "DDTREE",
        accept_length: float = 4.0,
        num_draft_tokens: int = 8,
        ddtree_budget: int | None = None,
        attention_backend: str = "triton",
        context_length: int = 262144,
        step_ms: float = 2.0,
        step_ms_per_1k_ctx: float = 0.5,
        early_stop_at: int | None = None,
        max_tokens_cap: int | None = None,
    ) -> None:
        if version not in VERSIONS:
            raise ValueError(f"no stand-in for SGLang {version}; have {VERSIONS}")
        if admin_api_key and version == "0.5.4":
            raise ValueError("0.5.4 has no --admin-api-key (server_args.py: grep finds none)")
        self.version = version
        self.new = version == "0.5.23"
        self.api_key, self.admin_api_key = api_key, admin_api_key
        self.enable_metrics = enable_metrics
        self.page_size = page_size
        self.spec = speculative_algorithm
        self.accept_length = accept_length
        self.num_draft_tokens = num_draft_tokens
        self.ddtree_budget = ddtree_budget
        self.attention_backend = attention_backend
        self.context_length = context_length
        self.step_ms, self.step_ms_per_1k_ctx = step_ms, step_ms_per_1k_ctx
        self.early_stop_at = early_stop_at
        self.max_tokens_cap = max_tokens_cap
        self.cache: set[tuple[Any, ...]] = set()  # (namespace, page-aligned prefix)
        self.requests: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.error_after_tokens: int | None = None  # a failure after the stream started
        self.abort_after_tokens: int | None = None  # a scheduler abort of the running request
        self._lock = threading.Lock()
        super().__init__(self._handler())

    # -- the engine -------------------------------------------------------------------------
    @staticmethod
    def tokenize(text: str) -> list[int]:
        return [ord(c) % 1000 + 3 for c in text]  # one token per character: simple and exact

    def server_args(self) -> dict[str, Any]:
        # 0.5.4 HS get_server_info: dataclasses.asdict(server_args), flat, api_key NOT redacted;
        # 0.5.23 HS server_info: server_args.resolved_dict() (watermark secrets only redacted).
        args: dict[str, Any] = {
            "model_path": "/models/Kimi-K2.6",
            "tp_size": 8,
            "page_size": self.page_size,
            "attention_backend": self.attention_backend,
            "speculative_algorithm": self.spec,
            "speculative_num_draft_tokens": self.num_draft_tokens if self.spec else None,
            "speculative_num_steps": self.num_draft_tokens - 1 if self.spec else None,
            "speculative_eagle_topk": 1 if self.spec else None,
            "disable_radix_cache": False,
            "disable_overlap_schedule": bool(self.spec),
            "enable_metrics": self.enable_metrics,
            "context_length": self.context_length,
            "api_key": self.api_key,
            "reasoning_parser": "kimi_k2" if self.new else "kimi",
        }
        if self.new:
            args.update(cuda_graph_max_bs_decode=8, cuda_graph_max_bs_prefill=8)
            args["admin_api_key"] = self.admin_api_key
        else:
            args["cuda_graph_max_bs"] = 8
        if self.spec == "DDTREE":
            args["speculative_ddtree_budget"] = self.ddtree_budget
        return args

    def _contract_error(self, body: dict[str, Any]) -> str | None:
        # 0.5.23 HS generate_request -> entrypoints/api_contract.py: 400 {"error": "<string>"}
        if not self.new:
            return None
        for key in body.get("sampling_params") or {}:
            if key not in SAMPLING_KEYS:
                return f"unknown field `{key}`, expected one of " + ", ".join(f"`{k}`" for k in SAMPLING_KEYS)
        return None

    def _cached(self, ids: list[int], namespace: tuple[Any, ...]) -> int:
        # schedule_batch.py init_next_round_input: max_prefix_len = input_len - 1; radix_cache.py
        # match_prefix rounds the key down to page_size (0.5.4 l.305-307; 0.5.23 RadixKey.page_aligned).
        # Different extra_key / cache_salt never share nodes (get_child_key).
        p = self.page_size
        usable = (len(ids) - 1) // p * p
        hit = 0
        for end in range(p, usable + 1, p):
            if (namespace, tuple(ids[:end])) not in self.cache:
                break
            hit = end
        for end in range(p, len(ids) // p * p + 1, p):  # insert, page-aligned
            self.cache.add((namespace, tuple(ids[:end])))
        return hit

    def _steps(self, n: int) -> int:
        # The first token comes from prefill, not a verify step; each verify step then commits
        # its accepted drafts plus one token (0.5.4 speculative/eagle_info.py l.389 increments
        # spec_verify_ct per verify; 0.5.23 scheduler_components/batch_result_processor.py l.832).
        return math.ceil((n - 1) / self.accept_length) if self.spec and n > 1 else 0

    def generate(self, body: dict[str, Any]) -> tuple[int, Any, list[tuple[int, dict[str, Any]]]]:
        """(status, body or final output, [(tokens so far, meta_info)] for streaming)."""
        t0 = time.perf_counter()
        if (err := self._contract_error(body)) is not None:
            return 400, {"error": err}, []
        sp = body.get("sampling_params", {})
        ids = body.get("input_ids")
        if ids is None:
            ids = self.tokenize(body["text"])
        if len(ids) >= self.context_length:
            # TM _validate_one_request (0.5.4 l.621-672; 0.5.23 l.1307-1376)
            msg = (
                f"The input ({len(ids)} tokens) is longer than the model's context length "
                f"({self.context_length} tokens)."
            )
            return 400, {"error": {"message": msg}}, []
        asked = int(sp.get("max_new_tokens", 128))
        # The same function: input + max_new_tokens against the context, ">=" in 0.5.4, ">" in 0.5.23.
        total = len(ids) + asked
        if total > self.context_length or (total == self.context_length and not self.new):
            msg = (
                "Requested token count exceeds the model's maximum context length of "
                f"{self.context_length} tokens. You requested a total of {total} tokens: "
                f"{len(ids)} tokens from the input messages and {asked} tokens for the completion. "
                "Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
            return 400, {"error": {"message": msg}}, []
        n = asked
        if not sp.get("ignore_eos") and self.early_stop_at is not None:
            n = min(n, self.early_stop_at)
        if self.max_tokens_cap is not None:
            n = min(n, self.max_tokens_cap)
        # 0.5.23: extra_key and cache_salt reach Req (managers/scheduler.py l.3025-3026) and key
        # the radix tree's children (radix_cache.py RadixKey). 0.5.4: GenerateReqInput takes
        # extra_key (io_struct.py l.164) but the scheduler builds Req without it
        # (managers/scheduler.py l.1185-1210), and /generate has no cache_salt: no namespace.
        namespace = (body.get("extra_key"), body.get("cache_salt")) if self.new else (None, None)
        with self._lock:
            cached = self._cached(list(ids), namespace)
        steps = self._steps(n)
        step_s = (self.step_ms + self.step_ms_per_1k_ctx * len(ids) / 1000) / 1000
        time.sleep((len(ids) - cached) * 1e-6)
        first = time.perf_counter()
        time.sleep((steps if self.spec else max(n - 1, 0)) * step_s)
        stopped_early = n < asked
        # schedule_batch.py BaseFinishReason.to_json
        finish: dict[str, Any] = (
            {"type": "stop", "matched": 2} if stopped_early else {"type": "length", "length": n}
        )
        meta: dict[str, Any] = {
            "id": f"req-{len(self.requests)}",
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "weight_version": "default",
        }
        if self.new:
            meta.update(num_retractions=0, reasoning_tokens=0)
        meta.update(completion_tokens=n, cached_tokens=cached)
        if self.new:
            meta["cached_tokens_details"] = {"device": cached, "host": 0} if cached else None
        chunks = self._stream_chunks(meta, n)
        meta["e2e_latency"] = time.perf_counter() - t0  # unconditional at finish, both versions
        self._spec_meta(meta, n, steps)
        if self.new and self.enable_metrics:
            # 0.5.23 observability/req_time_stats.py l.507-533: with --enable-metrics only
            meta["first_token_latency"] = first - t0
            meta["decode_throughput"] = (n - 1) / max(time.perf_counter() - first, 1e-9)
        out = {"text": "x" * n, "output_ids": [5] * n, "meta_info": meta}
        self.responses.append(out)
        return 200, out, chunks

    def _spec_meta(self, meta: dict[str, Any], n: int, steps: int) -> None:
        if not self.spec:
            return
        correct = max(n - 1 - steps, 0)
        if not self.new:
            # 0.5.4 TM _calculate_spec_decoding_metrics l.1581-1616: all three always present
            meta["spec_accept_rate"] = correct / (steps * (self.num_draft_tokens - 1)) if steps else 0.0
            meta["spec_accept_length"] = n / steps if steps else 0
            meta["spec_verify_ct"] = steps
            return
        # 0.5.23 TM l.3138-3209: every spec_* key omitted unless spec_verify_ct > 0
        if steps > 0:
            proposed = steps * (self.num_draft_tokens - 1)
            meta["spec_accept_rate"] = correct / proposed
            meta["spec_accept_length"] = n / steps
            meta["spec_num_correct_drafts"] = correct
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = steps

    def _stream_chunks(self, meta: dict[str, Any], n: int) -> list[tuple[int, dict[str, Any]]]:
        # One chunk per decode round with cumulative meta_info counts (TM _handle_batch_output).
        per = max(int(self.accept_length), 1) if self.spec else 1
        out, done = [], 0
        sizes = [1] + [per] * math.ceil(max(n - 1, 0) / per)
        for k in sizes:
            done = min(n, done + k)
            m = dict(meta, completion_tokens=done, finish_reason=None)
            out.append((done, m))
            if done >= n:
                break
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class StandInHandler(Handler):
            def _text(self, code: int, text: str) -> None:
                self._send(code, text.encode(), "text/plain; charset=utf-8")

            def _authorised(self, path: str) -> bool:
                outer.headers_seen.append(dict(self.headers))
                header = self.headers.get("Authorization") or ""
                if not outer.new:
                    # 0.5.4 utils/common.py add_api_key_middleware l.1129-1140: /health* and
                    # /metrics* exempt; exactly "Bearer <key>" elsewhere.
                    if not outer.api_key or path.startswith(("/health", "/metrics")):
                        return True
                    ok = header == f"Bearer {outer.api_key}"
                else:
                    # 0.5.23 utils/auth.py decide_request_auth: /health*, /ready*, /metrics*
                    # exempt; bearer case-insensitive; ADMIN_OPTIONAL routes (/flush_cache,
                    # /abort_request) take only the admin key when one is set.
                    if path.startswith(("/health", "/ready", "/metrics")):
                        return True
                    scheme, _, token = header.partition(" ")
                    bearer = token if scheme.lower() == "bearer" else None
                    if path in ("/flush_cache", "/abort_request") and outer.admin_api_key:
                        ok = bearer == outer.admin_api_key
                    elif outer.api_key:
                        ok = bearer == outer.api_key
                    else:
                        ok = True
                if not ok:
                    self._reply(401, {"error": "Unauthorized"})
                return ok

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def _route(self, method: str) -> None:
                parts = urlsplit(self.path)
                path, query = parts.path, parse_qs(parts.query)
                body: dict[str, Any] = {}
                if method == "POST":
                    raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    body = json.loads(raw or b"{}")
                if not self._authorised(path):
                    return
                outer.requests.append({"path": path, "body": body, "query": query})
                info_paths = ("/get_server_info", "/server_info") if outer.new else ("/get_server_info",)
                model_paths = ("/get_model_info", "/model_info") if outer.new else ("/get_model_info",)
                if path in ("/health", "/health_generate") or (path == "/ready" and outer.new):
                    self._send(200, b"")  # HS health_generate: an empty 200
                elif path in info_paths and method == "GET":
                    state = {"avg_spec_accept_length": outer.accept_length} if outer.spec else {}
                    info = dict(outer.server_args(), status="ready", max_total_num_tokens=10**6)
                    info.update(internal_states=[state], version=outer.version)
                    self._reply(200, info)
                elif path in model_paths and method == "GET":
                    self._reply(200, {"model_path": "/models/Kimi-K2.6", "is_generation": True})
                elif path == "/v1/models" and method == "GET":
                    card = {"id": "/models/Kimi-K2.6", "object": "model", "owned_by": "sglang"}
                    self._reply(200, {"object": "list", "data": [card]})
                elif path == "/metrics" and outer.enable_metrics:
                    self._send(200, b"sglang:gen_throughput 0.0\n", "text/plain")
                elif path == "/flush_cache":
                    self._flush(query)
                elif path in ("/v1/tokenize", "/tokenize") and method == "POST":
                    toks = outer.tokenize(body["prompt"])
                    self._reply(200, {"tokens": toks, "count": len(toks), "max_model_len": 262144})
                elif path == "/generate" and method == "POST":
                    self._generate(body)
                else:
                    self._reply(404, {"detail": "Not Found"})

            def _flush(self, query: dict[str, list[str]]) -> None:
                # 0.5.4 HS l.609-617: no timeout; the same text at 200 and at 400 (busy).
                # 0.5.23 HS l.1025-1040 + flush_wrapper.py: ?timeout= waits for idle; busy at
                # timeout 0 -> 400 "Flush cache failed.\n"; deadline -> 400 "Timed out ...".
                timeout = float(query.get("timeout", ["0"])[0]) if outer.new else 0.0
                deadline = time.monotonic() + timeout
                while outer.running and time.monotonic() < deadline:
                    time.sleep(0.01)
                if outer.running:
                    if not outer.new:
                        self._text(400, FLUSHED)
                    else:
                        self._text(
                            400, "Timed out waiting for idle state." if timeout else "Flush cache failed.\n"
                        )
                    return
                outer.cache.clear()
                self._text(200, FLUSHED)

            def _generate(self, body: dict[str, Any]) -> None:
                with outer.in_flight():
                    code, out, chunks = outer.generate(body)
                if code != 200 or not body.get("stream"):
                    self._reply(code, out)
                    return
                # HS stream_results (0.5.4 l.526-552; 0.5.23 l.943-990): data: <json> per chunk,
                # data: [DONE] last. text cumulative; output_ids the delta in 0.5.4, cumulative
                # in 0.5.23. A ValueError mid-stream becomes data: {"error": {...}}; 0.5.23 sends
                # a scheduler abort as an ordinary chunk with finish_reason type "abort".
                self._open_stream()
                prev = 0
                for i, (done, meta) in enumerate(chunks):
                    if outer.error_after_tokens is not None and prev >= outer.error_after_tokens:
                        err: dict[str, Any] = {"message": "The scheduler failed."}
                        if outer.new:
                            err.update(type="invalid_request_error", code=400, retryable=False)
                        self._event({"error": err})
                        break
                    if outer.abort_after_tokens is not None and prev >= outer.abort_after_tokens:
                        reason = {
                            "type": "abort",
                            "message": "Aborted",
                            "status_code": None,
                            "err_type": None,
                        }
                        self._event({"text": "x" * prev, "meta_info": dict(meta, finish_reason=reason)})
                        break
                    last = i == len(chunks) - 1
                    m = out["meta_info"] if last else meta
                    ids = [5] * (done if outer.new else done - prev)
                    self._event({"text": "x" * done, "output_ids": ids, "meta_info": m})
                    prev = done
                self._close_stream()

        return StandInHandler
