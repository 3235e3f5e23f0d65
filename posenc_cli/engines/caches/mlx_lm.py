"""MLX-LM 0.32.2's caches (with mlx 0.32.4): what ``mlx_lm.generate`` holds after a prompt of N tokens, per layer, in
bytes as mlx-lm counts them (``nbytes`` of each cache: the arrays' logical sizes, which ``LRUPromptCache`` adds up).

How mlx-lm builds and grows them (``mlx_lm/models/cache.py``, ``mlx_lm/generate.py``):

* ``make_prompt_cache``: the model's own ``make_cache()`` when its ``Model`` class has one, else one ``KVCache`` per
  layer, or with ``--max-kv-size M`` one ``RotatingKVCache(max_size=M, keep=4)`` per layer. A model with its own
  ``make_cache`` (Llama, Gemma 3, gpt-oss, Qwen3.5, ...) ignores ``--max-kv-size``. A model without one (Qwen2/3,
  Mistral 3, Gemma 2, Phi-3, DeepSeek V3, ...) caches every layer in full, sliding layers too (the window is only in
  its mask).
* ``generate_step`` runs the prompt's first N - 1 tokens in calls of ``--prefill-step-size`` (2048) tokens, then the
  last one; after each call ``maybe_quantize_kv_cache`` turns every ``KVCache`` in the list whose offset reached
  ``--quantized-kv-start`` (5000) into a ``QuantizedKVCache`` when ``--kv-bits`` is given.
* ``KVCache.update_and_fetch``: a call of S tokens that does not fit grows the buffer by ``ceil(S / 256) * 256``
  cells, first cutting it back to the tokens held when that count is not a multiple of 256.
  ``QuantizedKVCache`` grows alike, and ``KVCache.to_quantized`` quantizes the whole buffer: the cells do not depend
  on when it was quantized. Per head and cell it holds ``dim * bits / 32`` uint32 words and a scale and a bias per
  ``--kv-group-size`` elements in the activation dtype (``mx.quantize``).
* ``RotatingKVCache(max_size, keep)`` (sliding layers): a call of S > 1 tokens keeps ``max_size - 1`` old tokens and
  appends all S (``_update_concat``: up to ``max_size - 1 + S`` cells), a single token grows the buffer by
  ``min(256, max_size - offset)`` cells up to ``max_size``, trimming it back to ``max_size`` (``_update_in_place``).
  ``to_quantized`` raises NotImplementedError, so ``--kv-bits`` fails once a rotating cache reaches
  ``--quantized-kv-start``.
* ``ChunkedKVCache(chunk)`` (Llama 4's local layers, ``llama4.py``: every layer but each fourth): before each call
  the model cuts it to its last ``chunk`` tokens (``maybe_trim_front``), then it grows as ``KVCache``. Never
  quantized (no ``to_quantized``), nor are ``ArraysCache`` and ``CacheList``.
* ``ArraysCache`` (linear attention, state space, short convolution): the convolution keeps ``kernel - 1`` inputs in
  the activation dtype; gated-delta-net (``gated_delta.py``) and Mamba-2 (``ssm.py``) states are float32, Mamba-1
  (``mamba.py``, ``jamba.py``) keeps its state in the activation dtype.
* MLA: DeepSeek V3's file family (``deepseek_v3``, ``kimi_k25``, ``kimi_vl``, ``glm4_moe_lite``, ``mistral4``)
  caches the normed latent as keys (1 x ``kv_lora_rank``) and the rotated key as values (1 x ``qk_rope_head_dim``),
  and its attention cannot read a quantized cache (``--kv-bits`` fails); ``deepseek_v2`` and ``minicpm3`` cache
  every head's full keys (``qk_nope_head_dim + qk_rope_head_dim``) and values. ``deepseek_v32`` and ``glm_moe_dsa``
  keep per layer a ``CacheList`` of the latent and the indexer's keys, stored as both keys and values of a
  ``KVCache`` of their own.

The activation dtype is the weights' (``mlx_lm.convert`` casts them to the config's ``torch_dtype``; ``load`` keeps
them): ``--dtype`` here, default the config's. The cost grows with the context when ``--prefill-step-size`` is a
multiple of 256 (the default 2048: a full cache holds the prompt rounded up to 256 cells); with other step sizes
mlx-lm's own growth is not monotone (calls of 300: 768 cells after 513 tokens, 556 after 514). One sequence
(``mlx_lm.generate``; the server's batched path keeps ``BatchKVCache`` objects, not modelled). Proven against
mlx-lm's own caches on mlx's CPU backend by ``tests/engines/test_memory_mlx_lm.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.engines.caches.mlx_lm_growth import STEP, Chunked, Growing, Rotating, cells_after, prompt_calls
from posenc_cli.engines.caches.model import (
    CacheGroup,
    Cost,
    EngineMemory,
    Extra,
    Lever,
    Setting,
    SettingValue,
    Unsupported,
)
from posenc_cli.engines.mlx_lm_files import model_file
from posenc_cli.models.cache_layout import DTYPE_BYTES

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout, LayerCache

VERSION = "0.32.2"
MLX_VERSION = "0.32.4"

# framework fact: mlx_lm/generate.py DEFAULT_PREFILL_STEP_SIZE, DEFAULT_QUANTIZED_KV_START, --kv-group-size 64
PREFILL_STEP_SIZE, QUANTIZED_KV_START, KV_GROUP_SIZE = 2048, 5000, 64
# framework fact: mlx 0.32.4 mx.quantize (affine): the bits and group sizes it takes (7 bits, group 16 or 256 raise)
KV_BITS, KV_GROUP_SIZES = (1, 2, 3, 4, 5, 6, 8), (32, 64, 128)
# framework fact: mlx_lm/models/cache.py make_prompt_cache: RotatingKVCache(max_size=max_kv_size, keep=4)
MAX_KV_KEEP = 4

#: Model files whose ``Model`` class has no ``make_cache`` (``make_prompt_cache`` gives them a ``KVCache`` per layer,
#: or a ``RotatingKVCache`` per layer with ``--max-kv-size``); the test checks the list against the installed package
PLAIN = frozenset("""
Klear apertus bailing_moe bitnet cohere dbrx deepseek deepseek_v2 deepseek_v3 dots1 ernie4_5 ernie4_5_moe exaone gemma
gemma2 glm glm4 glm4_moe glm4_moe_lite gpt2 gpt_bigcode gpt_neox gptj granite granitemoe helium hunyuan
hunyuan_v1_dense internlm2 internlm3 kimi_k25 kimi_vl lille-130m llama4_text mimo minicpm minicpm3 minimax mistral3
mistral4 mixtral nanochat nemotron olmo olmo2 olmoe openelm phi phi3 phi3small phimoe phixtral pixtral plamo qwen qwen2
qwen2_moe qwen2_vl qwen3 qwen3_moe qwen3_vl qwen3_vl_moe seed_oss smollm3 solar_open stablelm starcoder2 talkie
telechat3 youtu_llm
""".split())
#: Files (plain ones) caching MLA's latent and rotated key; files caching every head's expanded keys and values
LATENT_MLA = frozenset({"deepseek_v3", "kimi_k25", "kimi_vl", "glm4_moe_lite", "mistral4"})
EXPANDED_MLA = frozenset({"deepseek_v2", "minicpm3"})


class MlxCache(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One layer's cache as mlx-lm builds it.

    ``cache``: ``KVCache``, ``RotatingKVCache``, ``ChunkedKVCache``, ``ArraysCache`` or ``CacheList``; ``kind``: the
    report's word (full, sliding, chunked, mla, state, full+state); ``heads`` x ``k_dim`` / ``v_dim``: per cell;
    ``size``/``keep``: a rotating cache's ``max_size`` and ``keep``, a chunked one's chunk; ``states``: the
    ``ArraysCache`` arrays as (elements, dtype; None: the activation dtype); ``indexer``: DSA's indexer dim (a
    ``KVCache`` of its own holding it as keys and values); ``quantizable``: the list holds a bare ``KVCache``
    (``maybe_quantize_kv_cache`` converts it); ``refuses``: why ``--kv-bits`` fails on it ("" when it does not)."""

    kind: str
    cache: str
    heads: int = 0
    k_dim: int = 0
    v_dim: int = 0
    size: int = 0
    keep: int = 0
    states: tuple[tuple[int, str | None], ...] = ()
    indexer: int = 0
    quantizable: bool = False
    refuses: str = ""


NO_CACHE = MlxCache("none", "")


def _kv(layer: LayerCache, kind: str = "full") -> MlxCache:
    return MlxCache(kind, "KVCache", layer.kv_heads, layer.k_head_dim, layer.v_head_dim, quantizable=True)


def _rotating(layer: LayerCache, size: int, keep: int = 0) -> MlxCache:
    return MlxCache("sliding", "RotatingKVCache", layer.kv_heads, layer.k_head_dim, layer.v_head_dim, size, keep,
                    refuses="RotatingKVCache.to_quantized raises NotImplementedError")


def _text(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The dict a wrapper's language model reads its ``ModelArgs`` from (``text_config``), else the config."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, Mapping) else cfg


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _states(layer: LayerCache, module: str) -> tuple[tuple[int, str | None], ...]:
    """A state layer's ``ArraysCache`` arrays from transformers' state shapes: a convolution (``conv_states.*``,
    channels x kernel) keeps ``kernel - 1`` of its inputs (transformers keeps ``kernel``), in the activation dtype;
    the recurrent state keeps its element count, float32 but Mamba-1's (``mamba.py``, ``jamba.py``: the activation
    dtype)."""
    mixer = layer.mixer.removeprefix("attention+")  # Falcon-H1: attention beside Mamba-2
    if mixer not in ("gated_delta_net", "mamba", "mamba2", "short_conv") or not layer.states:
        raise Unsupported(f"posenc does not model the states mlx-lm's {module}.py keeps for {layer.mixer} layers")
    out: list[tuple[int, str | None]] = []
    for state in layer.states:
        if state.name.startswith("conv"):
            out.append((_elements(state.shape[:-1]) * (state.shape[-1] - 1), None))
        else:
            out.append((_elements(state.shape), None if mixer == "mamba" else "float32"))
    return tuple(out)


def _mla(layer: LayerCache, module: str, text: Mapping[str, Any]) -> MlxCache:
    """An MLA layer in a plain model file: the latent (DeepSeek V3's family) or every head expanded."""
    if module in LATENT_MLA and layer.mla is not None:
        return MlxCache("mla", "KVCache", 1, layer.mla.kv_lora_rank, layer.mla.rope_dim, quantizable=True,
                        refuses=f"{module}.py's attention reads the rotated keys as an array, not a quantized cache")
    if module in EXPANDED_MLA:
        heads = int(text.get("num_attention_heads", 32))
        k = int(text.get("qk_nope_head_dim", 128)) + int(text.get("qk_rope_head_dim", 64))
        v = (int(text["hidden_size"]) // heads if module == "minicpm3" else int(text.get("v_head_dim", 128)))
        return MlxCache("full", "KVCache", heads, k, v, quantizable=True)
    raise Unsupported(f"posenc does not model what mlx-lm's {module}.py caches for MLA layers")


def _plain(layout: CacheLayout, module: str, max_kv: int) -> list[MlxCache]:
    """``make_prompt_cache`` for a model file without ``make_cache``: a cache per layer, every attention layer in full
    (a ``RotatingKVCache(max_kv, keep=4)`` with ``--max-kv-size``)."""
    text = _text(layout.config or {})
    out = []
    for layer in layout.layers:
        if layer.kind in ("full", "sliding", "chunked"):
            cache = _kv(layer)
        elif layer.kind == "mla":
            cache = _mla(layer, module, text)
        elif layer.kind == "none":
            out.append(NO_CACHE)  # a cache the layer never fills
            continue
        else:
            raise Unsupported(f"posenc does not model mlx-lm's {module}.py for {layer.kind} layers ({layer.mixer})")
        if layer.indexer_dim:
            raise Unsupported(f"posenc does not model mlx-lm's {module}.py for DSA indexer layers")
        if max_kv:
            cache = cache._replace(cache="RotatingKVCache", kind="sliding" if cache.kind == "full" else cache.kind,
                            size=max_kv, keep=MAX_KV_KEEP, quantizable=False,
                            refuses="RotatingKVCache.to_quantized raises NotImplementedError (--max-kv-size)")
        out.append(cache)
    return out


def _pattern(period: int, n: int) -> list[bool]:
    """Sliding flags of a period: layer i global when ``i % period == period - 1``."""
    return [i % period != period - 1 for i in range(n)]


def _sliding_flags(module: str, text: Mapping[str, Any], n: int) -> tuple[list[bool], int]:
    """(which layers slide, the window) as each model file's ``make_cache`` reads its config."""
    types = text.get("layer_types")
    if module in ("gemma3", "gemma3_text"):
        return _pattern(int(text.get("sliding_window_pattern", 6)), n), int(text.get("sliding_window", 512))
    if module == "cohere2":
        return _pattern(int(text.get("sliding_window_pattern", 4)), n), int(text.get("sliding_window", 4096))
    if module == "exaone4":
        pattern = text.get("sliding_window_pattern") or ""
        return [bool(pattern) and pattern[i % len(pattern)] == "L" for i in range(n)], int(text.get("sliding_window")
                                                                                               or 0)
    if module in ("gemma4", "gemma4_text") and not isinstance(types, list):
        period = int(text.get("sliding_window_pattern", 5))
        return _pattern(period, n), int(text.get("sliding_window", 512))
    if module == "gpt_oss" and not isinstance(types, list):
        types = ["sliding_attention", "full_attention"] * (n // 2)
    if module == "olmo3" and not isinstance(types, list):
        return _pattern(4, n), int(text["sliding_window"])
    window = text.get("sliding_window")
    if window is None and module == "gpt_oss":
        window = 128
    flags = [isinstance(types, list) and i < len(types) and types[i] == "sliding_attention" for i in range(n)]
    return flags, int(window or 0)


#: Model files whose ``make_cache`` gives sliding layers a ``RotatingKVCache(max_size=window)`` (``keep=0``) and the
#: others a ``KVCache``; Gemma 4 caches only its first ``num_hidden_layers - num_kv_shared_layers`` layers
WINDOWED = frozenset({"llama", "ministral3", "gemma3", "gemma3_text", "cohere2", "exaone4", "gpt_oss", "olmo3",
                      "gemma4", "gemma4_text"})


def _windowed(layout: CacheLayout, module: str, max_kv: int) -> list[MlxCache]:
    text = _text(layout.config or {})
    n = len(layout.layers)
    flags, window = _sliding_flags(module, text, n)
    owners = n - int(text.get("num_kv_shared_layers", 20)) if module in ("gemma4", "gemma4_text") else n
    out = []
    for i, layer in enumerate(layout.layers):
        if i >= owners or layer.kind in ("shared", "none"):
            out.append(NO_CACHE)
        elif layer.kind not in ("full", "sliding"):
            raise Unsupported(f"posenc does not model mlx-lm's {module}.py for {layer.kind} layers")
        else:
            out.append(_rotating(layer, window) if flags[i] else _kv(layer))
    return out


def _llama4(layout: CacheLayout, module: str, max_kv: int) -> list[MlxCache]:
    """``llama4.py`` ``make_cache``: ``ChunkedKVCache(attention_chunk_size)`` but on each fourth layer."""
    chunk = int(_text(layout.config or {})["attention_chunk_size"])
    return [_kv(layer) if (i + 1) % 4 == 0 else
            MlxCache("chunked", "ChunkedKVCache", layer.kv_heads, layer.k_head_dim, layer.v_head_dim, chunk)
            for i, layer in enumerate(layout.layers)]


def _hybrid(layout: CacheLayout, module: str, max_kv: int) -> list[MlxCache]:
    """State layers an ``ArraysCache``, attention layers a ``KVCache``, MLP-only layers none (Qwen3-Next, Qwen3.5,
    Nemotron-H, LFM2, Mamba, Granite 4.0-H, Jamba, OLMo hybrid); Falcon-H1 a ``CacheList`` of both per layer."""
    text = _text(layout.config or {})
    interval = int(text.get("full_attention_interval", 4))
    state_layer = next((x for x in layout.layers if x.kind == "state"), None)
    attention = next((x for x in layout.layers if x.kind == "full"), None)
    out = []
    for i, layer in enumerate(layout.layers):
        if module in ("qwen3_next", "qwen3_5", "qwen3_5_moe", "prism_hadamard_qwen35") and layer.kind != "none":
            # is_linear = (layer_idx + 1) % full_attention_interval != 0, whatever layer_types says
            layer = (state_layer if (i + 1) % interval else attention) or layer
        if layer.kind == "state":
            out.append(MlxCache("state", "ArraysCache", states=_states(layer, module)))
        elif layer.kind == "full" and layer.states:  # Falcon-H1: attention and Mamba-2 side by side
            dim = int(text.get("head_dim") or 64)  # falcon_h1.py ModelArgs.head_dim = 64 (transformers: hidden / heads)
            out.append(_kv(layer, "full+state")._replace(cache="CacheList", k_dim=dim, v_dim=dim,
                               states=_states(layer, module), quantizable=False))
        elif layer.kind == "full":
            out.append(_kv(layer))
        elif layer.kind == "none":
            out.append(NO_CACHE)
        else:
            raise Unsupported(f"posenc does not model mlx-lm's {module}.py for {layer.kind} layers")
    return out


def _dsa(layout: CacheLayout, module: str, max_kv: int) -> list[MlxCache]:
    """``deepseek_v32.py`` ``make_cache``: ``CacheList(KVCache(), KVCache())`` per layer: the latent and the rotated
    key, and the indexer's keys (``update_and_fetch(k, k)``: held twice)."""
    out = []
    for layer in layout.layers:
        if layer.kind != "mla" or layer.mla is None:
            raise Unsupported(f"posenc does not model mlx-lm's {module}.py for {layer.kind} layers")
        out.append(MlxCache("mla", "CacheList", 1, layer.mla.kv_lora_rank, layer.mla.rope_dim,
                            indexer=layer.indexer_dim))
    return out


BUILDERS: dict[str, Callable[[CacheLayout, str, int], list[MlxCache]]] = {
    **dict.fromkeys(WINDOWED, _windowed), "llama4": _llama4, "deepseek_v32": _dsa, "glm_moe_dsa": _dsa,
    **dict.fromkeys(("qwen3_next", "qwen3_5", "qwen3_5_moe", "prism_hadamard_qwen35", "nemotron_h", "lfm2",
                     "lfm2_moe", "mamba", "mamba2", "granitemoehybrid", "jamba", "olmo_hybrid", "falcon_h1"),
                    _hybrid),
}


def mlx_caches(layout: CacheLayout, max_kv_size: int = 0) -> tuple[str, list[MlxCache]]:
    """(the model file, each layer's cache) as ``make_prompt_cache`` builds them; :class:`Unsupported` when mlx-lm
    has no file for the model type, or posenc does not model the one it has."""
    if layout.config is None:
        raise Unsupported("mlx-lm loads a model folder by its config.json's model_type (no GGUF)")
    module = model_file(layout.config)
    if module is None:
        raise Unsupported(f"mlx-lm {VERSION} has no model file for model_type {layout.config.get('model_type')!r} "
                          "(mlx_lm/models/, MODEL_REMAPPING)")
    if module in PLAIN:
        return module, _plain(layout, module, max_kv_size)
    build = BUILDERS.get(module)
    if build is None:
        raise Unsupported(f"posenc does not model the caches of mlx-lm's {module}.py (its own make_cache)")
    return module, build(layout, module, max_kv_size)


def _cells(cache: MlxCache, calls: list[tuple[int, int]]) -> int:
    if cache.cache == "RotatingKVCache":
        return cells_after(Rotating(cache.size, cache.keep), calls)
    if cache.cache == "ChunkedKVCache":
        return cells_after(Chunked(cache.size), calls)
    return cells_after(Growing(), calls)


# --- bytes -------------------------------------------------------------------------------------------------------

SETTINGS = (
    Setting("dtype", "--dtype", "auto", "str", ("auto", "float32", "float16", "bfloat16"),
            help="the weights' dtype, which the caches take (mlx_lm.convert --dtype; auto: the config's)"),
    Setting("max_kv_size", "--max-kv-size", 0, minimum=0,
            help="mlx_lm.generate's (the server has none): a RotatingKVCache of this many tokens (and the first 4) "
                 "per layer, for models without their own make_cache (0: not given)"),
    Setting("kv_bits", "--kv-bits", 0, choices=(0, *KV_BITS), minimum=0,
            help="quantize the KV caches to this many bits once the prompt reaches --quantized-kv-start (0: not "
                 "given)"),
    Setting("kv_group_size", "--kv-group-size", KV_GROUP_SIZE, choices=KV_GROUP_SIZES,
            help="elements per quantization scale and bias"),
    Setting("quantized_kv_start", "--quantized-kv-start", QUANTIZED_KV_START, minimum=0,
            help="the cache offset from which --kv-bits quantizes"),
    Setting("prefill_step_size", "--prefill-step-size", PREFILL_STEP_SIZE,
            help="prompt tokens per model call"),
)


def _cell_bytes(dim: int, act: int, bits: int, group: int) -> int:
    """Bytes of one head's cell: ``dim`` elements in the activation dtype, or quantized (``mx.quantize``: packed
    uint32 words, a scale and a bias per group in the activation dtype)."""
    return dim * act if not bits else dim * bits // 32 * 4 + 2 * (dim // group) * act


def _check_quantizable(caches: list[MlxCache], module: str, bits: int, group: int) -> None:
    """``--kv-bits``: mlx-lm fails once a cache it converts cannot be quantized (whatever the context: the setting
    cannot serve a prompt past ``--quantized-kv-start``)."""
    for cache in caches:
        if cache.refuses:
            raise Unsupported(f"mlx-lm {VERSION} fails with --kv-bits on this model ({module}.py) once the prompt "
                              f"reaches --quantized-kv-start: {cache.refuses}")
        for dim in (cache.k_dim, cache.v_dim) if cache.quantizable else ():
            if dim % group:
                raise Unsupported(f"mlx-lm {VERSION} fails with --kv-bits on this model once the prompt reaches "
                                  f"--quantized-kv-start: mx.quantize needs the head size ({dim}) to be a multiple "
                                  f"of --kv-group-size {group}")


def _layer_bytes(cache: MlxCache, cells: int, act: int, quantized: bool, bits: int, group: int) -> tuple[int, ...]:
    """(key bytes, value bytes, state bytes) of one layer."""
    q = bits if quantized and cache.quantizable else 0
    k = cache.heads * cells * _cell_bytes(cache.k_dim, act, q, group)
    v = cache.heads * cells * _cell_bytes(cache.v_dim, act, q, group)
    if cache.indexer:  # the indexer's own KVCache, grown alike, holding its keys as keys and as values
        k += cells * cache.indexer * act
        v += cells * cache.indexer * act
    states = sum(n * (DTYPE_BYTES[dtype] if dtype else act) for n, dtype in cache.states)
    return k, v, states


def _type_label(cache: MlxCache, dtype: str, quantized: bool, bits: int, group: int) -> str:
    if quantized and cache.quantizable:
        return f"q{bits} (group {group}, {dtype} scales and biases)"
    return dtype if cache.heads else ""


def _dtype(layout: CacheLayout, settings: Mapping[str, SettingValue]) -> tuple[str, list[str]]:
    dtype = str(settings["dtype"])
    if dtype != "auto":
        return dtype, []
    if layout.dtype is not None:
        return layout.dtype, []
    return "bfloat16", ["the config names no dtype: bfloat16 assumed (the caches take the weights' dtype)"]


def _notes(module: str, caches: list[MlxCache], layout: CacheLayout, s: Mapping[str, SettingValue],
           quantized: bool) -> list[str]:
    notes = [f"mlx_lm.generate's caches after the prompt (mlx-lm {VERSION}, {module}.py); generation grows full "
             f"caches {STEP} cells at a time"]
    whole = sum(1 for x, c in zip(layout.layers, caches, strict=True)
                if x.kind in ("sliding", "chunked") and c.cache in ("KVCache", "CacheList"))
    if whole:
        why = "it has no make_cache" if module in PLAIN else "its make_cache does not read them as windowed"
        notes.append(f"{whole} layers transformers windows keep every token in mlx-lm ({module}.py: {why}; the "
                     "window is only in the mask)")
    if s["max_kv_size"] and module not in PLAIN:
        notes.append(f"--max-kv-size is ignored: {module}.py makes its own caches (make_cache)")
    if s["max_kv_size"] and module in PLAIN:
        notes.append(f"--max-kv-size {s['max_kv_size']}: every layer keeps the first {MAX_KV_KEEP} tokens and the "
                     "last ones only: the model no longer sees the whole context")
    if s["kv_bits"] and not quantized:
        notes.append(f"--kv-bits: nothing quantized below --quantized-kv-start ({s['quantized_kv_start']} tokens)")
    if quantized and any(x.heads and not x.quantizable for x in caches):
        notes.append("--kv-bits leaves ChunkedKVCache and CacheList caches unquantized (no to_quantized)")
    return notes


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The bytes of mlx-lm's caches after ``mlx_lm.generate`` prefills a prompt of ``ctx`` tokens, per group of equal
    layers (``nbytes``: keys and values, ``ArraysCache`` states apart)."""
    s = dict(settings)
    bits, group = int(s["kv_bits"]), int(s["kv_group_size"])
    module, caches = mlx_caches(layout, int(s["max_kv_size"]))
    if bits:
        _check_quantizable(caches, module, bits, group)
    dtype, notes = _dtype(layout, s)
    act = DTYPE_BYTES[dtype]
    calls = prompt_calls(ctx, int(s["prefill_step_size"]))
    quantized = bool(bits) and ctx >= int(s["quantized_kv_start"])
    found: dict[MlxCache, list[int]] = {}
    for i, cache in enumerate(caches):
        found.setdefault(cache, []).append(i)
    groups = []
    for cache, members in found.items():
        if cache.kind == "none":
            continue
        cells = _cells(cache, calls) if cache.heads else 0
        k, v, states = _layer_bytes(cache, cells, act, quantized, bits, group)
        states = states if calls else 0  # an ArraysCache holds nothing before the first call
        label = _type_label(cache, dtype, quantized, bits, group)
        size = f"(max_size={cache.size}, keep={cache.keep})" if cache.cache == "RotatingKVCache" else (
            f"(chunk {cache.size})" if cache.cache == "ChunkedKVCache" else "")
        note = ("QuantizedKVCache" if quantized and cache.quantizable else cache.cache) + size
        groups.append(CacheGroup(cache.kind, len(members), cells, k * len(members), v * len(members),
                                 states * len(members), label, label, note))
    allocated = max((g.cells for g in groups if g.kind in ("full", "mla", "full+state")), default=0)
    extras = (Extra("prefill activations", None,
                    f"each prompt call of --prefill-step-size ({s['prefill_step_size']}) tokens computes logits for "
                    "every token of the call and the attention over the cache: not modelled"),)
    notes += _notes(module, caches, layout, s, quantized)
    return Cost("mlx-lm", ctx, allocated, 1, dict(s, dtype=dtype), tuple(groups), extras, tuple(notes))


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """Quantized caches (8 bits, then 4), then a rotating cache for every layer (a window: the model no longer sees
    the whole context; only models without their own make_cache take it)."""
    out: list[Lever] = []
    for bits in (8, 4):
        if not settings.get("kv_bits") or int(settings["kv_bits"]) > bits:
            out.append((f"--kv-bits {bits}", {"kv_bits": bits}))
    if not settings.get("max_kv_size"):
        out.append(("--max-kv-size 4096 (keeps the first 4 and the last 4096 tokens: the model no longer sees the "
                    "whole context; models with their own make_cache ignore it)", {"max_kv_size": 4096}))
    return out


MEMORY = EngineMemory(
    "mlx-lm", VERSION, f"proven against mlx-lm {VERSION}'s own caches on mlx {MLX_VERSION}'s CPU backend (nbytes)",
    SETTINGS, cost, levers,
    notes=("one sequence, as mlx_lm.generate runs it; the server's batched requests are not modelled",))
