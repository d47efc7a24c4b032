"""Prompts of an exact context length, as the server counts tokens.

Built from real prose (perftests/data/corpus.txt, written for this project and dedicated to the
public domain) through the engine's own tokenizer, because drafts behave on text unlike on noise.
Each (length, index) gets a short random header of token ids, so no two prompts share a prefix
and repeats never hit each other's cache; the rest is the corpus from an index-dependent offset."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Literal

import numpy as np

from perftests.engines.base import EngineAdapter
from perftests.errors import ConfigError, NotSupportedError

HEADER_TOKENS = 4
Mode = Literal["corpus", "random"]


def corpus_text() -> str:
    return resources.files("perftests.data").joinpath("corpus.txt").read_text(encoding="utf-8")


def _rng(seed: int, *key: object) -> np.random.Generator:
    digest = hashlib.sha256(repr((seed, *key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class PromptSource:
    """Deterministic exact-length prompts for one engine. `ids()` for engines that accept token
    ids (all three adapters do); `text()` calibrates text through the engine's tokenizer."""

    def __init__(self, adapter: EngineAdapter, *, mode: Mode = "corpus", seed: int = 0) -> None:
        if mode not in ("corpus", "random"):
            raise ConfigError(f"prompt mode must be 'corpus' or 'random', got {mode!r}")
        self.adapter = adapter
        self.mode = mode
        self.seed = seed
        self._corpus_ids: np.ndarray | None = None

    def corpus_ids(self) -> np.ndarray:
        if self._corpus_ids is None:
            try:
                ids = self.adapter.tokenize(corpus_text())
            except NotSupportedError:
                raise NotSupportedError(
                    f"{self.adapter.name}: cannot tokenize, so prompts cannot be built from text; "
                    "use an engine adapter with a tokenizer endpoint"
                ) from None
            if len(ids) < 64:
                raise ConfigError(f"corpus tokenised to only {len(ids)} tokens")
            self._corpus_ids = np.asarray(ids, dtype=np.int64)
        return self._corpus_ids

    def ids(self, length: int, index: int) -> list[int]:
        if length < HEADER_TOKENS + 1:
            raise ConfigError(f"context length {length} is below the minimum of {HEADER_TOKENS + 1}")
        pool = self.corpus_ids()
        rng = _rng(self.seed, length, index)
        # Header ids come from the corpus's own tokens: valid for this vocabulary, but in an
        # order no other prompt shares, so no two prompts have a common cached prefix.
        header = rng.choice(pool, size=HEADER_TOKENS)
        body_n = length - HEADER_TOKENS
        if self.mode == "random":
            body = rng.choice(pool, size=body_n)
        else:
            start = int(rng.integers(0, len(pool)))
            reps = (start + body_n) // len(pool) + 1
            body = np.tile(pool, reps)[start : start + body_n]
        return [int(t) for t in np.concatenate([header, body])]

    def text(self, length: int, index: int) -> str:
        """Text that tokenises to exactly `length` tokens, found by bisection on characters.

        A text prompt must still be checked against the response's prompt_tokens: the server may
        add special tokens the tokenizer endpoint did not count."""
        base = corpus_text()
        rng = _rng(self.seed, length, index, "text")
        start = int(rng.integers(0, len(base)))
        header = f"[{index}:{int(rng.integers(1 << 30))}] "
        source = header + (base[start:] + " " + base) * (length // 200 + 2)
        lo, hi = 1, len(source)
        while lo < hi:  # smallest prefix with >= length tokens
            mid = (lo + hi) // 2
            if len(self.adapter.tokenize(source[:mid])) >= length:
                hi = mid
            else:
                lo = mid + 1
        text = source[:lo]
        n = len(self.adapter.tokenize(text))
        if n != length:
            raise ConfigError(f"cannot cut text to exactly {length} tokens (nearest: {n})")
        return text
