"""Random-weight llama-architecture GGUF models for the reference service, written with `gguf`.

Compute cost does not depend on weight values, so random weights give real timings with nothing
downloaded. Everything is deterministic from a seed. Speculative acceptance is controlled by how
the draft's weights relate to the target's:

- ``draft-identical``: the target's own weights, so greedy drafts are always accepted;
- ``draft-unrelated``: another seed, so drafts are almost never accepted;
- ``draft-mix-P``: the target with its output projection blended with an unrelated one at
  fraction P (0..1), for partial acceptance; the blend keeps the weights' variance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from perftests.errors import ConfigError
from perftests.reference.cache import cache_dir, locked

RECIPE = 2
TARGET_SEED = 1234
UNRELATED_SEED = 98765


@dataclass(frozen=True)
class ModelSpec:
    n_embd: int = 512
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 8
    n_ff: int = 1536
    head_dim: int = 0  # 0: n_embd // n_head. Set with more heads, it adds attention work per
    # token of context (a context-dependent slowdown) at little constant cost
    n_vocab: int = 4096
    n_ctx_train: int = 32768
    dtype: str = "f16"  # f16 | f32: f32 doubles the bytes read per token (a uniform slowdown)
    seed: int = TARGET_SEED

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    @property
    def n_params(self) -> int:
        d, q, kv = self.n_embd, self.hd * self.n_head, self.hd * self.n_head_kv
        per_layer = 2 * d * q + 2 * d * kv + 3 * d * self.n_ff + 2 * d
        return 2 * self.n_vocab * d + self.n_layer * per_layer + d


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary: specials, 256 byte-fallback tokens, then text pieces.

    Pieces are printable characters and letter pairs, with and without the word-start marker, so
    English text tokenises into a realistic ~3 characters per token. Scores favour longer pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE
    scores = [0.0] * len(tokens)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    pieces: list[str] = ["\u2581"] + [chr(c) for c in range(33, 127)]
    pieces += ["\u2581" + ch for ch in letters]
    pieces += [a + b for a in letters for b in letters]
    pieces += ["\u2581" + a + b for a in letters for b in letters]
    pieces += ["\u2581" + a + b + c for a in letters[:12] for b in letters[:12] for c in letters[:12]]
    for p in pieces:
        if len(tokens) >= n_vocab:
            break
        tokens.append(p)
        types.append(1)  # NORMAL
        scores.append(float(len(p)) - len(tokens) * 1e-6)  # longer first, then frequency order
    while len(tokens) < n_vocab:
        tokens.append(f"<unused{len(tokens)}>")
        types.append(5)  # UNUSED
        scores.append(-1e9)
    return tokens, scores, types


def _weights(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, ff, v = spec.n_embd, spec.n_ff, spec.n_vocab
    q, kv = spec.hd * spec.n_head, spec.hd * spec.n_head_kv
    std = 0.02

    def mat(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols), dtype=np.float32) * std

    # numpy shapes are ggml's ne reversed: token_embd has ne = {n_embd, n_vocab}.
    w: dict[str, np.ndarray] = {"token_embd.weight": mat(v, d)}
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[p + "attn_q.weight"] = mat(q, d)
        w[p + "attn_k.weight"] = mat(kv, d)
        w[p + "attn_v.weight"] = mat(kv, d)
        w[p + "attn_output.weight"] = mat(d, q)
        w[p + "ffn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[p + "ffn_gate.weight"] = mat(ff, d)
        w[p + "ffn_up.weight"] = mat(ff, d)
        w[p + "ffn_down.weight"] = mat(d, ff)
    w["output_norm.weight"] = np.ones(d, dtype=np.float32)
    # A larger output scale makes greedy argmax well separated, so drafts from the same weights
    # agree exactly with the target instead of flipping on rounding differences.
    w["output.weight"] = mat(v, d) * 10
    return w


def write_gguf(path: Path, spec: ModelSpec, weights: dict[str, np.ndarray], name: str) -> None:
    import gguf  # heavy import, only needed when a model is written

    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch="llama")
    writer.add_name(name)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.hd)
    if spec.head_dim:
        writer.add_key_length(spec.hd)
        writer.add_value_length(spec.hd)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = vocabulary(spec.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    # No implicit BOS: a prompt of L token ids must be exactly L tokens as the server counts them.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    for tname, arr in weights.items():
        if arr.ndim == 2 and spec.dtype == "f16":
            arr = arr.astype(np.float16)
        writer.add_tensor(tname, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)  # atomic: a killed writer never leaves a truncated model in the cache


_MIX = re.compile(r"^draft-mix-(0?\.\d+|1(\.0*)?|0)$")


def _with_overrides(name: str, spec: ModelSpec) -> tuple[str, ModelSpec]:
    """``target@n_ff=3072,dtype=f32`` -> ("target", spec with those fields): a changed model for
    injecting real regressions (a wider FFN costs the same extra at every context)."""
    if "@" not in name:
        return name, spec
    base, _, over = name.partition("@")
    fields = {f.name: f.type for f in dataclasses.fields(ModelSpec)}
    changes: dict[str, object] = {}
    for item in filter(None, over.split(",")):
        key, _, value = item.partition("=")
        if key not in fields or key == "seed":
            raise ConfigError(
                f"model '{name}': unknown field '{key}'; known: {', '.join(k for k in fields if k != 'seed')}"
            )
        try:
            changes[key] = value if key == "dtype" else int(value)
        except ValueError:
            raise ConfigError(f"model '{name}': {key} must be an integer, got {value!r}") from None
    if changes.get("dtype", spec.dtype) not in ("f16", "f32"):
        raise ConfigError(f"model '{name}': dtype must be f16 or f32")
    return base, replace(spec, **changes)  # type: ignore[arg-type]  # checked per field above


def model_path(name: str, spec: ModelSpec | None = None) -> Path:
    """Path of the named reference model, written on first use.

    Names: ``target``, ``draft-identical``, ``draft-unrelated``, ``draft-mix-P``, each optionally
    with ``@field=value,...`` overriding the model's shape (``target@n_ff=3072``)."""
    name, spec = _with_overrides(name, spec or ModelSpec())
    if name == "draft-identical":
        # The target's own file: identical weights by construction, and no second copy to write
        # (a 1.1B model is 2.2 GB).
        return model_path("target", spec)
    mix: float | None = None
    if name == "target":
        seed = spec.seed
    elif name == "draft-unrelated":
        seed = UNRELATED_SEED
    elif m := _MIX.match(name):
        seed, mix = spec.seed, float(m.group(1))
    else:
        raise ConfigError(
            f"unknown reference model '{name}': use target, draft-identical, "
            "draft-unrelated or draft-mix-P with 0 <= P <= 1"
        )
    # RECIPE changes whenever the way weights are made changes, so a cached file is never stale.
    shape = {k: v for k, v in asdict(spec).items() if not (k == "head_dim" and v == 0)}  # older keys stay
    key = json.dumps({**shape, "seed": seed, "mix": mix, "recipe": RECIPE}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    path = cache_dir() / "models" / f"{name}-{digest}.gguf"
    if path.exists():
        return path
    with locked(path):
        if not path.exists():
            weights = _weights(replace(spec, seed=seed), seed)
            if mix is not None:
                other = _weights(replace(spec, seed=UNRELATED_SEED), UNRELATED_SEED)
                # Only the output projection is blended: the draft's hidden states then match the
                # target's exactly, and agreement depends smoothly on P through the logits alone.
                # Blending every layer is chaotic (P=0.001 already scattered acceptance 0.2-0.5).
                a, b = np.sqrt(1.0 - mix), np.sqrt(mix)
                weights["output.weight"] = (a * weights["output.weight"] + b * other["output.weight"]).astype(
                    np.float32
                )
            write_gguf(path, spec, weights, f"perftests-{name}")
    return path
