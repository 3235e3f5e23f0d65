"""vLLM 0.34.0's KV cache: what one request of ``ctx`` tokens needs in its block pool, per GPU, as vLLM's hybrid
allocator plans it (stdlib only; vLLM is never imported).

Conventions: bytes; a *page* is one block of one layer (``block_size`` tokens); *pages* per request are counted per
KV cache group, and every group draws its block ids from one shared pool whose block holds the pages of the widest
group (padding layers included). ``kv_cache_bytes`` is ``_max_memory_usage_bytes_from_groups``: the bytes per block
times the blocks one request of ``ctx`` tokens takes, what ``get_kv_cache_configs`` checks against the memory left
(less one block, the null block the BlockPool holds back: an :class:`Extra` here). Per GPU: under tensor
parallelism each rank holds ``max(1, kv_heads // tp)`` KV heads, and its share of each state.

Rules, each from vLLM 0.34.0's code (``vllm/`` below):

* Per-layer specs, as the layer classes build them (``get_kv_cache_spec``):
  ``model_executor/layers/attention/attention.py`` ``Attention``: ``FullAttentionSpec`` (page = block x heads x
  (K + V head sizes) x bytes), ``SlidingWindowSpec`` (same page; its block is the largest kernel block dividing
  ``--block-size``, ``_largest_kernel_block_within``: ``--block-size`` itself for FlashAttention's ``MultipleOf(16)``);
  ``chunked_local_attention.py``: ``ChunkedLocalAttentionSpec``; ``mla_attention.py`` ``MLAAttention``:
  ``MLAAttentionSpec`` (one head of ``kv_lora_rank + qk_rope_head_dim``, no V) or ``SlidingWindowMLASpec``;
  ``layers/mamba/abstract.py`` ``MambaBase``: ``MambaSpec`` with the model class's state shapes
  (``layers/mamba/mamba_utils.py`` ``MambaStateShapeCalculator``: the conv state keeps ``conv_kernel - 1`` columns;
  heads and channels split over TP; Mamba2 groups extended to the TP size, ``extra_groups_for_head_shards``).
  Per-token-head dtypes add one fp32 scale per token, head and side (``TritonAttentionBackend.customize_spec``).
* Per request (``v1/kv_cache_interface.py`` ``max_memory_usage_bytes``): full and MLA ``cdiv(ctx, block)`` pages;
  sliding ``cdiv(min(window - 1 + in_flight, ctx), block) + 1``; chunked ``cdiv(min(chunk + in_flight, ctx),
  block)``; Mamba ``2 + checkpoint`` pages with prefix caching (``mamba_cache_mode="align"``), else 1. ``in_flight``
  is ``VllmConfig.max_in_flight_tokens``: ``--max-num-batched-tokens`` x 2 with async scheduling (the default).
* Hybrid attention/state models (``platforms/interface.py`` ``_align_hybrid_block_size``): the attention block grows
  until an attention page holds a state page (a multiple of the kernel block, and of the prefill-checkpoint
  alignment in align mode), and every state page is padded to the attention page.
* Grouping (``v1/core/kv_cache_planning.py`` ``get_kv_cache_groups``): one group when all specs are equal or of one
  type (``UniformTypeKVCacheSpecs``); else pages are unified (``unify_kv_cache_spec_page_size``: a smaller page's
  block grows by the ratio, or the page is padded) and layers are split into groups of equal size, the smallest
  type's layer count (or the largest when under 1.5x), the last group of a type filled with padding layers
  (``_get_kv_cache_groups_uniform_page_size``). ``--disable-hybrid-kv-cache-manager`` first turns sliding and
  chunked layers into full ones (``unify_hybrid_kv_cache_specs``).

The card assumed: an NVIDIA H100 80GB (SM90) under ``vllm serve``: FlashAttention 3 (kernel blocks of 16 tokens),
FlashMLA for an fp8 MLA cache (64), FlashInfer for fp8_e5m2, Triton for the per-token-head dtypes, FlashInfer's
gated-delta-net prefill (it exports prefill checkpoints). ``tests/engines/test_memory_vllm.py`` runs vLLM's own spec
builders and planner on CPU against this module, byte for byte.

Not modelled: a checkpoint whose quantization config names an fp8 KV cache (vLLM's auto then means fp8:
``resolve_kv_cache_dtype_string``); speculative decoding (state pages per draft token); the default
``--max-num-batched-tokens`` capped at ``--max-num-seqs`` x the context below 8 tokens; DeepSeek Sparse Attention's
packed indexer layout (refused); the other cache dtypes of 0.34 (nvfp4, turboquant, octave, ultraquant: other cards or
backends); the hybrid block alignment reads the first attention layer for ``get_head_size``/``get_num_kv_heads``.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
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

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout, LayerCache

VERSION = "0.34.0"
ENGINE = "vllm"

# framework fact: CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py)
DEFAULT_BLOCK_SIZE = 64
# framework fact: EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py), a card of >= 70 GiB that is not an A100
# (H100, H200) under the OpenAI API server; 2048 below 70 GiB or on an A100, 16384 at >= 160 GiB (B200)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# framework fact: FlashAttention's and Triton's get_supported_kernel_block_sizes: [MultipleOf(16)]; FlashMLA: [64]
KERNEL_BLOCK, FLASHMLA_BLOCK = 16, 64
# framework fact: FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (vllm/v1/attention/backends/gdn_attn.py)
GDN_CHECKPOINT_ALIGNMENT = 64

#: bytes per element of each --kv-cache-dtype (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE; auto: the model's)
KV_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8_per_token_head": 1,
                  "fp8_per_token_head": 1, "int4_per_token_head": 1}
PER_TOKEN_HEAD = ("int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")
#: what an MLA layer accepts on the card (FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA supported_kv_cache_dtypes)
MLA_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

SETTINGS = (
    Setting("block_size", "--block-size", DEFAULT_BLOCK_SIZE,
            help="tokens per KV cache block (hybrid attention/state models raise it to fit a state page)"),
    Setting("kv_cache_dtype", "--kv-cache-dtype", "auto", "str", ("auto", *KV_DTYPE_BYTES),
            help="the attention cache's type (auto: the model's dtype); per-token-head types add fp32 scales"),
    Setting("dtype", "--dtype", "auto", "str", ("auto", "bfloat16", "float16", "float32"),
            help="the model dtype (auto: the config's bfloat16 or float16, else bfloat16)"),
    Setting("max_num_batched_tokens", "--max-num-batched-tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS,
            help="tokens per scheduler step (default: an H100 80GB under vllm serve); sliding and chunked layers "
                 "hold this many more tokens per step in flight"),
    Setting("async_scheduling", "--async-scheduling", True, "bool",
            help="two steps in flight (the default on CUDA): sliding and chunked layers hold twice the batch"),
    Setting("tensor_parallel_size", "--tensor-parallel-size", 1, help="GPUs the heads and states are split over"),
    Setting("enable_prefix_caching", "--enable-prefix-caching", True, "bool",
            help="on by default; state layers then keep 2 pages per request (+1 prefill checkpoint)"),
    Setting("disable_hybrid_kv_cache_manager", "--disable-hybrid-kv-cache-manager", False, "bool",
            help="sliding and chunked layers then cost the whole context"),
    Setting("mamba_cache_dtype", "--mamba-cache-dtype", "auto", "str", ("auto", "float32", "float16", "bfloat16"),
            help="the state layers' conv (and, by default, recurrent) state type"),
    Setting("mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype", "auto", "str",
            ("auto", "float32", "float16", "bfloat16"), help="the recurrent state's type"),
)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _lcm(*values: int) -> int:
    out = 1
    for v in values:
        out = out * v // gcd(out, v)
    return out


class Spec(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One layer's KV cache spec as vLLM builds it: ``kind`` (full, sliding, chunked, mla, sliding_mla, mamba),
    ``block`` tokens per page, ``page`` bytes (padded), the K, V and state bytes of the unpadded content per page,
    ``window`` (sliding window or chunk), ``fixed_pages`` (a state layer's pages per request), ``ident`` (what
    vLLM's spec equality compares beyond these)."""

    kind: str
    block: int
    page: int
    k: int = 0
    v: int = 0
    s: int = 0
    window: int | None = None
    fixed_pages: int = 0
    ident: tuple[object, ...] = ()

    def pages(self, ctx: int, in_flight: int) -> int:
        """Pages one request of ``ctx`` tokens holds (``max_memory_usage_bytes`` / ``page_size_bytes``)."""
        if self.kind == "mamba":
            return self.fixed_pages
        if self.kind in ("sliding", "sliding_mla"):
            assert self.window is not None
            return _cdiv(min(self.window - 1 + in_flight, ctx), self.block) + 1
        if self.kind == "chunked":
            assert self.window is not None
            return _cdiv(min(self.window + in_flight, ctx), self.block)
        return _cdiv(ctx, self.block)

    @property
    def content(self) -> int:
        return self.k + self.v + self.s


class Group(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One KV cache group: its spec, its real layers and the layers it is padded to."""

    spec: Spec
    layers: tuple[int, ...]
    size: int
    uniform_type: tuple[Spec, ...] = ()  # a UniformTypeKVCacheSpecs group: every layer's own spec


class Plan(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """vLLM's plan for a model at some settings: the groups, the bytes one block takes in the pool, notes."""

    groups: tuple[Group, ...]
    block_bytes: int
    block_size: int
    in_flight: int
    notes: tuple[str, ...]

    def blocks_per_request(self, ctx: int) -> int:
        """Blocks one request of ``ctx`` tokens takes from the pool (every group's, summed)."""
        total = 0
        for g in self.groups:
            specs = g.uniform_type or (g.spec,)
            total += max(s.pages(ctx, self.in_flight) for s in specs)
        return total

    def request_bytes(self, ctx: int) -> int:
        return self.block_bytes * self.blocks_per_request(ctx)


def model_dtype(layout: CacheLayout, chosen: str) -> str:
    """``--dtype``: auto is the config's bfloat16 or float16, else bfloat16 (``_resolve_auto_dtype`` downcasts a
    float32 config to the platform's first dtype, bfloat16 on CUDA)."""
    if chosen != "auto":
        return chosen
    return layout.dtype if layout.dtype in ("bfloat16", "float16") else "bfloat16"


def _attention_content(layer: LayerCache, heads: int, kv_dtype: str, elem: int) -> tuple[int, int]:
    """(K, V) bytes per token of one attention layer on one rank."""
    if layer.kind == "mla" or layer.mla is not None:
        if kv_dtype not in MLA_DTYPES:
            raise PosencError(f"--kv-cache-dtype {kv_dtype!r}: vLLM {VERSION} has no MLA backend for it on the card "
                              f"assumed; use one of: {', '.join(MLA_DTYPES)}")
        return layer.k_head_dim * elem, 0
    hk, hv = layer.k_head_dim, layer.v_head_dim
    if kv_dtype in PER_TOKEN_HEAD:  # TritonAttentionBackend.customize_spec: an fp32 scale per token, head and side
        if kv_dtype == "int4_per_token_head":
            hk, hv = hk // 2, hv // 2
        return heads * (hk * elem + 4), heads * (hv * elem + 4)
    return heads * hk * elem, heads * hv * elem


def _attention_spec(layer: LayerCache, block: int, tp: int, kv_dtype: str, elem: int) -> Spec:
    """An attention layer's spec (``get_kv_cache_spec`` of Attention, ChunkedLocalAttention, MLAAttention)."""
    mla = layer.kind == "mla" or layer.mla is not None
    heads = 1 if mla else max(1, layer.kv_heads // tp)
    k, v = _attention_content(layer, heads, kv_dtype, elem)
    kind = {"full": "full", "mla": "mla", "sliding": "sliding", "chunked": "chunked"}[layer.kind]
    if mla:
        kind = "sliding_mla" if layer.kind == "sliding" else "mla"
    ident = (heads, layer.k_head_dim, 0 if mla else layer.v_head_dim, kv_dtype, elem)
    return Spec(kind, block, block * (k + v), block * k, block * v, 0, layer.window, 0, ident)


def _state_bytes(layer: LayerCache, tp: int, dtypes: tuple[int, int], text_type: str) -> int:
    """Bytes of one state layer's states on one rank, in vLLM's shapes (``MambaStateShapeCalculator``)."""
    conv_b, ssm_b = dtypes
    shapes = {s.name: s.shape for s in layer.states}
    conv = shapes.get("conv_states.0")
    rec = shapes.get("recurrent_states.0")

    def split(n: int, what: str) -> int:
        if n % tp:
            raise PosencError(f"--tensor-parallel-size {tp}: {text_type}'s {what} ({n}) does not split over it")
        return n // tp

    if layer.mixer == "gated_delta_net" and conv and rec:  # gated_delta_net_state_shape
        nv, dk, dv = rec
        return (conv[1] - 1) * split(conv[0], "conv channels") * conv_b + split(nv, "value heads") * dk * dv * ssm_b
    if layer.mixer.endswith("mamba2") and conv and rec:  # mamba2_state_shape
        heads, head_dim, state = rec
        groups = (conv[0] - heads * head_dim) // (2 * state)
        groups += 0 if groups % tp == 0 else tp - groups  # extra_groups_for_head_shards
        conv_dim = heads * head_dim + 2 * groups * state
        return ((conv[1] - 1) * split(conv_dim, "conv channels") * conv_b
                + split(heads, "heads") * head_dim * state * ssm_b)
    if layer.mixer.endswith("mamba") and conv and rec and len(rec) == 2:  # mamba1_state_shape
        inner, state = rec
        return (conv[1] - 1) * split(conv[0], "channels") * conv_b + split(inner, "channels") * state * ssm_b
    if layer.mixer == "short_conv" and conv:  # short_conv_state_shape
        return (conv[1] - 1) * split(conv[0], "channels") * conv_b
    raise Unsupported(f"posenc does not model vLLM {VERSION}'s state pages for {layer.mixer} layers")


def _state_dtypes(layout: CacheLayout, settings: Mapping[str, SettingValue], dtype: str) -> tuple[int, int]:
    """(conv, recurrent) element bytes: ``MambaStateDtypeCalculator``; a recurrent state of type auto follows the
    conv state, except Nemotron-H (float32: ``NemotronHForCausalLMConfig``) and Qwen3.5 (its config's
    ``mamba_ssm_dtype``, float32 in the shipped configs: ``Qwen3_5ForConditionalGenerationConfig``)."""
    conv = str(settings["mamba_cache_dtype"])
    conv_b = _DTYPE_BYTES[dtype if conv == "auto" else conv]
    ssm = str(settings["mamba_ssm_cache_dtype"])
    if ssm == "auto" and (layout.text_type.startswith("nemotron_h") or layout.text_type.startswith("qwen3_5")):
        ssm = "float32"
    return conv_b, conv_b if ssm == "auto" else _DTYPE_BYTES[ssm]


def _checkpoint_blocks(layout: CacheLayout) -> tuple[int, int | None]:
    """(prefill checkpoint pages, checkpoint alignment) of the state layers in align mode: Mamba2 mixers export one
    checkpoint (``MambaMixer2.get_kv_cache_spec``, alignment None); gated delta nets on FlashInfer's prefill
    (Hopper) one, aligned to 64 tokens (``GatedDeltaNetAttention.get_kv_cache_spec``); others none."""
    mixers = {x.mixer for x in layout.layers if x.states}
    if mixers and all(m == "gated_delta_net" for m in mixers):
        return 1, GDN_CHECKPOINT_ALIGNMENT
    if any(m.endswith("mamba2") for m in mixers):
        return 1, None
    return 0, None


def _layer_specs(layout: CacheLayout, settings: Mapping[str, SettingValue]) -> tuple[list[tuple[int, Spec]], list[str]]:
    """Every layer's spec (a Falcon-H1 layer has two: attention and state), after the hybrid block alignment."""
    tp, block = int(settings["tensor_parallel_size"]), int(settings["block_size"])
    kv_dtype, dtype = str(settings["kv_cache_dtype"]), model_dtype(layout, str(settings["dtype"]))
    elem = _DTYPE_BYTES[dtype] if kv_dtype == "auto" else KV_DTYPE_BYTES[kv_dtype]
    if block % KERNEL_BLOCK:
        raise PosencError(f"--block-size {block}: vLLM's attention kernels on the card assumed take multiples of "
                          f"{KERNEL_BLOCK} tokens")
    notes: list[str] = []
    attention = [x for x in layout.layers if x.kind in ("full", "sliding", "chunked", "mla")]
    for x in attention:
        if x.indexer_dim:
            raise Unsupported(f"vLLM {VERSION} keeps DeepSeek Sparse Attention's indexer keys in its own packed "
                              "layout, which posenc does not model")
    states = [x for x in layout.layers if x.states]
    pure_state = not attention
    align = bool(settings["enable_prefix_caching"]) and not pure_state
    if states and pure_state and bool(settings["enable_prefix_caching"]):
        notes.append("an attention-free model: vLLM turns prefix caching off (ModelConfig.is_prefix_caching_supported)")
    if states and attention and bool(settings["disable_hybrid_kv_cache_manager"]):
        raise Unsupported(f"vLLM {VERSION} runs hybrid attention/state models only with the hybrid KV cache manager "
                          "(drop --disable-hybrid-kv-cache-manager)")
    state_page = 0
    if states:
        dtypes = _state_dtypes(layout, settings, dtype)
        state_page = max(_state_bytes(x, tp, dtypes, layout.text_type) for x in states)
    ckpt, ckpt_align = _checkpoint_blocks(layout) if align else (0, None)
    padded = None
    if states and attention:
        block, padded = _align_hybrid(attention[0], block, tp, kv_dtype, elem, state_page, ckpt_align, align)
        if block != int(settings["block_size"]):
            notes.append(f"--block-size raised to {block} so an attention page holds a state page "
                         "(Platform._align_hybrid_block_size)")
    out: list[tuple[int, Spec]] = []
    for i, x in enumerate(layout.layers):
        if x.kind in ("full", "sliding", "chunked", "mla"):
            out.append((i, _attention_spec(x, block, tp, kv_dtype, elem)))
        if x.states:
            content = _state_bytes(x, tp, _state_dtypes(layout, settings, dtype), layout.text_type)
            page = padded if padded and padded > content else content
            out.append((i, Spec("mamba", block, page, 0, 0, content, None, (2 + ckpt) if align else 1,
                                (x.mixer, content))))
    return out, notes


def _align_hybrid(first: LayerCache, block: int, tp: int, kv_dtype: str, elem: int, state_page: int,
                  ckpt_align: int | None, align: bool) -> tuple[int, int]:
    """(block size, state page padded) of a hybrid model: ``Platform._align_hybrid_block_size``, with the page of one
    token of the model's attention (``get_head_size()`` for K and V, ``get_num_kv_heads``)."""
    mla = first.kind == "mla" or first.mla is not None
    if mla:
        per_token = sum(_attention_content(first, 1, kv_dtype, elem))
    else:
        square = first._replace(v_head_dim=first.k_head_dim)  # FullAttentionSpec(head_size=get_head_size())
        per_token = sum(_attention_content(square, max(1, first.kv_heads // tp), kv_dtype, elem))
    kernel = FLASHMLA_BLOCK if mla and kv_dtype in ("fp8", "fp8_e4m3") else KERNEL_BLOCK
    alignment = max(kernel, block)
    if mla:
        alignment = max(alignment, 128)
    if align:
        alignment = _lcm(alignment, ckpt_align or 1)
    attn_block = alignment * _cdiv(state_page, alignment * per_token)
    attn_block = kernel * _cdiv(attn_block, kernel)
    block = max(block, attn_block)
    return block, block * per_token


def _promote(specs: list[tuple[int, Spec]]) -> list[tuple[int, Spec]]:
    """``--disable-hybrid-kv-cache-manager``: sliding and chunked layers allocated as full ones, beside full layers
    (``_promote_local_kv_cache_specs``)."""
    kinds = {s.kind for _, s in specs}
    if not kinds & {"full", "mla"} or not kinds & {"sliding", "chunked", "sliding_mla"}:
        return specs
    to = {"sliding": "full", "chunked": "full", "sliding_mla": "mla"}
    return [(i, s._replace(kind=to.get(s.kind, s.kind), window=None) if s.kind in to else s) for i, s in specs]


_TYPE = {"full": "full", "mla": "full", "sliding": "sliding", "sliding_mla": "sliding", "chunked": "chunked",
         "mamba": "mamba"}


def _uniform_type(specs: list[Spec]) -> bool:
    """``UniformTypeKVCacheSpecs.is_uniform_type``: one block size and one type (full with MLA; sliding and chunked
    of one window; state layers of one page)."""
    first = specs[0]
    if len({s.block for s in specs}) > 1 or len({_TYPE[s.kind] for s in specs}) > 1:
        return False
    if first.kind in ("sliding", "sliding_mla", "chunked"):
        return len({s.window for s in specs}) == 1
    if first.kind == "mamba":
        return len({(s.page, s.fixed_pages) for s in specs}) == 1
    return True


def _unify(specs: list[tuple[int, Spec]]) -> list[tuple[int, Spec]]:
    """``unify_kv_cache_spec_page_size``: every page made the largest, by a larger block where the page divides it,
    else padded (state and non-MLA attention pages)."""
    top = max(s.page for _, s in specs)
    out = []
    for i, s in specs:
        if s.page == top:
            out.append((i, s))
        elif s.kind != "mamba" and top % s.page == 0:
            r = top // s.page
            out.append((i, s._replace(block=s.block * r, page=top, k=s.k * r, v=s.v * r)))
        elif s.kind in ("mamba", "full", "sliding", "chunked"):
            out.append((i, s._replace(page=top)))
        else:
            raise Unsupported(f"vLLM {VERSION} cannot unify this model's MLA pages with its other layers' here "
                              "(its full-allocation fallback is not modelled)")
    return out


def _groups(specs: list[tuple[int, Spec]]) -> tuple[tuple[Group, ...], int]:
    """(groups, bytes per block): ``get_kv_cache_groups`` and ``_pool_bytes_per_block`` (the largest group's pages;
    layer-major layouts, FlashAttention's LBNHC, keep each state page unaligned)."""
    if not specs:
        return (), 0
    layers = tuple(i for i, _ in specs)
    if all(s == specs[0][1] for _, s in specs):  # is_kv_cache_spec_uniform
        return (Group(specs[0][1], layers, len(layers)),), specs[0][1].page * len(layers)
    if _uniform_type([s for _, s in specs]):  # UniformTypeKVCacheSpecs.from_specs
        own = tuple(s for _, s in specs)
        return (Group(specs[0][1], layers, len(layers), own),), sum(s.page for s in own)
    specs = _unify(specs)
    buckets: dict[Spec, list[int]] = {}
    for i, s in specs:
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups: list[Group] = []
    for spec, members in buckets.items():
        n = _cdiv(len(members), size)
        groups.extend(Group(spec, tuple(members[k::n]), size) for k in range(n))
    return tuple(groups), size * specs[0][1].page


def plan(layout: CacheLayout, settings: Mapping[str, SettingValue]) -> Plan:
    """vLLM's KV cache plan for the model at these settings (every setting given: :meth:`EngineMemory.settings_for`)."""
    specs, notes = _layer_specs(layout, settings)
    if bool(settings["disable_hybrid_kv_cache_manager"]):
        specs = _promote(specs)
    groups, block_bytes = _groups(specs)
    in_flight = int(settings["max_num_batched_tokens"]) * (2 if bool(settings["async_scheduling"]) else 1)
    block = max((g.spec.block for g in groups if g.spec.kind != "mamba"), default=int(settings["block_size"]))
    return Plan(groups, block_bytes, block, in_flight, tuple(notes))


_KIND = {"full": "full", "mla": "mla", "sliding": "sliding", "sliding_mla": "sliding", "chunked": "chunked",
         "mamba": "state"}


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The bytes one request of ``ctx`` tokens needs in vLLM's pool, per GPU, per spec; the hybrid allocator's
    padding (padding layers, padded pages) as a group of its own."""
    p = plan(layout, settings)
    dtype = model_dtype(layout, str(settings["dtype"]))
    kv = str(settings["kv_cache_dtype"])
    kv_type = dtype if kv == "auto" else kv
    rows: dict[Spec, list[int]] = {}  # spec -> [layers, pages, k, v, s]
    pad_layers = 0
    for g in p.groups:
        specs = g.uniform_type or (g.spec,) * len(g.layers)
        pages = max(s.pages(ctx, p.in_flight) for s in specs)
        for s in specs:
            row = rows.setdefault(s, [0, pages, 0, 0, 0])
            row[0] += 1
            row[2:] = [row[2] + pages * s.k, row[3] + pages * s.v, row[4] + pages * s.s]
        pad_layers += g.size - len(g.layers)
    groups: list[CacheGroup] = []
    for s, (n, pages, k, v, st) in rows.items():
        cells = 0 if s.kind == "mamba" else pages * s.block
        note = f"{pages} pages of {s.block} tokens" if s.kind != "mamba" else f"{pages} state pages"
        groups.append(CacheGroup(_KIND[s.kind], n, cells, k, v, st, kv_type if s.kind != "mamba" else "",
                                 kv_type if s.kind not in ("mamba", "mla") else "", note))
    need = p.request_bytes(ctx)
    padding = need - sum(g.bytes for g in groups)
    if padding:
        groups.append(CacheGroup("padding", pad_layers, 0, 0, 0, padding, note=(
            f"the hybrid allocator's padding: {pad_layers} padding layers and pages padded to one size")))
    extras = (
        Extra("null block", p.block_bytes, "the BlockPool holds one block back: vLLM checks a request against the "
              "memory left less one block (kv_cache_planning.get_kv_cache_configs)"),
        Extra("activations", None,
              f"profiled by vLLM at --max-num-batched-tokens {settings['max_num_batched_tokens']}"),
        Extra("CUDA graphs", None, "captured after profiling; the extensible KV cache (the default on CUDA) is sized "
              "from the memory left after them, with --gpu-memory-utilization 1.0"),
    )
    notes = [*p.notes, f"per request: {p.blocks_per_request(ctx)} blocks of {p.block_bytes} bytes; a pool of M "
             f"bytes holds M // {p.block_bytes} blocks, and serves that many over the blocks per request at once "
             "(get_max_concurrency_for_kv_cache_config)",
             f"card assumed: H100 80GB under vllm serve ({p.in_flight} tokens in flight per request)"]
    used = dict(settings, dtype=dtype, block_size=p.block_size)
    return Cost(ENGINE, ctx, _cdiv(ctx, p.block_size) * p.block_size, 1, used, tuple(groups), extras, tuple(notes))


def max_concurrency(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue], memory: int) -> float:
    """Requests of ``ctx`` tokens a pool of ``memory`` bytes serves at once: blocks in the pool over blocks per
    request (``get_max_concurrency_for_kv_cache_config``)."""
    p = plan(layout, settings)
    if not p.groups:
        return float("inf")
    return (memory // p.block_bytes) / p.blocks_per_request(ctx)


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """What buys more context: an fp8 cache, a 4-bit per-token-head cache, fewer tokens in flight (sliding and
    chunked layers only), more tensor-parallel GPUs."""
    out: list[Lever] = []
    kv = str(settings["kv_cache_dtype"])
    if kv in ("auto", "float16", "bfloat16"):
        out.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    if kv != "int4_per_token_head":
        out.append(("--kv-cache-dtype int4_per_token_head", {"kv_cache_dtype": "int4_per_token_head"}))
    batched = int(settings["max_num_batched_tokens"])
    if batched > 2048:
        out.append(("--max-num-batched-tokens 2048 (sliding and chunked layers)", {"max_num_batched_tokens": 2048}))
    tp = int(settings["tensor_parallel_size"])
    for more in (2 * tp, 4 * tp, 8 * tp):
        if more <= 8:
            out.append((f"--tensor-parallel-size {more}", {"tensor_parallel_size": more}))
    return out


MEMORY = EngineMemory(
    ENGINE, VERSION, f"proven against vLLM {VERSION}'s own spec builders and KV cache planner (run on CPU)",
    SETTINGS, cost, levers,
    notes=("defaults are vLLM's own on an H100 80GB under vllm serve (--max-num-batched-tokens 8192, async "
           "scheduling, prefix caching, FlashAttention 3)",
           "kv_cache_bytes is what one request of the context needs in the pool, per GPU, the hybrid allocator's "
           "padding included (what get_kv_cache_configs checks against the memory left)"),
    requests=max_concurrency)
