"""SGLang native API: POST /generate with input_ids; per-request figures in `meta_info`.

Only per-response fields are read for speculative counters: SGLang's avg_spec_accept_length in
/server_info is cumulative over all requests and would blur one request into the others."""

from __future__ import annotations

from typing import Any

from perftests.engines.base import Capabilities, EngineAdapter, Prompt, RequestResult, ServerInfo
from perftests.errors import NotSupportedError


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    health_path = "/health"
    capabilities = Capabilities(
        bypass_cache=False,  # /generate has no per-request switch to skip the radix cache
        flush_cache=True,  # POST /flush_cache empties the radix cache
        cached_tokens=True,  # meta_info.cached_tokens per response
        spec_counters=True,  # meta_info.spec_verify_ct per response
        engine_timing=False,  # only e2e_latency, which includes prefill: no decode timing
    )

    def server_info(self) -> ServerInfo:
        try:
            info = self._json("GET", "/server_info")
        except NotSupportedError:
            info = self._json("GET", "/get_server_info")  # SGLang before 0.4.x
        model = None
        try:
            model = self._json("GET", "/model_info").get("model_path")
        except NotSupportedError:
            pass
        keep = (
            "tp_size",
            "speculative_algorithm",
            "speculative_draft_model_path",
            "speculative_num_steps",
            "speculative_num_draft_tokens",
            "attention_backend",
            "reasoning_parser",
            "tool_call_parser",
            "mem_fraction_static",
            "context_length",
        )
        args = {k: info[k] for k in keep if k in info}
        return ServerInfo(
            engine=self.name, version=info.get("version"), model=model or info.get("model_path"), args=args
        )

    def tokenize(self, text: str) -> list[int]:
        data = self._json("POST", "/v1/tokenize", json={"prompt": text, "add_special_tokens": False})
        return [int(t) for t in self._require(data, "tokens", "/v1/tokenize")]

    def flush_cache(self) -> None:
        resp = self._request("POST", "/flush_cache")
        if resp.status_code >= 400:
            # SGLang refuses to flush while requests are running: a real condition, not "unsupported".
            raise NotSupportedError(f"sglang: /flush_cache answered {resp.status_code}: {resp.text[:200]}")

    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        # SGLang has no per-request cache switch; cache control is the measurement's job
        # (unique prompts or /flush_cache), verified through meta_info.cached_tokens.
        self._refuse_bypass(bypass_cache)
        body: dict[str, Any] = {
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "min_new_tokens": max_tokens if ignore_eos else 0,
                "ignore_eos": ignore_eos,
                "temperature": 0.0,
            },
            "stream": False,
        }
        if isinstance(prompt, str):
            body["text"] = prompt
        else:
            body["input_ids"] = list(prompt)
        data, t0, wall = self._timed_post("/generate", body)
        return self.parse(data, requested=max_tokens, started=t0, wall=wall)

    def _stream_body(self, prompt: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "min_new_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
            },
            "stream": True,
        }
        body["text" if isinstance(prompt, str) else "input_ids"] = (
            prompt if isinstance(prompt, str) else list(prompt)
        )
        return "/generate", body

    def _stream_progress(self, event: dict[str, Any], seen: int) -> tuple[int, str | None]:
        meta = event.get("meta_info") or {}
        finish = meta.get("finish_reason")
        reason = finish.get("type") if isinstance(finish, dict) else None
        return int(meta.get("completion_tokens", seen)), reason

    @classmethod
    def parse(cls, data: dict[str, Any], *, requested: int, started: float, wall: float) -> RequestResult:
        meta = cls._require(data, "meta_info", "/generate")
        finish = meta.get("finish_reason") or {}
        reason = finish.get("type") if isinstance(finish, dict) else str(finish)
        verify = meta.get("spec_verify_ct")
        completion = int(cls._require(meta, "completion_tokens", "meta_info"))
        accepted = None
        if verify is not None:
            # Each verify step commits its accepted drafts plus one token of the target's own.
            accepted = max(completion - int(verify), 0)
        latency = meta.get("e2e_latency")
        return RequestResult(
            engine=cls.name,
            requested_tokens=requested,
            wall_s=wall,
            started_s=started,
            prompt_tokens=int(cls._require(meta, "prompt_tokens", "meta_info")),
            completion_tokens=completion,
            cached_tokens=meta.get("cached_tokens"),
            finish_reason=str(reason),
            engine_latency_s=None if latency is None else float(latency),
            spec_verify_steps=None if verify is None else int(verify),
            spec_accepted_tokens=accepted,
        )
