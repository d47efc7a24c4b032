"""llama.cpp llama-server, native API: POST /completion with token arrays and `timings`."""

from __future__ import annotations

from typing import Any

from perftests.engines.base import Capabilities, EngineAdapter, Prompt, RequestResult, ServerInfo
from perftests.errors import EngineError, NotSupportedError

# llama.cpp's stop_type names mapped to the OpenAI-style finish reasons the measurement checks.
_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    health_path = "/health"
    capabilities = Capabilities(
        bypass_cache=True,  # `cache_prompt: false` in the /completion body skips slot reuse
        flush_cache=True,  # POST /slots/{id}?action=erase (needs --slot-save-path)
        cached_tokens=True,  # timings.cache_n / tokens_evaluated - prompt_n per response
        spec_counters=True,  # timings.draft_n / draft_n_accepted per response
        engine_timing=True,  # timings.predicted_ms / predicted_per_second per response
    )

    def server_info(self) -> ServerInfo:
        props = self._json("GET", "/props")
        settings = props.get("default_generation_settings", {})
        args = {k: props.get(k) for k in ("total_slots", "model_alias", "model_ftype") if k in props}
        args["n_ctx"] = settings.get("n_ctx")
        return ServerInfo(
            engine=self.name, version=props.get("build_info"), model=props.get("model_path"), args=args
        )

    def tokenize(self, text: str) -> list[int]:
        data = self._json("POST", "/tokenize", json={"content": text, "add_special": False})
        return [int(t) for t in self._require(data, "tokens", "/tokenize")]

    def flush_cache(self) -> None:
        # Erasing slots needs --slot-save-path; without it the server says so and we pass that on.
        slots = self._json("GET", "/slots")
        for slot in slots:
            resp = self._request("POST", f"/slots/{slot['id']}", params={"action": "erase"})
            if resp.status_code >= 400:
                raise NotSupportedError(f"llamacpp: slot erase refused: {resp.text[:200]}")

    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        body: dict[str, Any] = {
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "n_predict": max_tokens,
            "ignore_eos": ignore_eos,
            "cache_prompt": not bypass_cache,
            # Greedy: speculative acceptance then depends on the models only, not on sampling luck.
            "temperature": 0.0,
            "top_k": 1,
        }
        data, t0, wall = self._timed_post("/completion", body)
        return self.parse(data, requested=max_tokens, started=t0, wall=wall)

    def _stream_body(self, prompt: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body = {
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "n_predict": max_tokens,
            "ignore_eos": True,
            "cache_prompt": False,
            "temperature": 0.0,
            "top_k": 1,
            "stream": True,
        }
        return "/completion", body

    def _stream_progress(self, event: dict[str, Any], seen: int) -> tuple[int, str | None]:
        # tokens_predicted is cumulative in every partial result.
        total = int(event.get("tokens_predicted", seen + len(event.get("tokens", []))))
        reason = _FINISH.get(event.get("stop_type", ""), None) if event.get("stop") else None
        return total, reason

    @classmethod
    def parse(cls, data: dict[str, Any], *, requested: int, started: float, wall: float) -> RequestResult:
        timings = cls._require(data, "timings", "/completion")
        predicted = int(cls._require(data, "tokens_predicted", "/completion"))
        stop_type = str(data.get("stop_type", "none"))
        drafted = timings.get("draft_n")
        accepted = timings.get("draft_n_accepted")
        steps = None
        if drafted is not None and accepted is not None:
            # llama.cpp reports no verify-step count. The first token comes from prefill, and
            # every later target forward pass emits its accepted drafts plus one token of its own.
            steps = max(predicted - 1 - int(accepted), 0)
        prompt_n = timings.get("prompt_n")
        cached = data.get("tokens_cached")
        evaluated = data.get("tokens_evaluated")
        if evaluated is None:
            raise EngineError("llamacpp /completion response has no 'tokens_evaluated'")
        # tokens_cached counts prompt+generated tokens held in the slot; the prompt's cached part
        # is timings.cache_n, or what prefill did not have to process.
        cached_prompt = timings.get("cache_n")
        if cached_prompt is None:
            cached_prompt = int(evaluated) - int(prompt_n) if prompt_n is not None else cached
        return RequestResult(
            engine=cls.name,
            requested_tokens=requested,
            wall_s=wall,
            started_s=started,
            prompt_tokens=int(evaluated),
            completion_tokens=predicted,
            cached_tokens=cached_prompt,
            finish_reason=_FINISH.get(stop_type, stop_type),
            engine_prompt_ms=timings.get("prompt_ms"),
            engine_decode_ms=timings.get("predicted_ms"),
            engine_decode_tps=timings.get("predicted_per_second"),
            spec_verify_steps=steps,
            spec_drafted_tokens=None if drafted is None else int(drafted),
            spec_accepted_tokens=None if accepted is None else int(accepted),
        )
