"""Which kind of attention each layer of a config runs, as the config class builds it: ``layer_types`` (legacy names
mapped), the patterns classes derive (Gemma 3/4, OLMo 3, Cohere 2, Qwen3-Next/3.5, EXAONE 4, ...), removed attention
blocks, the layers without RoPE (``no_rope_layers``), and Gemma 4's full-attention head size. Read by
:mod:`posenc_cli.models.model_positions` (positions per layer group) and :mod:`posenc_cli.models.cache_layout` (what
each layer caches), which ``posenc memory`` loads without the rest of the position reader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.model_types import kind_of
from posenc_cli.models.value_checks import is_number

#: Model types whose config's ``no_rope_layers`` (1 = rotates; from ``no_rope_layer_interval``, default 4, when
#: absent) picks the layers without RoPE.
NO_ROPE_LAYERS_TYPES = frozenset({"llama4_text", "smollm3", "mistral_large4_text"})

LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention", "sliding": "sliding_attention",
                       "full": "full_attention"}


def layer_types_of(text: Mapping[str, Any], text_type: str, n: int | None) -> list[str] | None:
    """The per-layer attention types the config class builds (None when the config gives no layer count)."""
    given = text.get("layer_types")
    if isinstance(given, list) and all(isinstance(t, str) for t in given):
        types = [LEGACY_LAYER_TYPES.get(t) or t for t in given]
        if types and kind_of(text_type).resolver == "gemma4":
            types[-1] = "full_attention"  # Gemma4TextConfig forces its last layer to full attention, given or not
        return types
    blocks = text.get("block_configs")
    if isinstance(blocks, list) and all(isinstance(b, Mapping) for b in blocks):
        # DeciLM / Nemotron-NAS: a block whose attention is removed (no_op) or replaced by a linear layer
        def attends(block: Mapping[str, Any]) -> bool:
            attn = block.get("attention")
            return not (isinstance(attn, Mapping) and (attn.get("no_op") or attn.get("replace_with_linear")))

        return ["full_attention" if attends(b) else "no_attention" for b in blocks]
    if n is None:
        return None
    cycle = text.get("block_types")
    if text_type == "recurrent_gemma" and isinstance(cycle, list) and cycle and all(isinstance(b, str) for b in cycle):
        return [str(cycle[i % len(cycle)]) for i in range(n)]  # the class repeats its block pattern
    resolver = kind_of(text_type).resolver
    if resolver in ("gemma3", "gemma4"):
        pattern = text.get("sliding_window_pattern", text.get("_sliding_window_pattern", 6))
        pattern = pattern if isinstance(pattern, int) and pattern > 0 else 6
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        if resolver == "gemma4":
            types[-1] = "full_attention"
        return types
    if text_type == "olmo3":
        return ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)]
    if text_type in ("cohere2", "cohere2_moe"):
        # Cohere2Config: a (legacy) sliding_window_pattern, default 4; Cohere2-MoE's first_k_dense_replace dense
        # prefix layers follow prefix_dense_sliding_window_pattern (default 1: all full attention)
        pattern, prefix = text.get("sliding_window_pattern", 4), text.get("prefix_dense_sliding_window_pattern", 1)
        k = int(text.get("first_k_dense_replace") or 0) if text_type == "cohere2_moe" else 0
        if not all(isinstance(v, int) and v > 0 for v in (pattern, prefix)):
            return None
        return (["sliding_attention" if (i + 1) % prefix else "full_attention" for i in range(min(k, n))]
                + ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n - min(k, n))])
    if text_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        interval = text.get("full_attention_interval", 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise PosencError(f"full_attention_interval must be a whole number of at least 1 (every Nth layer is full "
                              f"attention), got {interval!r}")
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if text_type == "exaone4":
        pattern = text.get("sliding_window_pattern", 4)
        if text.get("sliding_window") is None or not isinstance(pattern, int) or pattern <= 0:
            return ["full_attention"] * n
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if text_type == "mllama_text_model":
        cross = set(text.get("cross_attention_layers") or [])
        return ["cross_attention" if i in cross else "full_attention" for i in range(n)]
    if text_type == "deepseek_v4":
        ratios = text.get("compress_ratios")
        if isinstance(ratios, list):
            names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
            return [names.get(r, "compressed_sparse_attention") for r in ratios[:n]]
    return None


def no_rope_flags(text: Mapping[str, Any], text_type: str, n: int | None) -> list[int] | None:
    """Llama 4 / SmolLM3 / Mistral Large 4 ``no_rope_layers``: 1 where the layer rotates, 0 where it uses no
    positions; MUSE's
    ``layer_rope_theta``: 0 where the model passes the layer no position embeddings."""
    thetas = text.get("layer_rope_theta")
    if isinstance(thetas, list) and all(is_number(t) for t in thetas) and n is not None:
        return [int(bool(t)) for t in thetas]
    if text_type not in NO_ROPE_LAYERS_TYPES or n is None:
        return None
    flags = text.get("no_rope_layers")
    # Llama 4 replaces an empty list by the interval's; SmolLM3 and Mistral Large 4 keep what is given
    if isinstance(flags, list) and (flags or text_type != "llama4_text"):
        return [int(bool(f)) for f in flags]
    interval = text.get("no_rope_layer_interval", 4)
    return [int((i + 1) % interval != 0) for i in range(n)]


def gemma4_global_head_dim(text: Mapping[str, Any]) -> int:
    """The head dim of Gemma 4's full-attention layers: ``global_head_dim`` (a re-saved config keeps it per layer
    index)."""
    global_dim = text.get("global_head_dim", 512)
    per_layer = text.get("per_layer_config")
    if isinstance(per_layer, Mapping):
        dims = [v.get("head_dim") for v in per_layer.values() if isinstance(v, Mapping) and v.get("head_dim")]
        global_dim = dims[0] if dims else global_dim
    if isinstance(global_dim, bool) or not isinstance(global_dim, int) or global_dim < 2:
        raise PosencError(f"global_head_dim must be a whole number of at least 2 (the head size of Gemma 4's "
                          f"full-attention layers), got {global_dim!r}")
    return int(global_dim)
