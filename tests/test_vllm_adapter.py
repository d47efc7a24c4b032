"""The vLLM adapter against tests/standins/vllm.py, which follows vllm 0.34.0's source (vLLM needs
GPUs and cannot run here). Each test names the behaviour of vLLM it depends on."""

from __future__ import annotations

from pathlib import Path

import pytest

from perftests import config
from perftests.engines.vllm import VLLMAdapter
from perftests.errors import ConfigError, EngineError, NotSupportedError, ServiceError
from perftests.measure import TwoPointMeter
from perftests.profiles import ServiceSpec
from perftests.prompts import PromptSource
from perftests.service import attach
from tests.standins.vllm import VLLMStandIn


def test_request_body_and_block_granular_cached_tokens():
    with VLLMStandIn() as vl, VLLMAdapter(vl.url) as a:
        prompt = list(range(10, 210))  # 200 tokens
        first = a.generate(prompt, 8)
        body = vl.requests[-1]["body"]
        assert body["prompt"] == prompt and body["max_tokens"] == 8 and body["min_tokens"] == 8
        assert body["ignore_eos"] is True and body["temperature"] == 0.0 and "cache_salt" not in body
        assert body["model"] == "stand-in/model"
        assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens) == (200, 8, 0)
        # Whole 64-token blocks, the last prompt token always recomputed: 192 of 200.
        assert a.generate(prompt, 8).cached_tokens == 192
        assert first.finish_reason == "length"


def test_cold_requests_use_a_fresh_cache_salt_and_reuse_nothing():
    with VLLMStandIn() as vl, VLLMAdapter(vl.url) as a:
        prompt = list(range(300))
        a.generate(prompt, 4)
        r = a.generate(prompt, 4, bypass_cache=True)
        r2 = a.generate(prompt, 4, bypass_cache=True)
        salts = [q["body"].get("cache_salt") for q in vl.requests[-2:]]
        assert r.cached_tokens == r2.cached_tokens == 0
        assert all(salts) and salts[0] != salts[1]


def test_without_prompt_tokens_details_the_run_fails_naming_the_flag():
    with VLLMStandIn(enable_prompt_tokens_details=False) as vl, VLLMAdapter(vl.url) as a:
        with pytest.raises(EngineError, match="--enable-prompt-tokens-details"):
            a.generate([1, 2, 3], 4)


def test_a_launch_without_the_flag_is_refused_before_launching(tmp_path: Path):
    (tmp_path / "vl.yaml").write_text(
        "name: vl\nengine: vllm\nservice:\n  launch:\n"
        '    argv: ["vllm", "serve", "m", "--port", "{port}"]\n'
        "sweep:\n  contexts: [64, 512]\n"
    )
    with pytest.raises(ConfigError) as e:
        config.resolve({"hw": "vl", "profile_dir": [str(tmp_path)]}, tmp_path)
    assert "vl.yaml: service.launch.argv" in str(e.value)
    assert "--enable-prompt-tokens-details" in str(e.value)


def test_warm_pairs_are_judged_by_whole_blocks():
    """The old rule (cached >= context - 8) rejected every warm pair on vLLM's 64-token blocks."""
    with VLLMStandIn() as vl, VLLMAdapter(vl.url) as a:
        meter = TwoPointMeter(a, PromptSource(a), short_tokens=8, long_tokens=72)
        point = meter.measure(300, repeats=2, warmup=0)
        assert len(point.valid_pairs) == 2
        assert point.valid_pairs[0].short.cached_tokens == 256
        small = meter.measure(40, repeats=2, warmup=0)
        assert any("spans under two 64-token cache pages" in n for n in small.notes)


def test_cold_meter_pairs_are_cold_without_a_flush():
    with VLLMStandIn() as vl, VLLMAdapter(vl.url) as a:
        meter = TwoPointMeter(a, PromptSource(a), short_tokens=8, long_tokens=72, cache_mode="cold")
        point = meter.measure(300, repeats=2, warmup=0)
        assert len(point.valid_pairs) == 2
        assert all(q["path"] != "/reset_prefix_cache" for q in vl.requests)


def test_acceptance_from_metrics_counter_differences():
    with VLLMStandIn(num_speculative_tokens=4, accepted_per_step=2) as vl, VLLMAdapter(vl.url) as a:
        r = a.generate(list(range(50)), 31)
        # 31 tokens: 1 from prefill, then 10 steps of 2 accepted + 1 sampled.
        assert (r.spec_verify_steps, r.spec_accepted_tokens, r.spec_drafted_tokens) == (10, 20, 40)
        # 32 tokens: the 11th step emits 1 of its 3 but counts its 2 accepted drafts (counted
        # before the cut at max_tokens): one client, not a shared service.
        r = a.generate(list(range(50)), 32)
        assert (r.spec_verify_steps, r.spec_accepted_tokens) == (11, 22)
        meter = TwoPointMeter(a, PromptSource(a), short_tokens=8, long_tokens=200)
        point = meter.measure(128, repeats=2, warmup=0)
        assert point.acceptance_length().median == pytest.approx(3.0, rel=0.02)


def test_per_request_metrics_preferred_and_engine_decode_time_read():
    with (
        VLLMStandIn(num_speculative_tokens=4, per_request_metrics=True, per_request_spec=True) as vl,
        VLLMAdapter(vl.url) as a,
    ):
        a.generate([1, 2, 3], 4)  # learns the server is speculative
        vl.counters["drafts"] += 1000  # /metrics now lies; the per-request figures do not
        r = a.generate(list(range(40)), 41)
        assert (r.spec_verify_steps, r.spec_accepted_tokens) == (10, 30)
        assert r.engine_decode_ms is not None and r.engine_decode_tps is not None
        assert r.engine_decode_ms <= r.wall_s * 1000


def test_counters_moved_by_another_client_are_an_error_not_a_figure():
    with VLLMStandIn(num_speculative_tokens=4) as vl, VLLMAdapter(vl.url) as a:
        real = vl.complete

        def shared(body):
            out = real(body)
            vl.counters["drafts"] += 50  # another request's steps, between our two reads
            return out

        vl.complete = shared  # type: ignore[method-assign]
        with pytest.raises(EngineError, match="another client is using the service"):
            a.generate(list(range(20)), 16)


def test_auth_only_guards_v1_and_attach_checks_it(monkeypatch):
    with VLLMStandIn(api_key="sk-vllm-right") as vl:
        with VLLMAdapter(vl.url, api_key="sk-vllm-wrong") as wrong:
            wrong.health()  # /health is not under a guarded prefix
            assert wrong.tokenize("ab") == vl.tokenize("ab")  # nor is /tokenize
        spec = ServiceSpec(engine="vllm")
        with pytest.raises(ServiceError) as e:
            attach(spec, vl.url, api_key="sk-vllm-wrong", key_var="VLLM_KEY_VAR")
        assert "$VLLM_KEY_VAR" in str(e.value) and "sk-vllm" not in str(e.value)
        svc = attach(spec, vl.url, api_key="sk-vllm-right", key_var="VLLM_KEY_VAR")
        assert svc.adapter.generate([1, 2, 3], 2).completion_tokens == 2
        svc.close()


def test_flush_needs_dev_mode():
    with VLLMStandIn() as vl, VLLMAdapter(vl.url) as a:
        with pytest.raises(NotSupportedError, match="VLLM_SERVER_DEV_MODE=1"):
            a.flush_cache()
    with VLLMStandIn(dev_mode=True) as vl, VLLMAdapter(vl.url) as a:
        prompt = list(range(200))
        a.generate(prompt, 2)
        a.flush_cache()
        assert a.generate(prompt, 2).cached_tokens == 0


def test_a_too_long_prompt_is_an_engine_error_with_vllms_words():
    with VLLMStandIn(max_model_len=128) as vl, VLLMAdapter(vl.url) as a:
        with pytest.raises(EngineError, match="400.*maximum context length is 128"):
            a.generate(list(range(200)), 4)


def test_stream_counts_tokens_and_an_error_event_fails_it():
    with VLLMStandIn(num_speculative_tokens=4, accepted_per_step=3) as vl, VLLMAdapter(vl.url) as a:
        s = a.stream(list(range(30)), 33)
        assert s.completion_tokens == 33 and s.finish_reason == "length"
        vl.error_after_tokens = 5
        with pytest.raises(EngineError, match="stream carried an error.*engine failure"):
            a.stream(list(range(30)), 33)


def test_server_info():
    with VLLMStandIn(num_speculative_tokens=3) as vl, VLLMAdapter(vl.url) as a:
        info = a.server_info()
        assert info.version == "0.34.0" and info.model == "/models/stand-in"
        assert info.args["speculative"] is True and info.args["num_speculative_tokens"] == 3
        assert info.args["max_model_len"] == 8192


def test_the_block_size_is_read_from_the_engine_not_assumed():
    """An attention backend may change vLLM's block size; the engine's own is a label of
    vllm:cache_config_info. With 16-token blocks a 300-token prompt has 288 cached."""
    with VLLMStandIn(block_size=16) as vl, VLLMAdapter(vl.url) as a:
        assert a.cache_page_tokens == 64  # vLLM's default, until the server says
        info = a.server_info()
        assert a.cache_page_tokens == 16 == info.args["block_size"]
        meter = TwoPointMeter(a, PromptSource(a), short_tokens=8, long_tokens=72)
        point = meter.measure(300, repeats=2, warmup=0)
        assert point.valid_pairs[0].short.cached_tokens == 288
