"""llama.cpp's caches, as llama-cpp-python 0.3.36 vendors it (llama.cpp ``0c1e57098``), with llama-server's defaults
(stdlib only). Units: bytes; cells are token slots per layer and per stream.

What ``llama_context`` allocates for a context (``src/llama-context.cpp``, ``llama_context`` ctor, and
``llama_model::create_memory`` in ``src/llama-model.cpp``), per layer:

* **Padding and streams.** ``n_ctx = GGML_PAD(-c, 256)``. A unified cache (``--kv-unified``) is one stream of
  ``n_ctx_seq = n_ctx`` cells that every slot shares; otherwise ``n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256)`` cells
  in each of ``n_seq_max`` streams. ``n_batch = min(-c, --batch-size)``, ``n_ubatch = min(n_batch, --ubatch-size)``
  (before padding).
* **K and V** (``src/llama-kv-cache.cpp``, ``llama_kv_cache`` ctor): per layer with a cache, K is
  ``[n_embd_k_gqa(il), cells, streams]`` of ``--cache-type-k`` and V ``[n_embd_v_gqa(il), cells, streams]`` of
  ``--cache-type-v``; without flash attention V is stored transposed and every layer's V is padded to the widest
  layer's (``n_embd_v_gqa_max``, where widths differ). MLA (DeepSeek V2/V3, Kimi K2, ...) keeps one K of
  ``kv_lora_rank + rope`` dims (1 head: the converter writes ``key_length`` 576 and ``head_count_kv`` 1 for DeepSeek-V3)
  and no V at all (``has_v = !is_mla``); transformers keeps the same latent as keys and the rope part as values.
  A row of n elements costs ``n / block x block bytes`` (``ggml_row_size``; :data:`CACHE_TYPES`).
* **Sliding windows** (``src/llama-kv-cache-iswa.cpp``): the sliding layers get their own cache of
  ``GGML_PAD(min(n_ctx_seq, n_swa x (n_seq_max if unified else 1) + n_ubatch), 256)`` cells, or ``n_ctx_seq`` with
  ``--swa-full``. Which layers slide is llama.cpp's choice per architecture (``src/models/*.cpp``): the sliding layers
  of a config are kept only for the architectures whose llama.cpp loader sets a window (:data:`SWA_TYPES`); any other
  (Mistral 7B v0.1, Qwen2 with ``use_sliding_window``, Phi-3, whose loader turns its window off) caches every token.
  Llama 4's chunks are 8192 tokens in llama.cpp whatever the config says.
* **Recurrent states** (``src/llama-memory-recurrent.cpp``, sizes from ``src/llama-hparams.cpp``): f32, per recurrent
  layer ``n_embd_r`` (the convolution state without its oldest column: ``(d_conv - 1) x channels``) and ``n_embd_s``
  (the SSM or delta-rule state) per row, ``max(1, n_seq_max) x (1 + n_rs_seq)`` rows (``n_rs_seq``: rollback rows
  for MTP drafting, 0 in llama-server unless a speculative MTP draft is asked for). Hybrids
  (``llama_memory_hybrid[_iswa]``) hold both.
* **No cache**: layers that read another's (Gemma 3n/4 ``shared``), MLP-only layers, and a GGUF's MTP (nextn) layers.

llama-server's defaults (``common/common.h``, ``common/arg.cpp``, ``tools/server/server.cpp``): ``-c 0`` (the model's
training context), ``--parallel -1`` (auto: 4 slots **and** a unified cache, whatever ``--kv-unified`` says), f16 K and
V, ``--flash-attn auto``, no ``--swa-full``, ``--batch-size 2048``, ``--ubatch-size 512`` (``--fit``, on by default,
changes ``-c`` only when it is 0: ``common/fit.cpp``). A quantized V needs flash
attention: ``llama_init_from_model`` turns ``auto`` on for it and refuses ``off``; with flash attention a quantized
type's block (32) must divide every layer's head size; MLA needs the same K and V types.

**The context asked** (posenc's ``ctx``) is what each slot can reach: with a unified cache ``-c ctx`` (one pool of ctx
cells the slots share: one sequence of ctx at a time), without it ``-c ctx x --parallel`` (llama-server splits ``-c``
across the slots). :func:`cost` says which ``-c`` that is.

Proven against llama.cpp's own log (``llama_kv_cache: size = ...`` and ``llama_memory_recurrent: size = ...``, every
printed figure within its rounding) on GGUFs made by llama.cpp's converter: ``tests/engines/test_memory_llamacpp.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

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
from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.header import GGML_BLOCKS, GGML_TYPE_NAMES

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout, LayerCache

ENGINE = "llama.cpp"
VERSION = "llama-cpp-python 0.3.36 (llama.cpp 0c1e57098, llama-server)"
BASIS = "proven against llama.cpp's log (llama-cpp-python 0.3.36) on converter-made GGUFs"

# framework fact: GGML_PAD(n_ctx, 256) in the llama_context ctor and the SWA cache (llama-kv-cache-iswa.cpp)
PAD = 256
# framework fact: LLAMA_MAX_SEQ (src/llama-cparams.h)
MAX_SEQ = 256
# framework fact: the cache types llama-server takes (common/arg.cpp kv_cache_types), in its order; each one's
# (block elements, block bytes) is ggml's type traits, read from the one table of them (models/gguf/header.py)
_CACHE_TYPE_NAMES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
CACHE_TYPES: dict[str, tuple[int, int]] = {
    name: GGML_BLOCKS[i] for name in _CACHE_TYPE_NAMES for i, known in GGML_TYPE_NAMES.items() if known == name}
# framework fact: llama-server's auto slots (tools/server/server.cpp: n_parallel < 0 -> 4 slots, kv_unified = true)
AUTO_SLOTS = 4
# framework fact: Llama 4's chunk in llama.cpp (models/llama4.cpp: hparams.n_swa = 8192)
LLAMA4_CHUNK = 8192
#: Model types (transformers') and GGUF architectures (llama.cpp's) whose llama.cpp loader keeps a sliding window
#: (``hparams.swa_type`` set in ``src/models/*.cpp``); sliding layers of any other type cache every token
SWA_TYPES = frozenset({
    "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "cohere2", "cohere2moe",
    "gpt_oss", "gpt-oss", "exaone4", "exaone-moe", "llama4", "llama4_text", "afmoe", "olmo2", "olmo3", "mimo2",
    "mimo_v2_flash", "smallthinker", "plamo3", "laguna", "maple", "mellum", "granite_swa", "step35", "spark2_5",
    "muse-glimmer", "lfm2", "lfm2moe", "dots3note", "deepseek4"})
_CHUNK_TYPES = frozenset({"llama4", "llama4_text"})
#: llama.cpp's llm_arch_supports_rs_rollback (src/llama-arch.cpp), and the same architectures' transformers model
#: types: the recurrent memory keeps ``n_rs_seq`` rollback rows per sequence only for these (else clamped to 0)
RS_ROLLBACK = frozenset({"kimi_k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5_next", "nemotron_h",
                         "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3", "qwen3_5_text", "qwen3_5_moe_text",
                         "lfm2_moe"})

SETTINGS = (
    Setting("parallel", "--parallel", -1, minimum=-1,
            help="server slots (-np); -1: auto, 4 slots sharing one unified cache"),
    Setting("kv_unified", "--kv-unified", "auto", "str", ("auto", "on", "off"),
            help="one KV stream shared by the slots (auto: on exactly when --parallel is auto)"),
    Setting("cache_type_k", "--cache-type-k", "f16", "str", tuple(CACHE_TYPES), help="K cache type (-ctk)"),
    Setting("cache_type_v", "--cache-type-v", "f16", "str", tuple(CACHE_TYPES),
            help="V cache type (-ctv); a quantized V needs flash attention"),
    Setting("flash_attn", "--flash-attn", "auto", "str", ("on", "off", "auto"), help="flash attention (-fa)"),
    Setting("swa_full", "--swa-full", False, "bool", help="full-size cache for sliding-window layers"),
    Setting("batch_size", "--batch-size", 2048, help="logical batch (-b)"),
    Setting("ubatch_size", "--ubatch-size", 512, help="physical batch (-ub): sliding layers keep this many more cells"),
)


class Params(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """llama.cpp's context parameters as ``llama_init_from_model`` gets them: ``n_ctx`` is ``-c`` (unpadded)."""

    n_ctx: int
    n_seq_max: int
    kv_unified: bool
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"
    swa_full: bool = False
    n_batch: int = 2048
    n_ubatch: int = 512
    n_rs_seq: int = 0

    @property
    def cells(self) -> int:
        """``n_ctx_seq``: cells per stream of the full-attention cache."""
        n_ctx = pad(self.n_ctx)
        return n_ctx if self.kv_unified else pad(n_ctx // self.n_seq_max)

    @property
    def streams(self) -> int:
        return 1 if self.kv_unified else self.n_seq_max

    @property
    def ubatch(self) -> int:
        """The physical batch after the context caps it (``llama_context`` ctor, causal attention)."""
        return min(min(self.n_ctx, self.n_batch), self.n_ubatch)

    def swa_cells(self, window: int) -> int:
        """Cells per stream of the sliding-window cache for llama.cpp's ``n_swa`` = ``window``."""
        if self.swa_full:
            return self.cells
        slots = self.n_seq_max if self.kv_unified else 1
        return pad(min(self.cells, window * slots + self.ubatch))


class LogLine(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One ``llama_kv_cache: size = ...`` or ``llama_memory_recurrent: size = ...`` line: the cache's cells (per
    stream; a recurrent memory's ``mem_size``), its layers (with a cache; a recurrent memory prints the model's layer
    count), sequences and streams, and its K and V bytes (a recurrent memory's R and S)."""

    memory: str  # "kv" or "recurrent"
    role: str  # "base", "swa", "indexer", "recurrent"
    cells: int
    layers: int
    seqs: int
    streams: int
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes


class LayerView(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One layer as llama.cpp caches it: which KV cache holds it (``"base"``, ``"swa"`` or ``""``), K and V widths
    per cell (V 0: none), the window, recurrent R and S elements per row, and a DSA indexer's K width."""

    cache: str
    k_width: int = 0
    v_width: int = 0
    k_head: int = 0
    v_head: int = 0
    window: int = 0
    r: int = 0
    s: int = 0
    indexer: int = 0
    kind: str = "none"


def pad(n: int) -> int:
    """``GGML_PAD(n, 256)``."""
    return -(-n // PAD) * PAD


def row_bytes(cache_type: str, n: int) -> int:
    """``ggml_row_size``: the bytes of n elements of a cache type (a quantized type needs whole blocks)."""
    block, size = CACHE_TYPES[cache_type]
    if n % block:
        raise Unsupported(f"a {cache_type} cache row needs a multiple of {block} elements; this model's is {n}")
    return n // block * size


def keeps_window(layout: CacheLayout) -> bool:
    """Whether llama.cpp keeps this model's sliding windows (:data:`SWA_TYPES`)."""
    return layout.text_type in SWA_TYPES or (layout.model_type or "") in SWA_TYPES


def _state_sizes(layer: LayerCache) -> tuple[int, int]:
    """(``n_embd_r``, ``n_embd_s``) of a recurrent layer: from a GGUF's ``ssm.*`` sizes as ``llama-hparams.cpp``
    computes them, or from transformers' state shapes (a convolution state ``(channels, d_conv)`` keeps ``d_conv - 1``
    columns in llama.cpp; every other state is kept whole)."""
    if layer.ssm is not None and not layer.states:
        ssm = layer.ssm
        if ssm.conv_kernel is None or ssm.inner_size is None or ssm.state_size is None:
            raise Unsupported(f"{layer.mixer}: posenc sizes llama.cpp's recurrent states from the GGUF's "
                              "ssm.conv_kernel, ssm.inner_size and ssm.state_size, which this file does not give")
        channels = ssm.inner_size + 2 * (ssm.group_count or 0) * ssm.state_size
        return max(ssm.conv_kernel - 1, 0) * channels, ssm.state_size * ssm.inner_size
    r = s = 0
    for state in layer.states:
        if state.name.startswith("conv_states"):
            r += math.prod(state.shape[:-1]) * max(state.shape[-1] - 1, 0)
        else:
            s += math.prod(state.shape)
    return r, s


def _layers(layout: CacheLayout, notes: list[str]) -> list[LayerView]:
    """Every layer as llama.cpp caches it (see the module docstring)."""
    swa_ok = keeps_window(layout)
    out = []
    for layer in layout.layers:
        attention = layer.kind in ("full", "sliding", "chunked", "mla")
        sliding = layer.kind in ("sliding", "chunked") and swa_ok
        window = (LLAMA4_CHUNK if layout.text_type in _CHUNK_TYPES else layer.window or 0) if sliding else 0
        kind = "full" if attention and layer.kind != "mla" and not sliding else layer.kind
        view = LayerView("swa" if sliding else "base" if attention else "", kind=kind, window=window)
        if attention or layer.kind == "shared":  # a shared layer caches nothing but counts in llama.cpp's widths
            mla = layer.mla is not None or layer.kind == "mla"
            view = view._replace(k_width=layer.kv_heads * layer.k_head_dim, k_head=layer.k_head_dim,
                           v_width=0 if mla else layer.kv_heads * layer.v_head_dim, indexer=layer.indexer_dim,
                           v_head=layer.mla.kv_lora_rank if layer.mla is not None else layer.v_head_dim)
        if layer.kind == "state" or layer.states or (layer.ssm is not None and layer.kind != "none"):
            r, s = _state_sizes(layer)
            view = view._replace(r=r, s=s)
        out.append(view)
    if any(x.kind in ("sliding", "chunked") for x in layout.layers) and not swa_ok:
        notes.append(f"{layout.text_type}: llama.cpp keeps no sliding window for this architecture (its loader sets "
                     "none): every layer caches every token")
    return out


def _check(layers: list[LayerView], p: Params, mla: bool, notes: list[str]) -> None:
    """What ``llama_init_from_model`` refuses (``src/llama-context.cpp``, in its order), and the flash attention it
    turns on."""
    if mla and p.type_k != p.type_v:
        raise Unsupported(f"llama.cpp refuses different K ({p.type_k}) and V ({p.type_v}) cache types for an MLA "
                          "model (llama_init_from_model)")
    quantized_v = CACHE_TYPES[p.type_v][0] > 1
    if quantized_v and p.flash_attn == "off":
        raise PosencError(f"--cache-type-v {p.type_v} needs flash attention: llama.cpp refuses a quantized V cache "
                          "with --flash-attn off (use --flash-attn on or auto)")
    if quantized_v and p.flash_attn == "auto":
        notes.append("flash attention turned on: --flash-attn auto enables it for a quantized V cache")
    if p.flash_attn != "off":
        for name, cache_type, heads in (("K", p.type_k, {x.k_head for x in layers if x.k_width}),
                                        ("V", p.type_v, {x.v_head for x in layers if x.k_width})):
            block = CACHE_TYPES[cache_type][0]
            bad = sorted(h for h in heads if h % block)
            if block > 1 and bad:
                raise Unsupported(f"{name} cache type {cache_type} with block size {block} does not divide the head "
                                  f"size {bad[0]}: llama.cpp refuses it with flash attention (llama_init_from_model)")


def allocate(layout: CacheLayout, p: Params, notes: list[str] | None = None) -> tuple[list[LogLine], list[LayerView],
                                                                                   dict[int, tuple[int, int, int]]]:
    """llama.cpp's allocation for ``layout`` with context parameters ``p``: the log lines it prints (in its order),
    every layer's view, and per layer index (K bytes with a DSA indexer's, V bytes, state bytes)."""
    notes = notes if notes is not None else []
    if not 1 <= p.n_seq_max <= MAX_SEQ:
        raise PosencError(f"{p.n_seq_max} sequences: llama.cpp allows 1 to {MAX_SEQ} (n_seq_max)")
    layers = _layers(layout, notes)
    _check(layers, p, any(x.mla is not None or x.kind == "mla" for x in layout.layers), notes)
    v_trans = p.flash_attn == "off"
    v_max = max((x.v_width for x in layers if x.k_width), default=0)
    windows = {x.window for x in layers if x.cache == "swa"}
    cells = {"base": p.cells, "swa": p.swa_cells(max(windows)) if windows else 0}
    if len(windows) > 1:
        notes.append(f"llama.cpp has one window per model: the sliding cache is sized for the largest, {max(windows)}")
    rs_seq = p.n_rs_seq if layout.text_type in RS_ROLLBACK or (layout.model_type or "") in RS_ROLLBACK else 0
    rows = max(1, p.n_seq_max) * (1 + rs_seq)
    per_layer: dict[int, tuple[int, int, int]] = {}
    lines: dict[str, list[int]] = {}
    for i, x in enumerate(layers):
        k = v = idx = st = 0
        if x.cache:
            n = cells[x.cache] * p.streams
            k = row_bytes(p.type_k, x.k_width) * n
            if x.v_width:
                v = row_bytes(p.type_v, v_max if v_trans else x.v_width) * n
            idx = row_bytes(p.type_k, x.indexer) * n if x.indexer else 0
            _add(lines, x.cache, k, v)
            if x.indexer:
                _add(lines, "indexer", idx, 0)
        if x.r or x.s:
            st = (x.r + x.s) * 4 * rows
            _add(lines, "recurrent", x.r * 4 * rows, x.s * 4 * rows)
        per_layer[i] = (k + idx, v, st)
    return _log(lines, layers, cells, p), layers, per_layer


def _add(lines: dict[str, list[int]], role: str, k: int, v: int) -> None:
    line = lines.setdefault(role, [0, 0, 0])
    line[0] += 1
    line[1] += k
    line[2] += v


def _log(lines: dict[str, list[int]], layers: list[LayerView], cells: dict[str, int], p: Params) -> list[LogLine]:
    """The log lines in llama.cpp's order: the full cache (and, for a model with sliding layers, the SWA cache: both
    printed even when one holds no layer), a DSA indexer cache, the recurrent memory (printed with ``mem_size`` cells,
    ``max(1, n_seq_max)``, whatever its rollback rows, and the model's layer count)."""
    out = []
    roles = ["base", "swa"] if "swa" in lines else ["base"] if "base" in lines else []
    for role in [*roles, *(["indexer"] if "indexer" in lines else [])]:
        n, k, v = lines.get(role, [0, 0, 0])
        out.append(LogLine("kv", role, cells["swa" if role == "swa" else "base"], n, p.n_seq_max, p.streams, k, v))
    if "recurrent" in lines:
        _, r, s = lines["recurrent"]
        out.append(LogLine("recurrent", "recurrent", max(1, p.n_seq_max), len(layers), p.n_seq_max, 1, r, s))
    return out


def server_params(ctx: int, settings: Mapping[str, SettingValue], notes: list[str]) -> Params:
    """llama-server's context parameters for slots that each reach ``ctx`` tokens (see the module docstring)."""
    slots = int(settings["parallel"])
    if slots == 0:
        raise PosencError("--parallel 0 is not allowed: use -1 (auto) or a number of slots")
    if slots < 0:
        unified = True
        if settings["kv_unified"] == "off":
            notes.append("--parallel auto makes the cache unified whatever --kv-unified says (server.cpp)")
        slots = AUTO_SLOTS
    else:
        unified = settings["kv_unified"] == "on"
    c = ctx if unified else ctx * slots
    p = Params(c, slots, unified, str(settings["cache_type_k"]), str(settings["cache_type_v"]),
               str(settings["flash_attn"]), bool(settings["swa_full"]), int(settings["batch_size"]),
               int(settings["ubatch_size"]))
    if unified:
        notes.append(f"-c {c}: one pool of {p.cells} cells shared by the {slots} slots (one sequence can reach "
                     f"{ctx}; together they hold {p.cells} tokens)")
    else:
        notes.append(f"-c {c} with --parallel {slots} and no unified cache: {p.cells} cells in each slot's stream")
    return p


def cost_with(engine: str, layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue], p: Params,
              notes: list[str]) -> Cost:
    """The :class:`Cost` of llama.cpp's allocation with context parameters ``p`` (for llama-server, Ollama or LM
    Studio: each passes its own), grouped as :meth:`CacheLayout.groups` groups the layers."""
    _, layers, per_layer = allocate(layout, p, notes)
    if pad(p.n_ctx) != p.n_ctx:
        notes.append(f"the context is padded to a multiple of {PAD}: {p.cells} cells per stream")
    groups = []
    for group in layout.groups():
        view = layers[group.layers[0]]
        k = sum(per_layer[i][0] for i in group.layers)
        v = sum(per_layer[i][1] for i in group.layers)
        st = sum(per_layer[i][2] for i in group.layers)
        cells = (p.swa_cells(view.window) if view.cache == "swa" else p.cells) if view.cache else 0
        note = ""
        if view.cache == "swa":
            note = (f"window {view.window}: {cells} cells" + (" (--swa-full)" if p.swa_full else ""))
        elif view.kind == "mla":
            note = "MLA: one latent K per token, no V"
        groups.append(CacheGroup(view.kind, len(group.layers), cells, k, v,
                                 st, p.type_k if view.cache else "f32" if st else "",
                                 p.type_v if view.v_width else "f32" if st else "", note))
    extras = (
        Extra("compute buffer", None, "llama.cpp sizes it by reserving the graph for --ubatch-size tokens on the "
              "device (flash attention and cache types change it); posenc does not compute it"),
        Extra("output buffer", None, "logits for --batch-size tokens x the vocabulary (n_outputs_max), in host memory"),
        Extra("context checkpoints", None, "llama-server keeps up to --ctx-checkpoints (32) copies per slot of a "
              "sliding or recurrent model's window and states, in host memory"),
        Extra("prompt cache", None, "--cache-ram 8192 MiB of host memory at most, for idle slots' prompts"))
    sequences = 1 if p.kv_unified else p.n_seq_max
    return Cost(engine, ctx, p.cells, sequences, dict(settings), tuple(groups), extras, tuple(notes))


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """What llama-server allocates for slots of ``ctx`` tokens with ``settings`` (see the module docstring)."""
    notes: list[str] = []
    p = server_params(ctx, settings, notes)
    return cost_with(ENGINE, layout, ctx, settings, p, notes)


def quantized_levers(settings: Mapping[str, SettingValue], keys: tuple[str, str], flash: tuple[str, str],
                     off: tuple[SettingValue, ...], on: SettingValue) -> list[Lever]:
    """q8_0 then q4_0 for K and V (``keys``), where not set already, with flash attention (which a quantized V
    needs) turned on when ``settings[flash[0]]`` is one of ``off``; ``flash[1]`` names it in the label."""
    out: list[Lever] = []
    for q in ("q8_0", "q4_0"):
        if (settings[keys[0]], settings[keys[1]]) != (q, q):
            change: dict[str, SettingValue] = {keys[0]: q, keys[1]: q}
            label = f"{q} K and V caches"
            if settings[flash[0]] in off:
                change[flash[0]] = on
                label += f" with {flash[1]}"
            out.append((label, change))
    return out


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """Quantized caches (q8_0, q4_0, with flash attention), one slot, a unified cache, no ``--swa-full``."""
    out = quantized_levers(settings, ("cache_type_k", "cache_type_v"), ("flash_attn", "--flash-attn on"), ("off",),
                           "on")
    slots = int(settings["parallel"])
    if slots != 1:
        out.append(("--parallel 1", {"parallel": 1}))
    if slots > 1 and settings["kv_unified"] != "on":
        out.append(("--kv-unified", {"kv_unified": "on"}))
    if settings["swa_full"]:
        out.append(("no --swa-full", {"swa_full": False}))
    return out


MEMORY = EngineMemory(ENGINE, VERSION, BASIS, SETTINGS, cost, levers)
