"""Any OpenAI-compatible server: POST /v1/completions with `usage` (SGLang, vLLM, llama.cpp...).

`ignore_eos` and `min_tokens` are the de-facto extension fields SGLang, vLLM and llama.cpp accept;
a strict OpenAI server would ignore them, and the measurement then sees early stops and says so."""

from __future__ import annotations

from typing import Any

from perftests.engines.base import Capabilities, EngineAdapter, Prompt, RequestResult, ServerInfo
from perftests.errors import EngineError, ServiceError


class OpenAIAdapter(EngineAdapter):
    name = "openai"
    health_path = "/health"
    capabilities = Capabilities(
        bypass_cache=False,  # the OpenAI API has no per-request cache switch
        flush_cache=False,  # nor any endpoint to flush a prefix cache
        cached_tokens=False,  # usage.prompt_tokens_details is optional: read when sent, not promised
        spec_counters=False,  # draft counters only from llama.cpp's extra `timings`, opportunistically
        engine_timing=False,  # likewise `timings`: read when present, not part of the API
    )

    def health(self) -> None:
        # /health is not part of the OpenAI API; /v1/models is, so fall back to it.
        try:
            super().health()
        except ServiceError:
            resp = self._request("GET", "/v1/models")
            if resp.status_code != 200:
                raise
        return None

    def _model_name(self) -> str | None:
        if self.model is None:
            data = self._json("GET", "/v1/models").get("data") or []
            self.model = data[0]["id"] if data else None
        return self.model

    def server_info(self) -> ServerInfo:
        data = self._json("GET", "/v1/models").get("data") or []
        first = data[0] if data else {}
        return ServerInfo(
            engine=self.name,
            version=first.get("owned_by"),
            model=first.get("id"),
            args={"models": [m.get("id") for m in data]},
        )

    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        self._refuse_bypass(bypass_cache)
        body = self._completion_body(prompt, max_tokens, ignore_eos)
        data, t0, wall = self._timed_post("/v1/completions", body)
        return self.parse(data, requested=max_tokens, started=t0, wall=wall)

    def _completion_body(self, prompt: Prompt, max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": ignore_eos,
            "stream": False,
        }
        if ignore_eos:
            body["min_tokens"] = max_tokens
        if model := self._model_name():
            body["model"] = model
        return body

    def _stream_body(self, prompt: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if model := self._model_name():
            body["model"] = model
        return "/v1/completions", body

    def _stream_progress(self, event: dict[str, Any], seen: int) -> tuple[int, str | None]:
        # OpenAI chunks do not say how many tokens they carry: count one per non-empty chunk,
        # and take the exact total from the final usage chunk when the server sends one.
        usage = event.get("usage")
        choices = event.get("choices") or [{}]
        reason = choices[0].get("finish_reason") if choices else None
        if usage and usage.get("completion_tokens") is not None:
            return max(int(usage["completion_tokens"]), seen), reason
        return seen + (1 if choices and choices[0].get("text") else 0), reason

    @classmethod
    def parse(cls, data: dict[str, Any], *, requested: int, started: float, wall: float) -> RequestResult:
        usage = cls._require(data, "usage", "/v1/completions")
        choices = cls._require(data, "choices", "/v1/completions")
        if not choices:
            raise EngineError("/v1/completions returned no choices")
        details = usage.get("prompt_tokens_details") or {}
        timings = data.get("timings") or {}  # llama.cpp adds its native timings here
        return RequestResult(
            engine=cls.name,
            requested_tokens=requested,
            wall_s=wall,
            started_s=started,
            prompt_tokens=int(cls._require(usage, "prompt_tokens", "usage")),
            completion_tokens=int(cls._require(usage, "completion_tokens", "usage")),
            cached_tokens=details.get("cached_tokens"),
            finish_reason=str(choices[0].get("finish_reason")),
            engine_prompt_ms=timings.get("prompt_ms"),
            engine_decode_ms=timings.get("predicted_ms"),
            engine_decode_tps=timings.get("predicted_per_second"),
            spec_drafted_tokens=timings.get("draft_n"),
            spec_accepted_tokens=timings.get("draft_n_accepted"),
        )
