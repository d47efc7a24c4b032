"""The engine adapter contract: one plain record per request, and the few service calls a
measurement needs (health, info, tokenize, flush). Adapters translate, they never judge."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import httpx

from perftests.errors import AuthError, ConfigError, EngineError, NotSupportedError, ServiceError

Prompt = str | Sequence[int]


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can really do, declared per class so a run can be refused before it starts
    rather than recorded with a cache state or counter nobody could check."""

    bypass_cache: bool = False  # can skip prefix-cache reuse per request
    flush_cache: bool = False  # can flush the prefix cache
    cached_tokens: bool = False  # reports cached prompt tokens per request
    spec_counters: bool = False  # reports speculative verify/accept counters per request
    engine_timing: bool = False  # reports engine-side decode timing


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 5.0
    request_s: float = 600.0

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(self.request_s, connect=self.connect_s)


@dataclass
class RequestResult:
    """What one generation request cost and what the engine says it did.

    `wall_s` is the client's perf_counter span around the HTTP call: the figure the gate trusts.
    Engine-reported fields are None where the engine does not report them."""

    engine: str
    requested_tokens: int
    wall_s: float
    started_s: float  # perf_counter at send; lets tests check request timelines
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    finish_reason: str  # normalised: "length" | "stop" | engine's own word otherwise
    engine_prompt_ms: float | None = None
    engine_decode_ms: float | None = None
    engine_decode_tps: float | None = None
    engine_latency_s: float | None = None
    spec_verify_steps: int | None = None
    spec_drafted_tokens: int | None = None
    spec_accepted_tokens: int | None = None

    @property
    def ended_s(self) -> float:
        return self.started_s + self.wall_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StreamResult:
    """A streamed request: the arrival time of each event and the tokens it carried.

    Under speculative decoding one event can carry several tokens, so gaps between events are not
    per-token latency; decode rate is tokens after the first event over the time they took."""

    engine: str
    requested_tokens: int
    wall_s: float
    ttft_s: float | None
    completion_tokens: int
    finish_reason: str
    events: list[tuple[float, int]] = field(default_factory=list)  # (s since send, tokens)

    @property
    def decode_tps(self) -> float | None:
        if len(self.events) < 2:
            return None
        t0, n0 = self.events[0]
        t1 = self.events[-1][0]
        tokens = sum(n for _, n in self.events) - n0
        return tokens / (t1 - t0) if t1 > t0 else None

    @property
    def tokens_per_event(self) -> float | None:
        counted = [n for _, n in self.events if n > 0]
        return sum(counted) / len(counted) if counted else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decode_tps"] = self.decode_tps
        d["tokens_per_event"] = self.tokens_per_event
        return d


@dataclass
class ServerInfo:
    engine: str
    version: str | None
    model: str | None
    args: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the configuration means, said once

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EngineAdapter:
    """Base adapter: owns one httpx client per service (connection reuse, profile timeouts)."""

    name: ClassVar[str] = "base"
    health_path: str = "/health"  # the adapter's default; a profile may set its own
    # An endpoint the engine guards with its API key. Health is exempt in SGLang, vLLM and
    # llama.cpp alike, so a healthy service says nothing about the key; this one does.
    auth_path: ClassVar[str] = "/v1/models"
    # Prefix-cache hits are counted in whole pages of this many tokens (1: any prefix length).
    cache_page_tokens: int = 1
    # The base adapter claims nothing; each adapter declares what its code really does.
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts | None = None,
        model: str | None = None,
        admin_api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_api_key = admin_api_key  # for admin endpoints where the engine has them
        self.model = model
        self.timeouts = timeouts or Timeouts()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeouts.httpx())

    # -- plumbing ---------------------------------------------------------------------------
    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EngineAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        # Errors name the URL and status only: never headers, which carry the API key.
        try:
            resp = self._client.request(method, path, **kw)
        except httpx.TimeoutException as e:
            raise ServiceError(f"{method} {self.base_url}{path}: timed out ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise ServiceError(f"{method} {self.base_url}{path}: service unreachable ({e})") from None
        return resp

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self._request(method, path, **kw)
        if resp.status_code in (401, 403):
            raise AuthError(path, resp.status_code)
        if resp.status_code == 404 or resp.status_code == 501:
            raise NotSupportedError(f"{self.name}: {method} {path} answered {resp.status_code}")
        if resp.status_code >= 400:
            raise EngineError(
                f"{self.name}: {method} {self.base_url}{path} answered {resp.status_code}: {resp.text[:300]}"
            )
        try:
            return resp.json()
        except ValueError:
            raise EngineError(
                f"{self.name}: {method} {path} returned non-JSON: {resp.text[:200]!r}"
            ) from None

    def _timed_post(self, path: str, body: dict[str, Any]) -> tuple[Any, float, float]:
        t0 = time.perf_counter()
        data = self._json("POST", path, json=body)
        return data, t0, time.perf_counter() - t0

    def can_bypass(self) -> bool:
        """Whether this service, as it reported itself, honours a per-request cache bypass. The
        class declares what the adapter can do on some version; an older engine may need the
        flush instead (SGLang 0.5.4 drops /generate's extra_key before the radix cache)."""
        return self.capabilities.bypass_cache

    @classmethod
    def launch_problems(cls, argv: Sequence[str]) -> list[str]:
        """What in a launch command keeps this engine from reporting what the measurement
        checks (say, a flag without which cached tokens are not sent): refused before launch."""
        return []

    # -- the contract -----------------------------------------------------------------------
    def health(self) -> None:
        """Raise ServiceError unless the service says it is ready to generate."""
        resp = self._request("GET", self.health_path)
        if resp.status_code != 200:
            raise ServiceError(f"{self.base_url}{self.health_path} answered {resp.status_code}")

    def check_auth(self) -> None:
        """Raise AuthError when the service refuses this client's key, or its lack of one, on a
        guarded endpoint; any other answer (200, 404...) means the key was not the problem."""
        resp = self._request("GET", self.auth_path)
        if resp.status_code in (401, 403):
            raise AuthError(self.auth_path, resp.status_code)

    def server_info(self) -> ServerInfo:
        raise NotSupportedError(f"{self.name}: no server info endpoint")

    def tokenize(self, text: str) -> list[int]:
        raise NotSupportedError(f"{self.name}: cannot tokenize")

    def flush_cache(self) -> None:
        raise NotSupportedError(f"{self.name}: cannot flush the prefix cache")

    def generate(
        self, prompt: Prompt, max_tokens: int, *, ignore_eos: bool = True, bypass_cache: bool = False
    ) -> RequestResult:
        """One request. `bypass_cache=True` asks the engine not to reuse a cached prefix; an
        adapter without the bypass capability raises NotSupportedError (see _refuse_bypass)."""
        raise NotImplementedError

    def _refuse_bypass(self, bypass_cache: bool) -> None:
        """Raise before anything is sent when asked to bypass a cache this adapter cannot."""
        if bypass_cache and not self.can_bypass():
            raise NotSupportedError(
                f"{self.name}: the '{self.name}' adapter cannot bypass the prefix cache per request"
            )

    def stream(self, prompt: Prompt, max_tokens: int) -> StreamResult:
        """Generate with streaming on; records when each event arrived and its token count."""
        path, body = self._stream_body(prompt, max_tokens)
        events: list[tuple[float, int]] = []
        seen = 0
        finish = "none"
        t0 = time.perf_counter()
        try:
            with self._client.stream("POST", path, json=body) as resp:
                if resp.status_code in (401, 403):
                    raise AuthError(path, resp.status_code)
                if resp.status_code >= 400:
                    resp.read()
                    raise EngineError(
                        f"{self.name}: streaming {path} answered {resp.status_code}: {resp.text[:300]}"
                    )
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    now = time.perf_counter() - t0
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        raise EngineError(
                            f"{self.name}: a stream event is not JSON: {payload[:200]!r}"
                        ) from None
                    if isinstance(event, dict) and "error" in event:
                        # SGLang and vLLM both report a failure after the 200 as an event.
                        raise EngineError(
                            f"{self.name}: the stream carried an error: {str(event['error'])[:300]}"
                        )
                    total, reason = self._stream_progress(event, seen)
                    if total > seen:
                        events.append((now, total - seen))
                        seen = total
                    finish = reason or finish
        except httpx.TransportError as e:
            raise ServiceError(f"POST {self.base_url}{path} (stream): service unreachable ({e})") from None
        wall = time.perf_counter() - t0
        return StreamResult(
            self.name, max_tokens, wall, events[0][0] if events else None, seen, finish, events
        )

    def _stream_body(self, prompt: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        raise NotSupportedError(f"{self.name}: streaming is not supported")

    def _stream_progress(self, event: dict[str, Any], seen: int) -> tuple[int, str | None]:
        """(cumulative completion tokens after this event, finish reason if it is the last)."""
        raise NotSupportedError(f"{self.name}: streaming is not supported")

    @staticmethod
    def _require(data: dict[str, Any], key: str, where: str) -> Any:
        if key not in data:
            raise EngineError(f"response has no '{key}' in {where}: keys are {sorted(data)}")
        return data[key]


CACHE_MODES = ("warm", "cold")


def check_cache_mode(adapter: type[EngineAdapter], mode: str) -> None:
    """Raise ConfigError unless `adapter` can honour cache mode `mode` and verify it did.

    cold needs a way to avoid reuse (per-request bypass or a flush) and cached-token counts to
    prove no reuse happened; otherwise a "cold" record could be warm without anyone knowing.
    warm is always allowed: where cached tokens are not reported the point is noted unverified."""
    if mode not in CACHE_MODES:
        raise ConfigError(
            f"--perf-cache-mode {mode!r}: unknown cache mode; use one of {', '.join(CACHE_MODES)}"
        )
    if mode == "warm":
        return
    caps = adapter.capabilities
    can_avoid = caps.bypass_cache or caps.flush_cache
    if can_avoid and caps.cached_tokens:
        return
    if not can_avoid and not caps.cached_tokens:
        why = "cannot bypass or flush the prefix cache per request, nor report cached tokens to verify it"
    elif not can_avoid:
        why = "cannot bypass or flush the prefix cache per request"
    else:
        why = "does not report cached tokens, so a cold request could not be verified as cold"
    from perftests.engines import ADAPTERS  # late: the registry imports this module

    able = sorted(
        n
        for n, a in ADAPTERS.items()
        if (a.capabilities.bypass_cache or a.capabilities.flush_cache) and a.capabilities.cached_tokens
    )
    raise ConfigError(
        f"--perf-cache-mode {mode}: the '{adapter.name}' adapter {why}; use warm, "
        f"or an engine adapter that can ({', '.join(able)})"
    )
