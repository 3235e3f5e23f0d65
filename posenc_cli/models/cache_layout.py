"""What each layer of a model keeps in its attention cache: :class:`CacheLayout` and :func:`cache_layout`, read from a
config as transformers 5.x builds the model's cache (stdlib only).

Per layer (:class:`LayerCache`) the facts an engine's memory model needs, none of them a byte count:

* ``kind``: ``"full"`` attention (keys and values for every token), ``"sliding"`` (a window of ``window`` tokens),
  ``"chunked"`` (Llama 4's local attention, chunks of ``window`` tokens), ``"mla"`` (DeepSeek V2/V3, Kimi K2,
  MiniCPM3, ...: one latent of ``kv_lora_rank`` plus the ``rope_dim`` rotated key dims per token, no separate
  value: ``k_head_dim`` is their sum, 576 = 512 + 64 for DeepSeek-V3, ``v_head_dim`` 0), ``"shared"`` (reads the
  cache of layer ``shares``: Gemma 3n / Gemma 4 ``num_kv_shared_layers``), ``"state"`` (linear attention, state
  space or short convolution: fixed-size ``states`` per sequence, whatever the context) or ``"none"`` (no cache:
  a removed attention block, an MLP-only layer). A sliding layer of an MLA model (dots3) is ``"sliding"`` with
  ``mla`` set;
* ``kv_heads``, ``k_head_dim``, ``v_head_dim``: per token, the keys take ``kv_heads x k_head_dim`` elements and the
  values ``kv_heads x v_head_dim`` (head sizes as the model has them: an explicit ``head_dim``, Gemma 3's 256,
  Gemma 4's ``global_head_dim`` on full-attention layers);
* ``states``: per sequence, :class:`StateTensor` shapes (no batch axis, named as transformers' cache names them:
  ``conv_states.0``, ``recurrent_states.0``, MiniMax's ``linear_cache``) and their dtype when it is not the compute
  dtype (transformers keeps gated-delta-net and Mamba recurrent states in float32);
* ``mixer``: what the layer computes with (``"attention"``, ``"gated_delta_net"``, ``"kimi_delta"``, ``"mamba"``,
  ``"mamba2"``, ``"short_conv"``, ``"lightning"``; ``"attention+mamba2"`` for a hybrid layer running both, as
  Falcon-H1's do), ``"none"`` or ``"cross_attention"`` (Mllama: keys of the image tokens only, none for text);
* ``indexer_dim``: DeepSeek Sparse Attention's indexer keys per token (DeepSeek V3.2, GLM-5), cached beside the
  latent.

``CacheLayout.dtype`` is the compute dtype the config names (``dtype`` / ``torch_dtype``; None when it names none:
transformers then loads the weights' own dtype, which a caller gives). :meth:`CacheLayout.groups` groups equal
layers for reporting.

:func:`transformers_cache` gives the tensors transformers' default cache (what ``generate`` builds: a
``DynamicCache(config=...)``, or the model's own class) holds after a forward pass over ``tokens`` tokens, and
:func:`transformers_cache_bytes` their bytes: a sliding or chunked layer keeps its last ``window - 1`` tokens, states
do not grow, and transformers keeps MLA's latent as keys of ``kv_lora_rank`` and the rotated part as values of
``rope_dim``. ``tests/models/test_cache_layout.py`` checks both against the cache tensors of tiny random models of
every causal-LM model type that builds on a CPU (``tests/data/layer_cache.json``).

:func:`posenc_cli.models.gguf.caches.gguf_cache_layout` reads the same facts from a GGUF header as llama.cpp's
metadata states them (per-layer KV heads, key and value lengths, MLA's latent, the sliding pattern, recurrent layers
with their ``ssm.*`` sizes), without reading tensor data.

The layer types come from :mod:`posenc_cli.models.model_positions` (one reading of ``layer_types``, sliding
patterns and linear-attention layers), head sizes from :func:`~posenc_cli.models.config_keys.head_dim_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import declared_dtype, head_dim_of, text_config, with_class_defaults
from posenc_cli.models.layer_types import gemma4_global_head_dim, layer_types_of, no_rope_flags
from posenc_cli.models.model_types import generated_layer_types, text_kind

#: bytes per element of the dtypes a config names
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}

#: what a layer caches (see the module docstring)
CacheKind = Literal["full", "sliding", "chunked", "mla", "shared", "state", "none"]
KINDS: tuple[CacheKind, ...] = ("full", "sliding", "chunked", "mla", "shared", "state", "none")


class StateTensor(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """A fixed-size per-sequence state: its name, its shape without the batch axis, and its dtype (None: the compute
    dtype)."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None = None


class MlaDims(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """Multi-head latent attention: the latent's rank and the rotated key dims cached beside it."""

    kv_lora_rank: int
    rope_dim: int


class LayerCache(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """What one layer caches (see the module docstring for each field)."""

    kind: CacheKind
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None  # sliding window or attention chunk, in tokens
    mla: MlaDims | None = None
    shares: int | None = None  # the layer whose cache a "shared" layer reads
    mixer: str = "attention"
    states: tuple[StateTensor, ...] = ()
    indexer_dim: int = 0  # DSA (DeepSeek V3.2, GLM-5): the indexer's key size per token, cached beside the keys
    indexer_dtype: str | None = None  # None: the compute dtype
    ssm: SsmDims | None = None  # a GGUF's recurrent-layer sizes (engines size the states)

    @property
    def k_per_token(self) -> int:
        """Key elements per token (0 for a layer without a growing cache)."""
        return self.kv_heads * self.k_head_dim if self.kind in ("full", "sliding", "chunked", "mla") else 0

    @property
    def v_per_token(self) -> int:
        """Value elements per token (0 for MLA, whose latent is its values)."""
        return self.kv_heads * self.v_head_dim if self.kind in ("full", "sliding", "chunked") else 0


class LayerGroup(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """Equal layers: their shared cache facts (``shares`` dropped) and their indices."""

    cache: LayerCache
    layers: tuple[int, ...]


@dataclass
class CacheLayout:
    """What a model's layers cache, per layer, and the compute dtype."""

    model_type: str | None
    text_type: str
    dtype: str | None  # the compute dtype the config names (None: it names none)
    dtype_source: str
    layers: list[LayerCache]
    notes: list[str] = field(default_factory=list)
    nextn_layers: int = 0  # a GGUF's multi-token-prediction layers, past ``layers`` (llama.cpp caches no such layer)
    #: the config the layout was read from (None for a GGUF): an engine whose model classes read it otherwise than
    #: transformers (mlx-lm's own ``ModelArgs``) reads its keys from here
    config: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    #: the positions the model serves: ``max_position_embeddings`` as the config class holds it, a GGUF's
    #: ``context_length`` (None: neither names one)
    window: int | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def groups(self) -> list[LayerGroup]:
        """Equal layers grouped, in order of their first layer (a shared layer equal to others whatever it shares)."""
        found: dict[LayerCache, list[int]] = {}
        for i, layer in enumerate(self.layers):
            found.setdefault(layer._replace(shares=None), []).append(i)
        return [LayerGroup(cache, tuple(layers)) for cache, layers in found.items()]


class CacheTensor(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One tensor of transformers' cache: the layer, its name there, its shape (batch first) and dtype."""

    layer: int
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        return n


def _int(text: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _need(text: Mapping[str, Any], text_type: str, *keys: str) -> int:
    value = _int(text, *keys)
    if value is None:
        raise PosencError(f"{text_type}: the config gives no {' or '.join(keys)}, which its cache is sized by")
    return value


#: layer types as transformers' cache reads them, from the names some configs use
_TYPE_NAMES = {"mamba": "linear_attention", "attention": "full_attention", "M": "linear_attention",
               "*": "full_attention", "-": "mlp", "E": "moe"}


def layer_types(text: Mapping[str, Any], text_type: str, n: int | None) -> list[str]:
    """The per-layer types transformers' cache is built from: ``config.layer_types``, or what the class derives (a
    hybrid's block pattern, Qwen2's ``use_sliding_window``, Llama 4's chunked layers, the generated class rule), or
    else transformers' own fallback (a window or chunk size on the config applies to every layer)."""
    for key in ("layers_block_type", "hybrid_override_pattern"):  # Nemotron-H: a list, or one letter per layer
        pattern = text.get(key)
        if isinstance(pattern, (list, str)) and pattern and not isinstance(text.get("layer_types"), list):
            return [_TYPE_NAMES.get(t, t) for t in pattern]
    if n is None:
        raise PosencError(f"{text_type or 'the model'}: the config gives no layer count (num_hidden_layers)")
    kind = text_kind(text, text_type)
    found = layer_types_of(text, text_type, n)
    if found is None and text_type in _CLASS_LAYER_RULES:
        found = _CLASS_LAYER_RULES[text_type](text, n)
    if found is None and text_type in _PURE_STATE_SPACE:
        found = ["linear_attention"] * n
    if found is None and text_type == "jamba":
        period, offset = _int(text, "attn_layer_period") or 8, _int(text, "attn_layer_offset") or 4
        found = ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]
    if found is None and isinstance(text.get("attn_layer_indices"), list):  # Bamba
        found = ["full_attention" if i in text["attn_layer_indices"] else "linear_attention" for i in range(n)]
    if found is None and text.get("use_sliding_window") is not None and isinstance(text.get("max_window_layers"), int):
        # Qwen2's family: no window unless use_sliding_window, then from max_window_layers on
        window = text.get("sliding_window") if text.get("use_sliding_window") else None
        found = ["sliding_attention" if window is not None and i >= text["max_window_layers"] else "full_attention"
                 for i in range(n)]
    if found is None and text_type == "llama4_text":
        flags = no_rope_flags(text, text_type, n) or [1] * n
        found = ["chunked_attention" if f and text.get("attention_chunk_size") is not None else "full_attention"
                 for f in flags]
    if found is None:
        found = generated_layer_types(kind, n)
    if found is None:
        one = ("sliding_attention" if text.get("sliding_window") is not None else
               "chunked_attention" if text.get("attention_chunk_size") is not None else "full_attention")
        found = [one] * n
    return [_TYPE_NAMES.get(t, t) for t in found[:n]] + ["full_attention"] * (n - len(found))


#: Model types whose decoder layers each hold several attention blocks, each with its own cache entry (LongCat-Flash:
#: two MLA blocks per layer)
_CACHES_PER_LAYER = {"longcat_flash": 2}


def _kimi_linear_types(text: Mapping[str, Any], n: int) -> list[str]:
    """Kimi Linear: ``linear_attn_config``'s 1-indexed ``full_attn_layers`` and ``kda_layers``, else full attention
    on every fourth layer after the first."""
    linear = text.get("linear_attn_config")
    if isinstance(linear, Mapping) and isinstance(linear.get("full_attn_layers"), list):
        full = {int(i) - 1 for i in linear["full_attn_layers"]}
        return ["full_attention" if i in full else "linear_attention" for i in range(n)]
    return ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]


#: Layer types a config class derives from the layer count in code no generated rule holds (the last layer forced to
#: full attention, a dense head), when the file names none
_CLASS_LAYER_RULES = {
    "beam": lambda text, n: ["full_attention" if (i + 1) % 6 == 0 or i == n - 1 else "sliding_attention"
                             for i in range(n)],
    "flint": lambda text, n: ["full_attention" if i < 2 or i % 4 == 1 or i == n - 1 else "sliding_attention"
                              for i in range(n)],
    "kimi_linear": _kimi_linear_types,
}

#: Model types with no attention at all: every layer a state-space mixer
_PURE_STATE_SPACE = frozenset({"mamba", "falcon_mamba", "mamba2"})

#: Model types whose sliding layers have more KV heads than ``num_key_value_heads`` (MiMo-V2-Flash: twice as many)
_SLIDING_KV_TIMES = {"mimo_v2_flash": 2}

#: Model types whose DSA indexer keeps its keys in float32 whatever the compute dtype
_INDEXER_FLOAT32 = frozenset({"dots3_note_text"})


def _attention(text: Mapping[str, Any], text_type: str, lt: str, i: int) -> LayerCache:
    """An attention layer's heads and head sizes (MLA: the latent), and a DSA indexer's keys."""
    indexer = _int(text, "index_head_dim") if lt == "indexed_attention" else None
    sharing = text.get("indexer_types")
    if isinstance(sharing, list) and i < len(sharing) and sharing[i] == "shared":
        indexer = None  # HY-V4: this layer reuses the previous indexer's top-k and caches no indexer keys
    extra: dict[str, Any] = {}
    if indexer:
        extra = {"indexer_dim": indexer, "indexer_dtype": "float32" if text_type in _INDEXER_FLOAT32 else None}
    if isinstance(text.get("kv_lora_rank"), int) and isinstance(text.get("qk_rope_head_dim"), int):
        rank, rope = int(text["kv_lora_rank"]), int(text["qk_rope_head_dim"])
        return LayerCache("mla", 1, rank + rope, 0, mla=MlaDims(rank, rope), **extra)
    kind = text_kind(text, text_type)
    heads = _need(text, text_type, "num_attention_heads", "n_head", "n_heads", "attention_heads",
                  "decoder_attention_heads", "num_heads")
    kv = text.get("num_key_value_heads", text.get("n_kv_heads", text.get("num_kv_heads")))
    if isinstance(kv, list):
        kv = kv[i] if i < len(kv) else None
    if text.get("multi_query") is True:
        kv = 1
    kv_heads = int(kv) if isinstance(kv, int) and kv > 0 else heads
    if lt == "sliding_attention":
        kv_heads *= _SLIDING_KV_TIMES.get(text_type, 1)
    if kind.resolver == "gemma4" and lt == "full_attention":
        k_dim = gemma4_global_head_dim(text)
        global_kv = text.get("num_global_key_value_heads")
        if "per_layer_config" not in text and text.get("attention_k_eq_v") and isinstance(global_kv, int):
            kv_heads = global_kv  # Gemma 4 26B: its full-attention layers' own KV heads (keys serve as values)
    elif text_type == "zamba":  # its shared attention block's own head size
        k_dim = _need(text, text_type, "attention_head_dim")
    else:
        k_dim = head_dim_of(text, kind, text_type) or (_int(text, "hidden_size", "d_model") or 0) // heads
    v_dim = _int(text, "v_head_dim") or k_dim
    return LayerCache("full", kv_heads, k_dim, v_dim, **extra)


def cache_layout(cfg: Mapping[str, Any]) -> CacheLayout:
    """The cache facts of every layer of the text model a config describes, as transformers builds its cache."""
    text, text_type, _where = text_config(cfg)
    kind = text_kind(text, text_type)
    text = with_class_defaults(text, kind)
    n = _int(text, "num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
    types = layer_types(text, text_type, n)
    per_layer = _CACHES_PER_LAYER.get(text_type, 1)
    types = [t for t in types for _ in range(per_layer)]
    layers = [_layer(_layer_config(text, i), text_type, lt, i) for i, lt in enumerate(types)]
    mark_shared(text, types, layers)
    dtype, source = declared_dtype(cfg)
    if dtype is None:
        source = "the config names no dtype: transformers loads the weights' own"
    notes = []
    if any(x.mixer == "cross_attention" for x in layers):
        notes.append("cross-attention layers cache the keys and values of the image tokens, when given images: none "
                     "for text alone")
    window = text.get("max_position_embeddings")
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    return CacheLayout(str(cfg.get("model_type") or "") or None, text_type, dtype, source, layers, notes,
                       config=cfg, window=window)


def _layer_config(text: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    """Layer i's config: ``per_layer_config``'s entry for it (keyed by its index, zero-padded or not) over the rest
    (transformers' heterogeneous configs: dots3's sliding layers have their own ``kv_lora_rank``)."""
    per_layer = text.get("per_layer_config")
    if not isinstance(per_layer, Mapping):
        return text
    own = next((v for k, v in per_layer.items() if str(k).isdigit() and int(k) == i and isinstance(v, Mapping)), None)
    return {**text, **own} if own else text


_ATTENTION_TYPES = {"full_attention": "full", "indexed_attention": "full", "sliding_attention": "sliding",
                    "chunked_attention": "chunked"}


def _layer(text: Mapping[str, Any], text_type: str, lt: str, i: int) -> LayerCache:
    if lt in _ATTENTION_TYPES or lt in ("hybrid", "hybrid_sliding"):
        layer = _attention(text, text_type, lt, i)
        if lt in ("sliding_attention", "hybrid_sliding"):
            layer = layer._replace(kind="sliding", window=_need(text, text_type, "sliding_window"))
        elif lt == "chunked_attention":
            layer = layer._replace(kind="chunked", window=_need(text, text_type, "attention_chunk_size"))
        elif layer.kind != "mla":
            layer = layer._replace(kind="full")
        if lt.startswith("hybrid"):  # attention and a state-space mixer side by side (Falcon-H1)
            mixer, states = _states(text, text_type, lt)
            layer = layer._replace(mixer=f"attention+{mixer}", states=states)
        return layer
    if lt in ("linear_attention", "conv"):
        mixer, states = _states(text, text_type, lt)
        return LayerCache("state", mixer=mixer, states=states)
    if lt in ("no_attention", "moe", "mlp"):
        return LayerCache("none", mixer="none")
    if lt == "cross_attention":  # keys of the image tokens only: nothing for text
        return LayerCache("none", mixer="cross_attention")
    raise PosencError(f"{text_type}: posenc does not know what layers of type {lt!r} cache")


#: which state-space or linear-attention mixer a model type's state layers run
_GATED_DELTA_NET = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "lara_mini", "olmo_hybrid"})
_MAMBA = frozenset({"mamba", "falcon_mamba", "jamba", "zamba"})
_KIMI_DELTA = frozenset({"kimi_linear", "bailing_hybrid"})
_MAMBA2 = frozenset({"mamba2", "nemotron_h", "bamba", "granitemoehybrid", "falcon_h1"})
_SHORT_CONV = frozenset({"lfm2", "lfm2_moe", "lfm3"})
_LIGHTNING = frozenset({"minimax"})


def _states(text: Mapping[str, Any], text_type: str, lt: str) -> tuple[str, tuple[StateTensor, ...]]:
    """(mixer, its per-sequence states) of a state layer, with the shapes transformers' mixer code gives them."""
    def need(*keys: str) -> int:
        return _need(text, text_type, *keys)

    if text_type in _GATED_DELTA_NET:
        nk, nv = need("linear_num_key_heads"), need("linear_num_value_heads")
        dk, dv = need("linear_key_head_dim"), need("linear_value_head_dim")
        conv = StateTensor("conv_states.0", (2 * nk * dk + nv * dv, need("linear_conv_kernel_dim")))
        return "gated_delta_net", (conv, StateTensor("recurrent_states.0", (nv, dk, dv), "float32"))
    if text_type in _KIMI_DELTA:  # Kimi Delta Attention: short convolutions over q, k and v
        linear = text.get("linear_attn_config")
        if isinstance(linear, Mapping):  # the checkpoint's sub-dict, which the class reads these from
            text = {**text, "linear_num_heads": linear.get("num_heads", text.get("linear_num_heads")),
                    "linear_head_dim": linear.get("head_dim", text.get("linear_head_dim")),
                    "linear_conv_kernel_dim": linear.get("short_conv_kernel_size",
                                                         text.get("linear_conv_kernel_dim"))}
        heads, head_dim = need("linear_num_heads"), need("linear_head_dim")
        return "kimi_delta", (StateTensor("conv_states.0", (3 * heads * head_dim, need("linear_conv_kernel_dim"))),
                              StateTensor("recurrent_states.0", (heads, head_dim, head_dim), "float32"))
    if text_type in _MAMBA:
        inner = (need("mamba_expand") * need("hidden_size") if text_type in ("jamba", "zamba")
                 else need("intermediate_size"))
        kernel, state = need("conv_kernel", "mamba_d_conv"), need("state_size", "mamba_d_state")
        # Zamba splits the Mamba state into n_mamba_heads heads
        ssm = (inner, state) if text_type != "zamba" else (need("n_mamba_heads"), inner // need("n_mamba_heads"),
                                                            state)
        return "mamba", (StateTensor("conv_states.0", (inner, kernel)),
                         StateTensor("recurrent_states.0", ssm, "float32"))
    if text_type in _MAMBA2:
        heads = need("mamba_num_heads", "mamba_n_heads", "num_heads")
        head_dim = need("mamba_head_dim", "mamba_d_head", *(("head_dim",) if text_type == "mamba2" else ()))
        state, kernel = need("ssm_state_size", "mamba_d_state", "state_size"), need("conv_kernel", "mamba_d_conv")
        groups = need("n_groups", "mamba_n_groups")
        if text_type == "nemotron_h":
            inner = heads * head_dim
        elif text_type == "falcon_h1" and _int(text, "mamba_d_ssm"):
            inner = need("mamba_d_ssm")
        else:
            expand = text.get("mamba_expand", text.get("expand"))
            if not isinstance(expand, (int, float)):
                raise PosencError(f"{text_type}: the config gives no mamba_expand, which its cache is sized by")
            inner = int(expand * need("hidden_size"))
        return "mamba2", (StateTensor("conv_states.0", (inner + 2 * groups * state, kernel)),
                          StateTensor("recurrent_states.0", (heads, head_dim, state), "float32"))
    if text_type in _SHORT_CONV:
        return "short_conv", (StateTensor("conv_states.0", (need("hidden_size"), need("conv_L_cache"))),)
    if text_type in _LIGHTNING:
        heads, head_dim = need("num_attention_heads"), need("head_dim")
        return "lightning", (StateTensor("linear_cache", (heads, head_dim, head_dim)),)
    raise PosencError(f"{text_type}: posenc does not know the states its {lt} layers keep")


def mark_shared(text: Mapping[str, Any], types: list[str], layers: list[LayerCache]) -> None:
    """Gemma 3n / Gemma 4: the last ``num_kv_shared_layers`` layers read the cache of the last earlier layer of
    their type."""
    shared = _int(text, "num_kv_shared_layers") or 0
    n = len(layers)
    if shared <= 0:
        return
    first = n - shared
    for i in range(first, n):
        producer = next((j for j in range(first - 1, -1, -1) if types[j] == types[i]), None)
        if producer is None:
            raise PosencError(f"layer {i} ({types[i]}) shares the cache of an earlier layer of its type, and "
                              "there is none")
        layers[i] = layers[i]._replace(kind="shared", shares=producer)


def transformers_cache(layout: CacheLayout, tokens: int, batch: int = 1, dtype: str | None = None) -> list[CacheTensor]:
    """The tensors of transformers' default cache after a forward pass over ``tokens`` tokens (``batch`` rows), in
    the compute ``dtype`` (default: the config's)."""
    dtype = dtype or layout.dtype
    if dtype is None:
        raise PosencError("the config names no dtype (transformers then loads the weights' own): give one")
    if dtype not in DTYPE_BYTES:
        raise PosencError(f"dtype {dtype!r}: posenc knows {', '.join(DTYPE_BYTES)}")
    out: list[CacheTensor] = []
    for i, layer in enumerate(layout.layers):
        if layer.kind in ("full", "sliding", "chunked", "mla"):
            # DynamicSlidingWindowLayer keeps keys[..., -window + 1:, :]: the last window - 1 (all, for a window of 1)
            kept = tokens if layer.window is None or layer.window <= 1 else min(tokens, layer.window - 1)
            if layer.mla is not None:
                k, v = layer.mla.kv_lora_rank, layer.mla.rope_dim
            else:
                k, v = layer.k_head_dim, layer.v_head_dim
            out.append(CacheTensor(i, "keys", (batch, layer.kv_heads, kept, k), dtype))
            out.append(CacheTensor(i, "values", (batch, layer.kv_heads, kept, v), dtype))
            if layer.indexer_dim:
                out.append(CacheTensor(i, "indexer_keys", (batch, kept, layer.indexer_dim),
                                       layer.indexer_dtype or dtype))
        for state in layer.states:
            out.append(CacheTensor(i, state.name, (batch, *state.shape), state.dtype or dtype))
    return out


def transformers_cache_bytes(layout: CacheLayout, tokens: int, batch: int = 1, dtype: str | None = None) -> int:
    """Bytes of :func:`transformers_cache`: what ``generate`` holds after ``tokens`` tokens of context."""
    return sum(t.nbytes for t in transformers_cache(layout, tokens, batch, dtype))


# --- GGUF ---------------------------------------------------------------------------------------------------------

class SsmDims(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """A state-space or linear-attention layer's sizes as a GGUF gives them (``{arch}.ssm.*``): each engine sizes
    its own states from these."""

    conv_kernel: int | None
    inner_size: int | None
    state_size: int | None
    group_count: int | None
    time_step_rank: int | None
