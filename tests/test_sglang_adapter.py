"""The SGLang adapter against tests/sglang_standin.py: SGLang itself needs CUDA GPUs and cannot
run here, so a stand-in that follows SGLang's documented /generate schema takes its place."""

from __future__ import annotations

import pytest

from perftests.engines.sglang import SGLangAdapter
from perftests.errors import ServiceError
from perftests.measure import TwoPointMeter
from perftests.prompts import PromptSource
from tests.sglang_standin import SGLangStandIn


def test_generate_request_and_meta_info():
    with SGLangStandIn(accept_length=5.0) as sg, SGLangAdapter(sg.url) as adapter:
        r = adapter.generate([10, 11, 12, 13, 14, 15], 40)
        body = sg.requests[-1]["body"]
        assert body["input_ids"] == [10, 11, 12, 13, 14, 15]
        assert body["sampling_params"] == {
            "max_new_tokens": 40,
            "min_new_tokens": 40,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        assert body["stream"] is False
        assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (6, 40, 0)
        assert r.finish_reason == "length"
        assert r.spec_verify_steps == 8
        assert r.spec_accepted_tokens == 32
        assert r.engine_latency_s is not None and r.engine_latency_s <= r.wall_s


def test_text_prompt_and_cache_and_flush():
    with SGLangStandIn() as sg, SGLangAdapter(sg.url) as adapter:
        adapter.generate("hello world", 4)
        again = adapter.generate("hello world", 4)
        assert sg.requests[-1]["body"]["text"] == "hello world"
        assert again.cached_tokens == len("hello world") - 1
        adapter.flush_cache()
        assert adapter.generate("hello world", 4).cached_tokens == 0
        assert adapter.tokenize("abc") == sg.tokenize("abc")


def test_server_info_reads_version_and_args():
    with SGLangStandIn() as sg, SGLangAdapter(sg.url) as adapter:
        info = adapter.server_info()
        assert info.version == "0.5.4"
        assert info.model == "/models/Kimi-K2.6"
        assert info.args["speculative_algorithm"] == "DDTREE"
        assert info.args["attention_backend"] == "triton"


def test_early_stop_finish_reason():
    with SGLangStandIn(early_stop_at=3) as sg, SGLangAdapter(sg.url) as adapter:
        r = adapter.generate([1, 2, 3], 50, ignore_eos=False)
        assert r.finish_reason == "stop"
        assert r.completion_tokens == 3


def test_two_point_speculative_metrics_from_counter_differences():
    with SGLangStandIn(accept_length=4.0, step_ms=3.0) as sg, SGLangAdapter(sg.url) as adapter:
        meter = TwoPointMeter(adapter, PromptSource(adapter), short_tokens=8, long_tokens=264)
        point = meter.measure(256, repeats=3, warmup=0)
        assert len(point.valid_pairs) == 3
        a = point.acceptance_length()
        assert a.median == pytest.approx(4.0, rel=0.02)
        # tok/s must equal acceptance length / step time: both come from the same counters.
        s, st = point.tps(), point.step_ms()
        assert s.median == pytest.approx(a.median / (st.median / 1000), rel=0.05)


def test_api_key_sent_and_required():
    with SGLangStandIn(api_key="sk-standin-secret") as sg:
        with SGLangAdapter(sg.url) as anonymous, pytest.raises(ServiceError, match="401"):
            anonymous.health()
        with SGLangAdapter(sg.url, api_key="sk-standin-secret") as adapter:
            adapter.health()
            assert sg.headers_seen[-1]["Authorization"] == "Bearer sk-standin-secret"
