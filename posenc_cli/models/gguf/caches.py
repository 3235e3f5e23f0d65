"""What each layer of a GGUF model caches, from its header alone, as llama.cpp's metadata states it: the
:class:`~posenc_cli.models.cache_layout.CacheLayout` of :func:`gguf_cache_layout` (stdlib; no tensor data is read)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import CacheLayout, LayerCache, MlaDims, SsmDims, mark_shared
from posenc_cli.models.gguf.header import Skipped, read_header, starts_with_gguf_magic

#: the ``{arch}.`` keys read from a GGUF for its cache facts
_GGUF_KEYS = ("context_length", "block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
              "attention.key_length", "attention.value_length", "attention.kv_lora_rank", "rope.dimension_count",
              "attention.sliding_window", "attention.sliding_window_pattern", "full_attention_interval",
              "attention.shared_kv_layers", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size",
              "ssm.group_count", "ssm.time_step_rank", "nextn_predict_layers", "feed_forward_length",
              "attention.key_length_swa", "attention.value_length_swa")
_GGUF_SUFFIXES = tuple("." + key for key in _GGUF_KEYS)

#: llama.cpp architectures whose every layer is recurrent (no attention at all)
_GGUF_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})

#: llama.cpp architectures that set a sliding-window period in code (``hparams.set_swa_pattern(n)`` in their
#: ``src/models`` loader: layer il slides when ``il % n < n - 1``) when the file names no pattern
_GGUF_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "gpt-oss": 2, "exaone4": 4, "llama4": 4}

#: llama.cpp architectures whose layers without KV heads are recurrent only when they have no feed-forward either
#: (``models/nemotron-h.cpp``: the others are MLP-only layers, with no cache)
_GGUF_MLP_LAYERS = frozenset({"nemotron_h", "nemotron_h_moe"})


def gguf_cache_layout(path: str | os.PathLike[str], label: str | None = None) -> CacheLayout:
    """The cache facts of every layer of a GGUF model, from its header alone (stdlib: no tensor data is read).

    Per layer llama.cpp's own metadata: ``attention.head_count_kv`` (a per-layer array where layers differ; 0 for a
    recurrent or convolution layer), ``key_length`` / ``value_length`` (default ``embedding_length / head_count``),
    MLA's ``kv_lora_rank`` with ``rope.dimension_count`` (one 576-wide latent for DeepSeek-V3, no V), the sliding
    window with ``sliding_window_pattern`` (bools, or a period) or the architecture's period in llama.cpp's code,
    ``full_attention_interval`` (Qwen3-Next, Qwen3.5: the other layers recurrent), and ``ssm.*`` sizes on recurrent
    layers (:class:`SsmDims`; their states are the engine's to size). No dtype: the cache's is the engine's choice.
    As llama.cpp reads them (``src/models/*.cpp``): the last ``nextn_predict_layers`` blocks, the multi-token-prediction
    head, are left out (:attr:`CacheLayout.nextn_layers`; the main context caches ``n_layer()`` layers); Nemotron-H's
    layers without KV heads are Mamba2 layers only without a ``feed_forward_length`` (else MLP-only, no cache);
    Llama 4 chunks 8192 tokens; every Falcon-H1 layer holds attention and a Mamba2 state; ``key_length_swa``.
    """
    label = label or str(path)
    if not starts_with_gguf_magic(Path(path), label):
        raise PosencError(f"{label}: not a readable GGUF file (it does not start with the GGUF magic bytes)")
    fields = read_header(path, label, lambda k: k == "general.architecture" or k.endswith(_GGUF_SUFFIXES)).fields
    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise PosencError(f"{label}: the GGUF file has no general.architecture, so its keys cannot be found")

    def get(key: str) -> Any:
        value = fields.get(f"{arch}.{key}")
        if isinstance(value, Skipped):
            raise PosencError(f"{label}: GGUF key {arch}.{key} holds {value}")
        return value

    n_all = get("block_count")
    if not isinstance(n_all, int) or n_all <= 0:
        raise PosencError(f"{label}: GGUF key {arch}.block_count is missing or not a positive integer")
    nextn = get("nextn_predict_layers")
    nextn = nextn if isinstance(nextn, int) and 0 <= nextn < n_all else 0
    n = n_all - nextn  # llama.cpp's n_layer(): its main context caches these (the nextn layers are the MTP head's)

    def per_layer(key: str, default: int | None) -> list[int | None]:
        value = get(key)
        if isinstance(value, list):
            if len(value) != n_all:
                raise PosencError(f"{label}: GGUF key {arch}.{key} has {len(value)} entries for {n_all} layers")
            return [int(v) for v in value[:n]]
        return [int(value) if isinstance(value, int) else default] * n

    heads = per_layer("attention.head_count", None)
    kv_heads = per_layer("attention.head_count_kv", None)
    embd = get("embedding_length")
    window = get("attention.sliding_window")
    if arch == "llama4":  # models/llama4.cpp: chunks of 8192 tokens unless the file's window is 0, whatever it names
        window = None if window == 0 else 8192
    pattern = get("attention.sliding_window_pattern")
    sliding, note = _gguf_sliding(arch, n, window, pattern[:n] if isinstance(pattern, list) else pattern)
    ff = per_layer("feed_forward_length", 0)
    interval = get("full_attention_interval")
    ssm = SsmDims(*(get(f"ssm.{k}") for k in ("conv_kernel", "inner_size", "state_size", "group_count",
                                               "time_step_rank")))
    rank, rope = get("attention.kv_lora_rank"), get("rope.dimension_count")
    layers: list[LayerCache] = []
    for il in range(n):
        h, kv = heads[il], kv_heads[il] if kv_heads[il] is not None else heads[il]
        recurrent = (arch in _GGUF_RECURRENT or kv == 0
                     or (isinstance(interval, int) and interval > 0 and (il + 1) % interval != 0))
        if recurrent:  # Nemotron-H: no KV heads but a feed-forward is an MLP-only layer
            mlp = kv == 0 and arch in _GGUF_MLP_LAYERS and ff[il]
            layers.append(LayerCache("none", mixer="none") if mlp else LayerCache("state", mixer=arch, ssm=ssm))
            continue
        if isinstance(rank, int) and rank > 0 and isinstance(rope, int):
            layers.append(LayerCache("mla", 1, rank + rope, 0, mla=MlaDims(rank, rope)))
            continue
        if not h or not kv:
            raise PosencError(f"{label}: GGUF layer {il} has no attention.head_count(_kv)")
        per_head, swa = embd // h if isinstance(embd, int) else None, sliding[il]  # sliding layers' own (Gemma 4)
        k = (swa and get("attention.key_length_swa")) or get("attention.key_length") or per_head
        v = (swa and get("attention.value_length_swa")) or get("attention.value_length") or per_head or k
        if not isinstance(k, int) or not isinstance(v, int):
            raise PosencError(f"{label}: GGUF gives no attention.key_length nor embedding_length")
        layer = LayerCache("full", kv, k, v)
        if sliding[il] and isinstance(window, int):
            layer = layer._replace(kind="chunked" if arch == "llama4" else "sliding", window=window)
        if arch == "falcon-h1":  # every layer runs attention and Mamba2 side by side (models/falcon-h1.cpp)
            layer = layer._replace(mixer="attention+mamba2", ssm=ssm)
        layers.append(layer)
    shared = get("attention.shared_kv_layers")
    if isinstance(shared, int) and shared > 0:
        types = ["sliding" if s else "full" for s in sliding]
        mark_shared({"num_kv_shared_layers": shared}, types, layers)
    window = get("context_length")
    return CacheLayout(None, arch, None, "a GGUF names no compute dtype: the engine picks its cache types", layers,
                       [note] if note else [], nextn, window=window if isinstance(window, int) and window > 0 else None)


def _gguf_sliding(arch: str, n: int, window: Any, pattern: Any) -> tuple[list[bool], str | None]:
    """Which layers slide, and a note when the file does not say: none without a window; else the file's pattern
    (one bool per layer, or a period), else the architecture's period in llama.cpp's code, else every layer."""
    if not isinstance(window, int) or window <= 0:
        return [False] * n, None
    if isinstance(pattern, list) and len(pattern) == n:
        return [bool(p) for p in pattern], None
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return [il % pattern < pattern - 1 for il in range(n)], None
    period = _GGUF_SWA_PERIOD.get(arch)
    if period is None:
        return [True] * n, (f"{arch}: the file names a sliding window but no pattern: read as every layer sliding "
                            "(llama.cpp's code for the architecture decides)")
    return [il % period < period - 1 for il in range(n)], (
        f"{arch}: sliding layers by llama.cpp's period {period} for the architecture (the file names no pattern)")
