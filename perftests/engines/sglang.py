"""SGLang native API: POST /generate with input_ids; per-request figures in `meta_info`.

Read against the sglang 0.5.4 and 0.5.23 wheels (paths below are inside them; "HS" is
srt/entrypoints/http_server.py, "TM" srt/managers/tokenizer_manager.py); tests/standins/sglang.py
follows the same files per version. What the engine reports and what is derived:
- cached prompt tokens: meta_info.cached_tokens, counted in whole `page_size` pages (radix
  matches round down: 0.5.4 mem_cache/radix_cache.py match_prefix, 0.5.23 RadixKey.page_aligned),
  page_size read from the server info (64 with FlashMLA);
- verify steps: meta_info.spec_verify_ct (0.5.23 omits every spec_* key while it is 0);
  accepted drafts: spec_num_correct_drafts where sent (0.5.23), else derived as completion -
  verify steps - 1 (the first token comes from prefill, not a verify step);
- engine decode time: e2e_latency - first_token_latency (0.5.23 with --enable-metrics only);
- cold requests: from 0.5.23 a fresh `extra_key` per request, its own radix namespace
  (managers/scheduler.py passes extra_key to Req; mem_cache/radix_cache.py keys children on it);
  0.5.4 accepts extra_key in GenerateReqInput but its scheduler builds Req without it
  (managers/scheduler.py handle_generate_request) and drops a /generate cache_salt, so there a
  cold request follows a /flush_cache.

Only per-response fields are read for speculative counters: avg_spec_accept_length in the server
info is cumulative over all requests and would blur one request into the others."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, ClassVar

from perftests.engines.base import Capabilities, EngineAdapter, Prompt, RequestResult, ServerInfo
from perftests.errors import EngineError, NotSupportedError

# Server arguments kept in the record and the baseline's provenance: what decides decode speed
# and acceptance. A whitelist: the server info also carries api_key and admin_api_key unredacted.
KEEP = (
    "tp_size",
    "page_size",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_ddtree_budget",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "enable_metrics",
    "reasoning_parser",
    "tool_call_parser",
    "mem_fraction_static",
    "context_length",
)
FLUSH_WAIT_S = 30.0
KEYED_CACHE_SINCE = (0, 5, 23)  # the first version read whose scheduler passes extra_key on


def version_tuple(text: object) -> tuple[int, ...] | None:
    """'0.5.23.post1' -> (0, 5, 23); None when the string does not start with a number."""
    m = re.match(r"(\d+(?:\.\d+)*)", str(text or ""))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    health_path = "/health"
    # /health*, /metrics* (and /ready* in 0.5.23) are exempt from the key (0.5.4
    # utils/common.py add_api_key_middleware; 0.5.23 utils/auth.py decide_request_auth).
    auth_path: ClassVar[str] = "/v1/models"
    capabilities = Capabilities(
        bypass_cache=True,  # a fresh extra_key per request (0.5.23; can_bypass() says per service)
        flush_cache=True,  # POST /flush_cache empties the radix cache
        cached_tokens=True,  # meta_info.cached_tokens per response
        spec_counters=True,  # meta_info.spec_verify_ct per response
        engine_timing=True,  # first_token_latency with --enable-metrics (0.5.23), read when sent
    )

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        # self.admin_api_key: 0.5.23 with --admin-api-key set, /flush_cache takes only that key
        # (utils/auth.py AuthLevel.ADMIN_OPTIONAL).
        self.speculative: bool | None = None  # from the server info: is an algorithm set?
        self.version: tuple[int, ...] | None = None

    def can_bypass(self) -> bool:
        # Unknown or older than 0.5.23: flush instead (extra_key is dropped by 0.5.4's scheduler).
        return self.version is not None and self.version >= KEYED_CACHE_SINCE

    def server_info(self) -> ServerInfo:
        try:
            info = self._json("GET", "/server_info")  # 0.5.23 (HS server_info)
        except NotSupportedError:
            info = self._json("GET", "/get_server_info")  # 0.5.4 has only this one
        model = None
        for path in ("/model_info", "/get_model_info"):
            try:
                model = self._json("GET", path).get("model_path")
                break
            except NotSupportedError:
                continue
        args = {k: info[k] for k in KEEP if k in info}
        self.version = version_tuple(info.get("version"))
        self.cache_page_tokens = int(info.get("page_size") or 1)
        algorithm = info.get("speculative_algorithm")
        self.speculative = bool(algorithm)
        notes = []
        if algorithm == "DDTREE" and info.get("speculative_ddtree_budget") is None:
            notes.append(
                "DDTree runs without --speculative-ddtree-budget: the worker then takes "
                "block_size - 1 nodes, spine mode, a linear chain and not a tree "
                "(sgl-project/sglang#29907 speculative/ddtree_worker.py)"
            )
        return ServerInfo(
            engine=self.name,
            version=info.get("version"),
            model=model or info.get("model_path"),
            args=args,
            notes=notes,
        )

    def tokenize(self, text: str) -> list[int]:
        data = self._json("POST", "/v1/tokenize", json={"prompt": text, "add_special_tokens": False})
        return [int(t) for t in self._require(data, "tokens", "/v1/tokenize")]

    def flush_cache(self) -> None:
        """Empty the radix cache, or raise EngineError: a refused flush leaves the cache warm, so
        it is an error of the run, never "unsupported". 0.5.23 waits for idle up to ?timeout=;
        0.5.4 ignores it and answers 400 while requests run, so we wait and ask again."""
        # The admin key only where it exists (0.5.23): 0.5.4 would refuse it for the API key's place.
        admin = self.admin_api_key if self.version is None or self.version >= (0, 5, 23) else None
        headers = {"Authorization": f"Bearer {admin}"} if admin else {}
        deadline = time.monotonic() + FLUSH_WAIT_S
        while True:
            # _request names URL and status only on a transport error, never the headers.
            resp = self._request("POST", "/flush_cache", params={"timeout": FLUSH_WAIT_S}, headers=headers)
            if resp.status_code in (401, 403):
                raise EngineError(
                    f"sglang: /flush_cache refused the key ({resp.status_code}); a server started "
                    "with --admin-api-key takes only that key there (utils/auth.py ADMIN_OPTIONAL): "
                    "name its variable with service.admin_api_key_env in the profile"
                )
            if resp.status_code == 200:
                return
            if resp.status_code != 400 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        raise EngineError(
            f"sglang: /flush_cache answered {resp.status_code}: {resp.text.strip()[:200]!r}; the "
            "cache was not emptied (requests were running, or another flush was in progress)"
        )

    def _body(self, prompt: Prompt, max_tokens: int, ignore_eos: bool, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "min_new_tokens": max_tokens if ignore_eos else 0,
                "ignore_eos": ignore_eos,
                "temperature": 0.0,
            },
            "stream": stream,
        }
        if isinstance(prompt, str):
            body["text"] = prompt
        else:
            body["input_ids"] = list(prompt)
        return body

    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        self._refuse_bypass(bypass_cache)
        body = self._body(prompt, max_tokens, ignore_eos, stream=False)
        if bypass_cache:
            body["extra_key"] = f"perftests-{uuid.uuid4().hex}"
        data, t0, wall = self._timed_post("/generate", body)
        return self.parse(data, requested=max_tokens, started=t0, wall=wall, speculative=self.speculative)

    def _stream_body(self, prompt: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        return "/generate", self._body(prompt, max_tokens, True, stream=True)

    def _stream_progress(self, event: dict[str, Any], seen: int) -> tuple[int, str | None]:
        # meta_info.completion_tokens is cumulative in every chunk of both versions (output_ids
        # is a delta in 0.5.4 and cumulative in 0.5.23, so it is not counted).
        meta = event.get("meta_info") or {}
        finish = meta.get("finish_reason")
        reason = finish.get("type") if isinstance(finish, dict) else None
        return int(meta.get("completion_tokens", seen)), reason

    @classmethod
    def parse(
        cls,
        data: dict[str, Any],
        *,
        requested: int,
        started: float,
        wall: float,
        speculative: bool | None = None,
    ) -> RequestResult:
        meta = cls._require(data, "meta_info", "/generate")
        finish = meta.get("finish_reason") or {}
        reason = finish.get("type") if isinstance(finish, dict) else str(finish)
        if reason == "abort":
            raise EngineError(f"sglang: the request was aborted: {finish.get('message')!r}")
        completion = int(cls._require(meta, "completion_tokens", "meta_info"))
        verify = meta.get("spec_verify_ct")
        if verify is None and speculative:
            verify = 0  # 0.5.23 omits spec_* while no verify step ran (TM l.3138-3209)
        accepted = meta.get("spec_num_correct_drafts")
        if accepted is None and verify is not None:
            accepted = max(completion - int(verify) - 1, 0)
        latency, first = meta.get("e2e_latency"), meta.get("first_token_latency")
        decode_ms = (latency - first) * 1000 if latency is not None and first is not None else None
        return RequestResult(
            engine=cls.name,
            requested_tokens=requested,
            wall_s=wall,
            started_s=started,
            prompt_tokens=int(cls._require(meta, "prompt_tokens", "meta_info")),
            completion_tokens=completion,
            cached_tokens=meta.get("cached_tokens"),
            finish_reason=str(reason),
            engine_prompt_ms=None if first is None else first * 1000,
            engine_decode_ms=decode_ms,
            engine_decode_tps=(completion - 1) / (decode_ms / 1000) if decode_ms and completion > 1 else None,
            engine_latency_s=None if latency is None else float(latency),
            spec_verify_steps=None if verify is None else int(verify),
            spec_drafted_tokens=meta.get("spec_num_proposed_drafts"),
            spec_accepted_tokens=None if accepted is None else int(accepted),
        )
