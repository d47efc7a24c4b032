"""Engine adapters, looked up by the name a profile's `engine:` field gives."""

from __future__ import annotations

from perftests.engines.base import (
    Capabilities,
    EngineAdapter,
    RequestResult,
    ServerInfo,
    Timeouts,
    check_cache_mode,
)
from perftests.engines.llamacpp import LlamaCppAdapter
from perftests.engines.openai import OpenAIAdapter
from perftests.engines.sglang import SGLangAdapter
from perftests.engines.vllm import VLLMAdapter

ADAPTERS: dict[str, type[EngineAdapter]] = {
    a.name: a for a in (LlamaCppAdapter, OpenAIAdapter, SGLangAdapter, VLLMAdapter)
}

__all__ = [
    "ADAPTERS",
    "Capabilities",
    "EngineAdapter",
    "RequestResult",
    "ServerInfo",
    "Timeouts",
    "check_cache_mode",
]
