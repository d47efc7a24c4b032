"""A stand-in for an SGLang server. SGLang needs CUDA GPUs and cannot run on these machines, so
this hand-written server takes its place in the SGLang adapter's tests.

It follows SGLang 0.5.x's documented native API exactly, no more:
- POST /generate {input_ids | text, sampling_params: {max_new_tokens, min_new_tokens, ignore_eos,
  temperature}, stream} -> {text, output_ids, meta_info: {id, prompt_tokens, completion_tokens,
  cached_tokens, finish_reason: {type: "length", length} | {type: "stop", matched},
  e2e_latency, spec_verify_ct, spec_accept_length, spec_accept_rate}}
- GET /health, GET /server_info, GET /model_info, POST /flush_cache, POST /v1/tokenize
It also behaves like one where the measurement depends on it: a radix cache (a repeated prompt is
served from cache, reported in cached_tokens), decode time per verify step that grows with context,
and an optional API key checked on every request (401 otherwise, as SGLang's --api-key does)."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SGLangStandIn:
    def __init__(
        self,
        *,
        api_key: str | None = None,
        accept_length: float = 4.0,
        step_ms: float = 2.0,
        step_ms_per_1k_ctx: float = 0.5,
        early_stop_at: int | None = None,
        max_tokens_cap: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.accept_length = accept_length
        self.step_ms = step_ms
        self.step_ms_per_1k_ctx = step_ms_per_1k_ctx
        self.early_stop_at = early_stop_at
        self.max_tokens_cap = max_tokens_cap  # a server limit that truncates every request
        self.cache: set[tuple[int, ...]] = set()
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> SGLangStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the engine -------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % 1000 + 3 for c in text]  # one token per character: simple and exact

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        sp = body.get("sampling_params", {})
        ids = body.get("input_ids")
        if ids is None:
            ids = self.tokenize(body["text"])
        n = int(sp.get("max_new_tokens", 128))
        if not sp.get("ignore_eos") and self.early_stop_at is not None:
            n = min(n, self.early_stop_at)
        if self.max_tokens_cap is not None:
            n = min(n, self.max_tokens_cap)
        key = tuple(ids)
        # Radix-cache semantics: a prompt seen before has every token but the last cached.
        cached = len(ids) - 1 if key in self.cache else 0
        self.cache.add(key)
        steps = math.ceil(n / self.accept_length) if n else 0
        step_s = (self.step_ms + self.step_ms_per_1k_ctx * len(ids) / 1000) / 1000
        time.sleep(steps * step_s + (len(ids) - cached) * 1e-6)
        stopped_early = n < int(sp.get("max_new_tokens", 128))
        finish = {"type": "stop", "matched": 2} if stopped_early else {"type": "length", "length": n}
        return {
            "text": "x" * n,
            "output_ids": [5] * n,
            "meta_info": {
                "id": f"req-{len(self.requests)}",
                "prompt_tokens": len(ids),
                "completion_tokens": n,
                "cached_tokens": cached,
                "finish_reason": finish,
                "e2e_latency": time.perf_counter() - t0,
                "spec_verify_ct": steps,
                "spec_accept_length": n / steps if steps else 0.0,
                "spec_accept_rate": (n / steps - 1) / (self.accept_length - 1) if steps else 0.0,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, code: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _authorised(self) -> bool:
                outer.headers_seen.append(dict(self.headers))
                if outer.api_key and self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    self._reply(401, {"error": "Unauthorized"})
                    return False
                return True

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                if self.path == "/health":
                    self._reply(200, {})
                elif self.path == "/server_info":
                    self._reply(
                        200,
                        {
                            "version": "0.5.4",
                            "tp_size": 8,
                            "speculative_algorithm": "DDTREE",
                            "attention_backend": "triton",
                            "model_path": "/models/Kimi-K2.6",
                            "internal_states": [{"avg_spec_accept_length": 4.9}],
                        },
                    )
                elif self.path == "/model_info":
                    self._reply(200, {"model_path": "/models/Kimi-K2.6", "is_generation": True})
                else:
                    self._reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                if not self._authorised():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append({"path": self.path, "body": body})
                if self.path == "/generate":
                    self._reply(200, outer.generate(body))
                elif self.path == "/flush_cache":
                    outer.cache.clear()
                    self._reply(200, {})
                elif self.path == "/v1/tokenize":
                    toks = outer.tokenize(body["prompt"])
                    self._reply(200, {"tokens": toks, "count": len(toks), "max_model_len": 262144})
                else:
                    self._reply(404, {"detail": "Not Found"})

        return Handler
