"""Adapters declare what they can do, and a cache mode an adapter cannot honour and verify is
refused up front, naming the adapter and the mode. No server: fakes and a mock transport."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from perftests.engines import ADAPTERS, Capabilities, check_cache_mode
from perftests.engines.base import EngineAdapter, RequestResult
from perftests.engines.llamacpp import LlamaCppAdapter
from perftests.engines.openai import OpenAIAdapter
from perftests.engines.sglang import SGLangAdapter
from perftests.engines.vllm import VLLMAdapter
from perftests.errors import ConfigError, NotSupportedError
from perftests.measure import TwoPointMeter
from perftests.prompts import PromptSource

UNUSED_URL = "http://127.0.0.1:9"  # discard port: nothing here may ever be sent


# -- declarations ---------------------------------------------------------------------------


def test_declared_capabilities():
    assert LlamaCppAdapter.capabilities == Capabilities(
        bypass_cache=True, flush_cache=True, cached_tokens=True, spec_counters=True, engine_timing=True
    )
    assert OpenAIAdapter.capabilities == Capabilities(
        bypass_cache=False, flush_cache=False, cached_tokens=False, spec_counters=False, engine_timing=False
    )
    assert SGLangAdapter.capabilities == Capabilities(
        bypass_cache=True, flush_cache=True, cached_tokens=True, spec_counters=True, engine_timing=True
    )
    assert VLLMAdapter.capabilities == Capabilities(
        bypass_cache=True, flush_cache=True, cached_tokens=True, spec_counters=True, engine_timing=True
    )
    assert EngineAdapter.capabilities == Capabilities()  # the base claims nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        LlamaCppAdapter.capabilities.bypass_cache = False  # type: ignore[misc]


# -- check_cache_mode -----------------------------------------------------------------------


def test_cold_refused_for_openai_naming_adapter_and_mode():
    with pytest.raises(ConfigError) as e:
        check_cache_mode(OpenAIAdapter, "cold")
    msg = str(e.value)
    assert "'openai'" in msg and "cold" in msg
    assert "cannot bypass or flush" in msg and "cached tokens" in msg
    assert "use warm" in msg and "(llamacpp, sglang, vllm)" in msg


@pytest.mark.parametrize("adapter", [LlamaCppAdapter, SGLangAdapter, VLLMAdapter])
def test_cold_accepted_where_it_can_be_honoured_and_verified(adapter):
    check_cache_mode(adapter, "cold")


@pytest.mark.parametrize("adapter", list(ADAPTERS.values()) + [EngineAdapter])
def test_warm_always_accepted(adapter):
    check_cache_mode(adapter, "warm")


@pytest.mark.parametrize("mode", ["hot", "", "COLD"])
def test_unknown_mode_is_a_config_error(mode):
    with pytest.raises(ConfigError, match="unknown cache mode"):
        check_cache_mode(LlamaCppAdapter, mode)


def test_cold_refused_when_flush_is_possible_but_unverifiable():
    class FlushBlind(EngineAdapter):
        name = "flushblind"
        capabilities = Capabilities(flush_cache=True)

    with pytest.raises(ConfigError, match="'flushblind' adapter does not report cached tokens"):
        check_cache_mode(FlushBlind, "cold")


def test_cold_refused_when_reuse_cannot_be_avoided():
    class CountsOnly(EngineAdapter):
        name = "countsonly"
        capabilities = Capabilities(cached_tokens=True)

    with pytest.raises(ConfigError, match="'countsonly' adapter cannot bypass or flush"):
        check_cache_mode(CountsOnly, "cold")


# -- the meter ------------------------------------------------------------------------------


class Fake(EngineAdapter):
    """Records every generate/flush call; answers like an engine that honours the cache mode."""

    name = "fake"
    capabilities = Capabilities(bypass_cache=True, flush_cache=True, cached_tokens=True)

    def __init__(self, *, flush_error: Exception | None = None) -> None:
        super().__init__(UNUSED_URL)
        self.calls: list[tuple[str, int | None, bool | None]] = []
        self.flush_error = flush_error

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % 500 for c in text[:2000]]

    def flush_cache(self) -> None:
        self.calls.append(("flush", None, None))
        if self.flush_error is not None:
            raise self.flush_error

    def generate(self, prompt, max_tokens, *, ignore_eos=True, bypass_cache=False):
        self._refuse_bypass(bypass_cache)
        self.calls.append(("generate", max_tokens, bypass_cache))
        return RequestResult(
            self.name, max_tokens, 0.001 * max_tokens, 0.0, len(prompt), max_tokens, 0, "length"
        )


class FlushOnly(Fake):
    name = "flushonly"
    capabilities = Capabilities(bypass_cache=False, flush_cache=True, cached_tokens=True)


def _meter(adapter, mode):
    return TwoPointMeter(
        adapter, PromptSource(adapter), short_tokens=8, long_tokens=40, cache_mode=mode, adaptive_span=False
    )


def test_meter_refuses_cold_on_openai_at_construction():
    with OpenAIAdapter(UNUSED_URL) as adapter:
        with pytest.raises(ConfigError, match="cold: the 'openai' adapter"):
            _meter(adapter, "cold")


def test_meter_refuses_unknown_mode_with_config_error():
    with Fake() as adapter, pytest.raises(ConfigError):
        _meter(adapter, "lukewarm")


def test_cold_uses_bypass_when_available():
    with Fake() as adapter:
        pair = _meter(adapter, "cold").pair(64, 40)
        assert pair.valid, pair.invalid_reason
        assert adapter.calls == [("generate", 8, True), ("generate", 40, True)]


def test_cold_flushes_before_each_request_when_only_flush_is_available():
    with FlushOnly() as adapter:
        pair = _meter(adapter, "cold").pair(64, 40)
        assert pair.valid, pair.invalid_reason
        assert adapter.calls == [
            ("flush", None, None),
            ("generate", 8, False),
            ("flush", None, None),
            ("generate", 40, False),
        ]


@pytest.mark.parametrize("error", [NotSupportedError("flushonly: refused while busy"), RuntimeError("boom")])
def test_failed_flush_propagates_out_of_the_meter(error):
    with FlushOnly(flush_error=error) as adapter:
        meter = _meter(adapter, "cold")
        with pytest.raises(type(error), match=str(error)):
            meter.measure(64, repeats=1, warmup=0)
        assert not [c for c in adapter.calls if c[0] == "generate"], "generated after a failed flush"


def test_warm_generates_normally():
    with FlushOnly() as adapter:
        pair = _meter(adapter, "warm").pair(64, 40)
        assert adapter.calls == [("generate", 1, False), ("generate", 8, False), ("generate", 40, False)]
        assert pair.warm is not None


# -- the adapters' generate -----------------------------------------------------------------


def _mock(adapter: EngineAdapter, handler) -> list[httpx.Request]:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return handler(request)

    adapter._client.close()
    adapter._client = httpx.Client(base_url=adapter.base_url, transport=httpx.MockTransport(record))
    return sent


@pytest.mark.parametrize("cls", [OpenAIAdapter])
def test_bypass_refused_before_anything_is_sent(cls):
    with cls(UNUSED_URL, model="m") as adapter:
        sent = _mock(adapter, lambda r: httpx.Response(500))
        with pytest.raises(NotSupportedError, match=f"'{cls.name}' adapter cannot bypass"):
            adapter.generate([1, 2, 3], 4, bypass_cache=True)
        assert sent == []


def test_llamacpp_maps_bypass_to_cache_prompt():
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(
            200,
            json={
                "tokens_predicted": body["n_predict"],
                "tokens_evaluated": len(body["prompt"]),
                "stop_type": "limit",
                "timings": {
                    "prompt_n": len(body["prompt"]),
                    "cache_n": 0,
                    "predicted_ms": 1.0,
                    "prompt_ms": 1.0,
                },
            },
        )

    with LlamaCppAdapter(UNUSED_URL) as adapter:
        sent = _mock(adapter, answer)
        adapter.generate([1, 2, 3], 4, bypass_cache=True)
        adapter.generate([1, 2, 3], 4)
        assert [json.loads(r.content)["cache_prompt"] for r in sent] == [False, True]
