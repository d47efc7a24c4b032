"""The SGLang adapter against tests/standins/sglang.py, one stand-in per supported version (0.5.4,
0.5.23), each following that version's source. SGLang needs CUDA GPUs and cannot run here. Each
test names the behaviour of SGLang it depends on; those marked "mismatch" failed before the
adapter was fixed for it."""

from __future__ import annotations

import threading
import time

import pytest

from perftests.engines import sglang as sglang_module
from perftests.engines.sglang import SGLangAdapter
from perftests.errors import EngineError, NotSupportedError, ServiceError
from perftests.measure import TwoPointMeter
from perftests.profiles import ServiceSpec
from perftests.prompts import PromptSource
from perftests.service import attach
from tests.standins.sglang import VERSIONS, SGLangStandIn

both = pytest.mark.parametrize("version", VERSIONS)


@both
def test_generate_request_and_meta_info(version):
    with SGLangStandIn(version=version, accept_length=5.0) as sg, SGLangAdapter(sg.url) as adapter:
        adapter.server_info()
        r = adapter.generate([10, 11, 12, 13, 14, 15], 40)
        body = sg.requests[-1]["body"]
        assert body["input_ids"] == [10, 11, 12, 13, 14, 15]
        assert body["sampling_params"] == {
            "max_new_tokens": 40,
            "min_new_tokens": 40,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        assert body["stream"] is False and "extra_key" not in body
        assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (6, 40, 0)
        assert r.finish_reason == "length"
        assert r.engine_latency_s is not None and r.engine_latency_s <= r.wall_s


@both
def test_accepted_drafts_exclude_the_prefill_token(version):
    """Mismatch: the first output token comes from prefill, not a verify step, so 40 tokens in 8
    verify steps are 31 accepted drafts, not 32."""
    with SGLangStandIn(version=version, accept_length=5.0) as sg, SGLangAdapter(sg.url) as adapter:
        adapter.server_info()
        r = adapter.generate([1, 2, 3], 40)
        assert (r.spec_verify_steps, r.spec_accepted_tokens) == (8, 31)
        if version == "0.5.23":  # read, not derived: spec_num_correct_drafts / _proposed_drafts
            assert r.spec_drafted_tokens == 8 * 7


def test_a_request_without_verify_steps_has_zero_not_unknown_on_0_5_23():
    """Mismatch: 0.5.23 omits spec_verify_ct (and every spec_* key) while it is 0."""
    with SGLangStandIn(version="0.5.23") as sg, SGLangAdapter(sg.url) as adapter:
        adapter.server_info()
        r = adapter.generate([1, 2, 3], 1)
        assert "spec_verify_ct" not in sg.responses[-1]["meta_info"] and r.spec_verify_steps == 0
    with SGLangStandIn(version="0.5.23", speculative_algorithm=None) as sg, SGLangAdapter(sg.url) as a:
        a.server_info()
        assert a.generate([1, 2, 3], 8).spec_verify_steps is None  # no speculative decoding at all


@both
def test_warm_pairs_are_judged_by_whole_pages(version):
    """Mismatch: radix matches round down to page_size (64 with FlashMLA); the old rule
    (cached >= context - 8) rejected every warm pair."""
    with SGLangStandIn(version=version, page_size=64) as sg, SGLangAdapter(sg.url) as adapter:
        assert adapter.server_info().args["page_size"] == 64
        meter = TwoPointMeter(adapter, PromptSource(adapter), short_tokens=8, long_tokens=72)
        point = meter.measure(300, repeats=2, warmup=0)
        assert len(point.valid_pairs) == 2
        assert point.valid_pairs[0].short.cached_tokens == 256


def test_cold_requests_use_their_own_radix_namespace_without_flushing_on_0_5_23():
    """Mismatch: the adapter had no per-request bypass; from 0.5.23 extra_key reaches the radix
    tree (managers/scheduler.py passes it to Req), so cold needs no flush."""
    with SGLangStandIn(version="0.5.23") as sg, SGLangAdapter(sg.url) as adapter:
        adapter.server_info()
        meter = TwoPointMeter(
            adapter, PromptSource(adapter), short_tokens=8, long_tokens=72, cache_mode="cold"
        )
        point = meter.measure(200, repeats=2, warmup=0)
        assert len(point.valid_pairs) == 2
        assert all(p.short.cached_tokens == 0 for p in point.valid_pairs)
        assert not any(q["path"] == "/flush_cache" for q in sg.requests)
        keys = [q["body"].get("extra_key") for q in sg.requests if q["path"] == "/generate"]
        assert all(keys) and len(set(keys)) == len(keys)


def test_cold_requests_flush_on_0_5_4_whose_scheduler_drops_extra_key():
    """0.5.4 takes extra_key in GenerateReqInput but builds Req without it: a key would leave
    the prompt cached, so cold there is a flush before each request."""
    with SGLangStandIn(version="0.5.4") as sg, SGLangAdapter(sg.url) as adapter:
        raw = {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 2}}
        adapter._client.post("/generate", json=raw)
        again = adapter._client.post("/generate", json={**raw, "extra_key": "fresh"}).json()
        assert again["meta_info"]["cached_tokens"] == 99  # the key did not namespace anything
        adapter.server_info()
        assert not adapter.can_bypass()
        with pytest.raises(NotSupportedError, match="cannot bypass"):
            adapter.generate([1, 2, 3], 2, bypass_cache=True)
        meter = TwoPointMeter(
            adapter, PromptSource(adapter), short_tokens=8, long_tokens=72, cache_mode="cold"
        )
        point = meter.measure(200, repeats=2, warmup=0)
        assert len(point.valid_pairs) == 2
        assert all(p.short.cached_tokens == 0 == p.long.cached_tokens for p in point.valid_pairs)
        paths = [q["path"] for q in sg.requests]
        assert paths.count("/flush_cache") == paths.count("/generate") - 2  # one per measured request


def test_engine_decode_time_from_first_token_latency_with_metrics():
    """Mismatch: 0.5.23 with --enable-metrics sends first_token_latency; the engine column was empty."""
    with SGLangStandIn(version="0.5.23", enable_metrics=True) as sg, SGLangAdapter(sg.url) as adapter:
        adapter.server_info()
        meter = TwoPointMeter(adapter, PromptSource(adapter), short_tokens=8, long_tokens=200)
        point = meter.measure(128, repeats=2, warmup=0)
        pair = point.valid_pairs[0]
        assert pair.engine_tps is not None
        assert pair.engine_tps == pytest.approx(pair.tps, rel=0.5)  # same span, engine's clock
    with SGLangStandIn(version="0.5.4", enable_metrics=True) as sg, SGLangAdapter(sg.url) as adapter:
        assert adapter.generate([1, 2], 8).engine_decode_ms is None  # 0.5.4 has no such key


@both
def test_api_key_exempt_health_and_attach_checks_the_key(version):
    """Mismatch: /health* and /metrics* need no key, so a wrong key used to pass attach and the
    run died later at /v1/tokenize. Attach now asks a guarded endpoint and names the variable."""
    secret = "sk-standin-secret"
    with SGLangStandIn(version=version, api_key=secret) as sg:
        with SGLangAdapter(sg.url, api_key="sk-wrong") as wrong:
            wrong.health()  # exempt: says nothing about the key
        spec = ServiceSpec(engine="sglang")
        with pytest.raises(ServiceError) as e:
            attach(spec, sg.url, api_key="sk-wrong", key_var="SG_KEY")
        assert "refused the API key from $SG_KEY" in str(e.value) and "sk-" not in str(e.value)
        with pytest.raises(ServiceError, match="none was given"):
            attach(spec, sg.url)
        svc = attach(spec, sg.url, api_key=secret, key_var="SG_KEY")
        info = svc.adapter.server_info()
        assert secret not in repr(info.to_dict())  # the server info carries api_key unredacted
        assert sg.headers_seen[-1]["Authorization"] == f"Bearer {secret}"
        svc.close()


@both
def test_flush_waits_for_running_requests(version):
    """Mismatch: /flush_cache answers 400 while requests run (0.5.23 waits with ?timeout=); a
    refusal was reported as 'unsupported'. Now the flush waits, and a refusal is an error."""
    with SGLangStandIn(version=version, step_ms=50) as sg, SGLangAdapter(sg.url) as adapter:
        adapter.generate(list(range(100)), 2)
        busy = threading.Thread(target=adapter.generate, args=(list(range(50)), 20))
        busy.start()
        time.sleep(0.1)
        assert sg.running == 1
        adapter.flush_cache()
        busy.join()
        assert adapter.generate(list(range(100)), 2).cached_tokens == 0
        flushes = [q for q in sg.requests if q["path"] == "/flush_cache"]
        if version == "0.5.23":  # waits for idle on the engine's side, in one request
            assert len(flushes) == 1 and float(flushes[0]["query"]["timeout"][0]) > 0
        else:  # answered 400 while busy, asked again
            assert len(flushes) > 1


def test_a_flush_that_never_happens_is_an_error_of_the_run(monkeypatch):
    monkeypatch.setattr(sglang_module, "FLUSH_WAIT_S", 0.3)
    with SGLangStandIn(version="0.5.4", step_ms=400) as sg, SGLangAdapter(sg.url) as adapter:
        busy = threading.Thread(target=adapter.generate, args=(list(range(50)), 20))
        busy.start()
        time.sleep(0.1)
        with pytest.raises(EngineError, match="answered 400.*Cache flushed"):
            adapter.flush_cache()
        busy.join()


def test_flush_needs_the_admin_key_when_one_is_set():
    """0.5.23 utils/auth.py ADMIN_OPTIONAL: with --admin-api-key, /flush_cache takes only it."""
    with SGLangStandIn(version="0.5.23", api_key="sk-user", admin_api_key="sk-admin") as sg:
        with SGLangAdapter(sg.url, api_key="sk-user") as user:
            with pytest.raises(EngineError, match="401.*service.admin_api_key_env"):
                user.flush_cache()
        with SGLangAdapter(sg.url, api_key="sk-user", admin_api_key="sk-admin") as admin:
            admin.flush_cache()


@both
def test_server_info_per_version_and_provenance_fields(version):
    """Mismatch: 0.5.4 has only /get_server_info and /get_model_info; the provenance lacked
    page_size, the overlap schedule and the DDTree budget."""
    with SGLangStandIn(version=version, page_size=1, ddtree_budget=32) as sg, SGLangAdapter(sg.url) as a:
        info = a.server_info()
        assert info.version == version
        assert info.model == "/models/Kimi-K2.6"
        asked = [q["path"] for q in sg.requests]
        assert ("/get_model_info" in asked) == (version == "0.5.4")
        for key in ("page_size", "speculative_algorithm", "attention_backend", "disable_overlap_schedule"):
            assert key in info.args
        assert info.args["speculative_ddtree_budget"] == 32
        assert ("cuda_graph_max_bs" in info.args) == (version == "0.5.4")
        assert not info.notes


def test_ddtree_without_a_budget_is_said_to_be_a_chain():
    with SGLangStandIn(ddtree_budget=None) as sg, SGLangAdapter(sg.url) as a:
        assert any("spine mode, a linear chain" in n for n in a.server_info().notes)


@both
def test_stream_counts_tokens_whatever_output_ids_hold(version):
    """output_ids is a delta in 0.5.4 and cumulative in 0.5.23; completion_tokens is cumulative
    in both, and is what is counted."""
    with SGLangStandIn(version=version, accept_length=4.0) as sg, SGLangAdapter(sg.url) as adapter:
        s = adapter.stream(list(range(20)), 33)
        assert s.completion_tokens == 33 and s.finish_reason == "length"
        assert len(s.events) == 1 + 8  # the prefill token, then one event per verify step


@both
def test_an_error_after_the_stream_started_is_an_engine_error(version):
    """Mismatch: a ValueError mid-stream arrives as data: {"error": ...} with status 200 (HS
    stream_results); the stream used to end quietly with the tokens so far."""
    with SGLangStandIn(version=version) as sg, SGLangAdapter(sg.url) as adapter:
        sg.error_after_tokens = 5
        with pytest.raises(EngineError, match="stream carried an error.*scheduler failed"):
            adapter.stream(list(range(20)), 33)


def test_an_aborted_stream_says_abort():
    with SGLangStandIn(version="0.5.23") as sg, SGLangAdapter(sg.url) as adapter:
        sg.abort_after_tokens = 5
        s = adapter.stream(list(range(20)), 33)
        assert s.finish_reason == "abort" and s.completion_tokens < 33


@both
def test_a_400_names_sglangs_reason(version):
    with SGLangStandIn(version=version, context_length=100) as sg, SGLangAdapter(sg.url) as adapter:
        with pytest.raises(EngineError, match="400.*longer than the model's context length"):
            adapter.generate(list(range(150)), 4)


def test_early_stop_finish_reason():
    with SGLangStandIn(early_stop_at=3) as sg, SGLangAdapter(sg.url) as adapter:
        r = adapter.generate([1, 2, 3], 50, ignore_eos=False)
        assert r.finish_reason == "stop"
        assert r.completion_tokens == 3


@both
def test_two_point_speculative_metrics_from_counter_differences(version):
    with (
        SGLangStandIn(version=version, accept_length=4.0, step_ms=3.0) as sg,
        SGLangAdapter(sg.url) as adapter,
    ):
        adapter.server_info()
        meter = TwoPointMeter(adapter, PromptSource(adapter), short_tokens=8, long_tokens=264)
        point = meter.measure(256, repeats=3, warmup=0)
        assert len(point.valid_pairs) == 3
        assert point.acceptance_length().median == pytest.approx(4.0, rel=0.02)
        # The stand-in's verify step: 3 ms + 0.5 ms per 1k tokens of context (256 here).
        assert point.step_ms().median == pytest.approx(3.0 + 0.5 * 0.256, rel=0.1)


def test_the_warm_floor_still_catches_a_miss_on_paged_caches():
    from perftests.engines.base import RequestResult
    from perftests.measure import Pair, check_pair, warm_floor

    assert (warm_floor(300, 1), warm_floor(300, 64), warm_floor(129, 64), warm_floor(100, 64)) == (
        292,
        192,
        64,
        0,
    )

    def req(n: int, cached: int) -> RequestResult:
        return RequestResult("sglang", n, 0.1 * n, 0.0, 300, n, cached, "length")

    def pair(cached: int) -> Pair:
        return Pair(300, 0, req(8, cached), req(72, cached), "warm")

    assert check_pair(pair(256), 300, 8, 72, page=64) is None
    assert check_pair(pair(192), 300, 8, 72, page=64) is None  # one page short: EAGLE-style
    assert "missed the cache (0 of 300" in (check_pair(pair(0), 300, 8, 72, page=64) or "")
