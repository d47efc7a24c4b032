"""Real requests to the real reference llama-server through the llama.cpp and OpenAI adapters."""

from __future__ import annotations

import pytest

from perftests.engines.openai import OpenAIAdapter
from perftests.prompts import PromptSource

pytestmark = pytest.mark.server  # every test here runs the real llama-server


@pytest.fixture(scope="module")
def llama(launch_reference):
    return launch_reference("llamacpp")


def test_llamacpp_counts_finish_and_timings(llama):
    adapter = llama.adapter
    prompt = PromptSource(adapter).ids(100, 0)
    r = adapter.generate(prompt, 32, bypass_cache=True)
    assert r.prompt_tokens == 100
    assert r.completion_tokens == 32
    assert r.finish_reason == "length"
    assert r.cached_tokens == 0
    assert r.engine_decode_ms and r.engine_decode_ms > 0
    assert r.engine_prompt_ms and r.engine_prompt_ms > 0
    # The engine's decode time is part of the request, so it cannot exceed the client's wall time.
    assert r.engine_decode_ms / 1000 < r.wall_s
    assert r.spec_drafted_tokens is None  # no draft model loaded


def test_llamacpp_reports_a_cached_prefix(llama):
    adapter = llama.adapter
    prompt = PromptSource(adapter, seed=7).ids(200, 1)
    first = adapter.generate(prompt, 4)
    second = adapter.generate(prompt, 4)
    assert first.cached_tokens == 0
    # All but the last prompt token come from the slot: it must be re-evaluated to get logits.
    assert second.cached_tokens >= 199 - 1


def test_llamacpp_early_stop_is_visible(llama):
    adapter = llama.adapter
    # Random weights rarely emit EOS, so make the engine stop on a word: any letter or space.
    body = {
        "prompt": PromptSource(adapter).ids(50, 3),
        "n_predict": 64,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": False,
        "stop": [" "] + [chr(c) for c in range(97, 123)],
    }
    data = adapter._json("POST", "/completion", json=body)
    stopped = adapter.parse(data, requested=64, started=0.0, wall=1.0)
    assert stopped.finish_reason == "stop"
    assert stopped.completion_tokens < 64


def test_llamacpp_info_tokenize_flush(llama):
    adapter = llama.adapter
    info = adapter.server_info()
    assert info.engine == "llamacpp"
    assert info.version and "11434" in info.version
    assert info.model and info.model.endswith(".gguf")
    assert info.args["n_ctx"] == 4096
    ids = adapter.tokenize("The river town woke slowly")
    assert 3 <= len(ids) <= 27 and all(isinstance(i, int) for i in ids)
    prompt = PromptSource(adapter, seed=9).ids(120, 0)
    adapter.generate(prompt, 2)
    adapter.flush_cache()
    after = adapter.generate(prompt, 2)
    assert after.cached_tokens == 0, "flush_cache did not empty the slot"


def test_openai_adapter_on_llamacpp(llama):
    with OpenAIAdapter(llama.url) as adapter:
        adapter.health()
        prompt = PromptSource(llama.adapter).ids(80, 5)
        r = adapter.generate(prompt, 24)
        assert r.engine == "openai"
        assert r.prompt_tokens == 80
        assert r.completion_tokens == 24
        assert r.finish_reason == "length"
        assert r.cached_tokens is not None
        assert r.wall_s > 0
        info = adapter.server_info()
        assert info.model


def test_text_prompt_calibrated_to_exact_length(llama):
    src = PromptSource(llama.adapter, seed=3)
    for length in (16, 100, 333):
        text = src.text(length, 0)
        r = llama.adapter.generate(text, 2, bypass_cache=True)
        assert r.prompt_tokens == length


@pytest.mark.parametrize("length", [5, 64, 1000, 3000])
def test_exact_prompt_lengths_as_the_server_counts(llama, length):
    src = PromptSource(llama.adapter, seed=11)
    ids = src.ids(length, 0)
    assert len(ids) == length
    r = llama.adapter.generate(ids, 1, bypass_cache=True)
    assert r.prompt_tokens == length


def test_prompts_are_distinct_and_deterministic(llama):
    a = PromptSource(llama.adapter, seed=1)
    b = PromptSource(llama.adapter, seed=1)
    assert a.ids(300, 0) == b.ids(300, 0)
    firsts = {tuple(a.ids(300, i)[:4]) for i in range(20)}
    assert len(firsts) == 20, "two repeats share a prompt prefix and would hit each other's cache"
    rnd = PromptSource(llama.adapter, mode="random", seed=1).ids(300, 0)
    assert len(rnd) == 300 and rnd != a.ids(300, 0)


@pytest.mark.parametrize(
    "draft, low, high",
    [
        ("draft-identical", 0.9, 1.0),
        ("draft-unrelated", 0.0, 0.1),
    ],
)
def test_speculative_counters(launch_reference, draft, low, high):
    svc = launch_reference("llamacpp", draft=draft)
    r = svc.adapter.generate(PromptSource(svc.adapter).ids(64, 0), 128, bypass_cache=True)
    assert r.completion_tokens == 128
    assert r.spec_drafted_tokens and r.spec_drafted_tokens > 0
    rate = r.spec_accepted_tokens / r.spec_drafted_tokens
    assert low <= rate <= high, f"{draft}: acceptance rate {rate:.2f}"
    # Each verify step commits its accepted drafts plus one token of the target's own.
    assert r.spec_verify_steps + r.spec_accepted_tokens == r.completion_tokens - 1


def test_partial_acceptance_draft_lies_between(launch_reference):
    rates = {}
    # Measured: mix 0.0003 -> ~0.9, 0.001 -> ~0.78, 0.003 -> ~0.62, 0.01 -> ~0.38, 0.03 -> ~0.17.
    for draft in ("draft-identical", "draft-mix-0.003", "draft-unrelated"):
        svc = launch_reference("llamacpp", draft=draft)
        r = svc.adapter.generate(PromptSource(svc.adapter).ids(64, 0), 128, bypass_cache=True)
        rates[draft] = r.spec_accepted_tokens / r.spec_drafted_tokens
        svc.close()
    assert rates["draft-unrelated"] < 0.1, rates
    assert 0.2 < rates["draft-mix-0.003"] < 0.9, rates
    assert rates["draft-identical"] > 0.9, rates
