"""Model families transformers loads only with ``trust_remote_code``, and position mechanisms only the serving engines
implement, read the way the engine that serves them natively computes them (stdlib + numpy via ``frequencies``).

transformers 5.25 has no class for ChatGLM (``chatglm``), InternLM2 (``internlm2``), MiniCPM 1-4 (``minicpm``),
InternVL chat (``internvl_chat``), Qwen v1 (``qwen``), Baichuan (``baichuan``), LLaVA-llama (``llava_llama``) or VILA
(``vila``): it runs the model's own Python file, which posenc does not execute. What posenc reports for them is what
an engine's *own* model code computes, and it says which file the numbers come from:

* vLLM 0.34.0 serves ChatGLM 2/3/GLM-4 (``models/chatglm.py``; vLLM ships its own ``ChatGLMConfig``), InternLM2
  (``models/internlm2.py``), MiniCPM (``models/minicpm.py``) and InternVL chat (``models/internvl.py``, which builds
  the language model of ``llm_config`` by its architecture). Their rope goes through ``get_rope`` with the
  arguments listed per family below.
* vLLM 0.34.0 no longer serves Qwen v1 (``QWenLMHeadModel``) or Baichuan (``BaichuanForCausalLM``): its registry lists
  both as last supported in 0.23.0. SGLang 0.5.23 still does (``srt/models/qwen.py``, ``baichuan.py``), so their
  numbers come from SGLang's model code; SGLang's default and dynamic rotary classes are a fork of vLLM's.
* LLaVA-llama and VILA have no model class in vLLM 0.34.0 or SGLang 0.5.23: posenc names the family, and reports no
  engine numbers.
* HunYuan V1 (``hunyuan_v1_dense`` / ``hunyuan_v1_moe``) is transformers' own type, listed here for its rope: a
  "dynamic" ``rope_scaling`` with ``alpha`` is static NTK (transformers' ``ntk_alpha``; vLLM serves it through its
  Transformers backend, and its own ``DynamicNTKAlphaRotaryEmbedding`` computes the same base).

Engine-only mechanism: ``dual_chunk_attention_config`` (Qwen2.5-1M). transformers ignores it (plain RoPE over the
whole window); vLLM 0.34.0's ``get_rope`` builds a ``DualChunkRotaryEmbedding``, whose queries and keys see
positions folded into chunks of ``chunk_size - local_size``, but vLLM 0.34.0 has no dual-chunk attention backend any
more: ``Attention`` hands ``layer_idx`` and ``dual_chunk_attention_config`` to the backend's implementation class,
and none of the dense ones (FlashAttention, FlashInfer, Triton, CPU) takes them, so the model does not build until the
key is removed (``--hf-overrides '{"dual_chunk_attention_config": null}'``, then it is plain RoPE). SGLang 0.5.23 is
in the same state: its ``get_rope`` builds the same class (``layers/rotary_embedding/factory.py``), whose query comes
out five tables wide, and nothing under ``srt/layers/attention`` reads ``dual_chunk_attention_config`` any more (its
``dual_chunk_flash_attn`` backend is gone); posenc does not model what its attention then does.

The registry :data:`FAMILIES` is keyed by model type; :func:`read` picks the reader (a config without ``model_type``
is matched by its ``architectures``). Each reader returns an :class:`EngineReading`; :func:`engine_frequencies`
computes what the engine's rotary class computes from it, with the formulas of :mod:`posenc_cli.rope.frequencies`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.rope.attention_factors import longrope_attention_factor
from posenc_cli.rope.rope_types import ALIASES, DEFAULT_THETA

# numpy loads only when numbers are computed (``posenc_cli.models.model_positions`` imports this module)
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.rope.frequencies import Frequencies, RopeSpec

#: the engine versions the readings are proven against: posenc_cli.engines.vllm.VERSION and sglang.VERSION (a
#: lower stage cannot import them; tests/models/test_remote_code.py asserts they agree)
VLLM = "vLLM 0.34.0"
SGLANG = "SGLang 0.5.23"
_VLLM_MODELS = "vllm/model_executor/models/"
_SGLANG_MODELS = "sglang/srt/models/"
_DUAL_CHUNK_SOURCE = "vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py"


@dataclass(frozen=True)
class DualChunk:
    """``dual_chunk_attention_config`` as vLLM's ``DualChunkRotaryEmbedding`` reads it (``chunk_size``,
    ``local_size``; ``original_max_position_embeddings`` is not read by the rope)."""

    chunk_size: int
    local_size: int
    original: int | None = None

    @property
    def chunk_len(self) -> int:
        """Positions per chunk: ``chunk_size - local_size``."""
        return self.chunk_size - self.local_size

    def position_tables(self, max_position: int) -> dict[str, npt.NDArray[np.float32]]:
        """The positions of each cos/sin table ``DualChunkRotaryEmbedding._compute_cos_sin_cache`` builds (float32,
        as vLLM's ``torch.arange(..., dtype=torch.float)``); the forward indexes the query tables at
        ``position % chunk_len`` and the key table at ``position``."""
        import numpy as np

        n = self.chunk_len
        q = np.arange(n, dtype=np.float32)
        return {
            "q": q,  # intra-chunk queries
            "qc": np.minimum(q + np.float32(n), np.float32(self.chunk_size)).astype(np.float32),  # successive chunk
            "k": (np.arange(max_position, dtype=np.float32) % np.float32(n)).astype(np.float32),
            "qc_no_clamp": (q + np.float32(n)).astype(np.float32),
            "q_inter": (q + np.float32(self.chunk_size)).astype(np.float32),
        }


@dataclass(frozen=True)
class EngineReading:
    """One model as an engine's own model code reads it.

    ``rope`` is the ``rope_parameters`` dict the model class passes to ``get_rope`` (``rope_type``, ``rope_theta``,
    ``partial_rotary_factor``, ...); ``max_position`` its ``max_position`` argument (the cos/sin table's rows, and
    the reference length of static dynamic NTK); ``is_neox_style`` False means interleaved pairs (GPT-J layout).
    ``served`` is False when neither engine serves the family (no numbers then); ``rope`` is None for ALiBi.
    """

    family: str
    model_type: str | None
    engine: str
    source: str  # the engine file the numbers come from
    text: Mapping[str, Any]
    text_source: str
    head_dim: int | None
    max_position: int | None
    rope: dict[str, Any] | None
    is_neox_style: bool = True
    served: bool = True
    remote_code: bool = True  # transformers needs trust_remote_code for this model
    rope_class: str = "RotaryEmbedding"
    num_layers: int | None = None
    num_heads: int | None = None
    position_family: str = "rope"  # "alibi" for Baichuan 13B
    dual_chunk: DualChunk | None = None
    notes: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()  # config keys about positions the engine does not read
    refusal: dict[str, str] = field(default_factory=dict)  # engine -> why it will not serve this as configured

    @property
    def numbers_from(self) -> str:
        return f"{self.engine}'s {self.source}" if self.served else "no engine (not served)"

    @property
    def pair_layout(self) -> str:
        """``encodings.apply_rope``'s name for the layout: ``rotate-half`` (neox) or ``interleaved`` (GPT-J)."""
        return "rotate-half" if self.is_neox_style else "interleaved"

    @property
    def layout(self) -> str:
        return ("rotate-half pairs (is_neox_style=True)" if self.is_neox_style
                else "interleaved pairs (is_neox_style=False, GPT-J layout)")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PosencError(f"{where} = {value!r} is not a finite number")
    return float(value)


def _first(text: Mapping[str, Any], *keys: str) -> Any:
    return next((text[k] for k in keys if text.get(k) is not None), None)


def _heads_and_dim(text: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(heads, ``hidden_size // num_attention_heads``): every model class here derives its head dim that way."""
    heads = _int(_first(text, "num_attention_heads", "n_head"))
    hidden = _int(_first(text, "hidden_size", "n_embd"))
    return heads, (hidden // heads if heads and hidden else None)


def _layers(text: Mapping[str, Any]) -> int | None:
    return _int(_first(text, "num_hidden_layers", "num_layers", "n_layer"))


def standard_rope(text: Mapping[str, Any], *, theta_keys: tuple[str, ...] = ("rope_theta", "rotary_emb_base"),
                  partial_keys: tuple[str, ...] = ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"),
                  ) -> dict[str, Any]:
    """The flat rope dict vLLM's ``patch_rope_parameters`` (``vllm/transformers_utils/config.py``) and transformers'
    ``standardize_rope_params`` make of a remote-code config: the ``rope_scaling`` (or ``rope_parameters``) dict,
    legacy ``type`` as ``rope_type`` (``su`` -> ``longrope``), ``rope_theta`` from the first of ``theta_keys``
    (10000 when none is set), the rotary fraction from ``partial_keys``."""
    scaling = text.get("rope_parameters") or text.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, Mapping):
        raise PosencError(f"rope_scaling must be a JSON object or null, got {type(scaling).__name__}")
    rope: dict[str, Any] = dict(scaling or {})
    legacy = rope.pop("type", None)
    rope.setdefault("rope_type", legacy or "default")
    rope["rope_type"] = ALIASES.get(str(rope["rope_type"]), str(rope["rope_type"]))
    theta = _number(_first(text, *theta_keys), "rope_theta")
    rope.setdefault("rope_theta", theta if theta is not None else DEFAULT_THETA)
    partial = _number(_first(text, *partial_keys), "partial_rotary_factor")
    if partial is not None and partial != 1.0:
        rope.setdefault("partial_rotary_factor", partial)
    if rope["rope_type"] in ("longrope", "yarn") and "original_max_position_embeddings" not in rope:
        original = _int(_first(text, "original_max_position_embeddings", "max_position_embeddings"))
        if original is not None:
            rope["original_max_position_embeddings"] = original
    return rope


def _rope_class(rope: Mapping[str, Any]) -> str:
    """The class vLLM's ``get_rope`` builds for a rope dict (``rotary_embedding/__init__.py``)."""
    rope_type = rope.get("rope_type", "default")
    if rope_type == "dynamic":
        return "DynamicNTKAlphaRotaryEmbedding" if "alpha" in rope else "DynamicNTKScalingRotaryEmbedding"
    return {"default": "RotaryEmbedding", "linear": "LinearScalingRotaryEmbedding",
            "yarn": "YaRNScalingRotaryEmbedding", "llama3": "Llama3RotaryEmbedding",
            "longrope": "Phi3LongRoPEScaledRotaryEmbedding"}.get(str(rope_type), str(rope_type))


# ---------------------------------------------------------------------------------------------------------------
# family readers: (config, text config, where it was found) -> EngineReading

Reader = Callable[[Mapping[str, Any], Mapping[str, Any], str], "EngineReading | None"]  # None: transformers' rules


def _chatglm(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
    """vllm/model_executor/models/chatglm.py:98-114 (GLMAttention): rope over half the head, theta
    ``10000 * rope_ratio``, ``max_position = seq_length``, interleaved unless ``original_rope`` is false."""
    heads, head_dim = _heads_and_dim(text)
    ratio = _number(text.get("rope_ratio", 1.0), "rope_ratio") or 1.0
    rope = {"rope_type": "default", "rope_theta": 10000 * ratio, "partial_rotary_factor": 0.5}
    notes = ["vLLM reads its own ChatGLMConfig (no --trust-remote-code needed there); head dim is "
             "hidden_size // num_attention_heads, not kv_channels"]
    refusal: dict[str, str] = {}
    original_rope = text.get("original_rope")
    if original_rope is None:
        refusal["vllm"] = ("the config has no original_rope, which vLLM's chatglm.py reads unconditionally "
                           "(AttributeError: ChatGLM-6B v1 configs, 2D positions, are not served)")
    neox = not bool(original_rope) if original_rope is not None else False
    if text.get("position_encoding_2d"):
        notes.append(f"position_encoding_2d (ChatGLM-6B v1): {VLLM}'s ChatGLM is GLM 2/3/4 and has no 2D positions")
    if original_rope is False:
        notes.append(f"original_rope false: vLLM pairs features rotate-half; {SGLANG}'s chatglm.py always rotates "
                     "interleaved pairs (is_neox_style=False)")
    ignored = tuple(k for k in ("rope_theta", "rope_scaling", "max_position_embeddings") if k in text)
    return EngineReading("chatglm", _model_type(cfg), VLLM, _VLLM_MODELS + "chatglm.py", text, where, head_dim,
                         _int(text.get("seq_length", 2048)), rope, is_neox_style=neox, num_layers=_layers(text),
                         num_heads=heads, notes=tuple(notes), ignored=ignored, refusal=refusal)


def _llama_like(family: str, source: str, default_max: int = 8192) -> Reader:
    """Model classes that pass the standardised ``config.rope_parameters`` to ``get_rope`` with the whole head and
    ``max_position_embeddings`` (default ``default_max``): InternLM2 (internlm2.py:205-211), MiniCPM
    (minicpm.py:329-343)."""

    def reader(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
        heads, head_dim = _heads_and_dim(text)
        rope = standard_rope(text)
        max_position = _int(text.get("max_position_embeddings")) or default_max
        notes = ["vLLM loads this config class from the model's own Python file: it needs --trust-remote-code too"]
        if rope["rope_type"] == "dynamic" and "factor" in rope:
            notes.append(f"dynamic NTK in {VLLM} is static: the base is computed once from max_position over "
                         "max_trained_positions (as shipped: rope_theta, plain RoPE), its table has max_position rows, "
                         "yet vLLM accepts --max-model-len up to max_position x factor; transformers grows the base "
                         f"past max_position per sequence; {SGLANG} uses one table of max_position x factor rows "
                         "with the base transformers reaches at that length")
        return EngineReading(family, _model_type(cfg), VLLM, _VLLM_MODELS + source, text, where, head_dim,
                             max_position, rope, rope_class=_rope_class(rope), num_layers=_layers(text),
                             num_heads=heads, notes=tuple(notes))

    return reader


def _qwen(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
    """SGLang 0.5.23 srt/models/qwen.py:92-173 (vLLM 0.34.0 no longer serves QWenLMHeadModel): the whole head,
    ``get_rope_config`` (``rope_theta``, default 10000; ``rope_scaling``), ``config.max_position_embeddings``."""
    heads, head_dim = _heads_and_dim(text)
    rope = standard_rope(text, theta_keys=("rope_theta",), partial_keys=())
    ignored = tuple(k for k in ("rotary_emb_base", "rotary_pct", "use_dynamic_ntk", "use_logn_attn", "seq_length")
                    if k in text)
    notes = [f"{VLLM} does not serve QWenLMHeadModel (its registry: last supported in 0.23.0); numbers from "
             f"{SGLANG}'s qwen.py"]
    if text.get("use_dynamic_ntk") or text.get("use_logn_attn"):
        notes.append("the model's own code (modeling_qwen.py) grows its base per sequence (use_dynamic_ntk) and "
                     "scales queries by log(position)/log(seq_length) past seq_length (use_logn_attn); SGLang does "
                     "neither: plain RoPE")
    base = _number(text.get("rotary_emb_base"), "rotary_emb_base")
    if base is not None and base != rope["rope_theta"]:
        notes.append(f"rotary_emb_base {base:g} is not read by SGLang (it reads rope_theta, default 10000)")
    return EngineReading("qwen", _model_type(cfg), SGLANG, _SGLANG_MODELS + "qwen.py", text, where, head_dim,
                         _int(text.get("max_position_embeddings")), rope, num_layers=_layers(text), num_heads=heads,
                         notes=tuple(notes), ignored=ignored,
                         refusal={"vllm": f"{VLLM} does not serve QWenLMHeadModel (last supported in 0.23.0)"})


def _baichuan(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
    """SGLang 0.5.23 srt/models/baichuan.py:127-206 and 443-446: RoPE when ``hidden_size == 4096`` (Baichuan 2 7B),
    else ALiBi (13B); theta from ``get_rope_config``, ``max_position_embeddings`` (default 8192); no scaling."""
    heads, head_dim = _heads_and_dim(text)
    alibi = _int(text.get("hidden_size")) != 4096
    rope = None if alibi else {"rope_type": "default",
                               "rope_theta": standard_rope(text, theta_keys=("rope_theta",))["rope_theta"]}
    notes = [f"{VLLM} does not serve BaichuanForCausalLM (its registry: last supported in 0.23.0); read as "
             f"{SGLANG}'s baichuan.py: RoPE only for hidden_size 4096 (Baichuan 2 7B), ALiBi otherwise"]
    return EngineReading("baichuan", _model_type(cfg), SGLANG, _SGLANG_MODELS + "baichuan.py", text, where, head_dim,
                         _int(text.get("max_position_embeddings")) or 8192, rope, num_layers=_layers(text),
                         num_heads=heads, position_family="alibi" if alibi else "rope", notes=tuple(notes),
                         refusal={"vllm": f"{VLLM} does not serve BaichuanForCausalLM (last supported in 0.23.0)"})


def _not_served(family: str, text_key: str) -> Reader:
    """LLaVA-llama, VILA: no model class in vLLM 0.34.0 or SGLang 0.5.23; the family is named, no numbers."""

    def reader(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
        sub = cfg.get(text_key)
        inner = sub if isinstance(sub, Mapping) else text
        heads, head_dim = _heads_and_dim(inner)
        note = (f"{family}: transformers needs the model's own code, and neither {VLLM} nor {SGLANG} has a model "
                "class for it: posenc reports no engine numbers")
        return EngineReading(family, _model_type(cfg), "none", "", inner, text_key if inner is sub else where,
                             head_dim, _int(inner.get("max_position_embeddings")), None, served=False,
                             num_layers=_layers(inner), num_heads=heads, notes=(note,),
                             refusal={"vllm": note, "sglang": note})

    return reader


def _hunyuan(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading | None:
    """HunYuan V1 with ``alpha`` in its "dynamic" rope_scaling: transformers 5.25's own class
    (modeling_hunyuan_v1_dense.py:298-305, 342-356) turns it into ``ntk_alpha``, a static base
    ``rope_theta * alpha ** (d / (d - 2))``; vLLM 0.34.0 serves HunYuanDenseV1/MoEV1ForCausalLM through its
    Transformers backend (that same code), and its own ``DynamicNTKAlphaRotaryEmbedding`` (get_rope with ``alpha``)
    computes the same base. Without ``alpha``: None (transformers' generic rules)."""
    rope = standard_rope(text)
    if rope["rope_type"] != "dynamic" or not rope.get("alpha"):
        return None
    heads, head_dim = _heads_and_dim(text)
    head_dim = _int(text.get("head_dim")) or head_dim
    alpha = _number(rope["alpha"], "rope_scaling.alpha")
    # framework fact: the keys HunYuan's config files write beside alpha (its model code reads none of them)
    ignored = tuple(k for k in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim") if k in rope)
    notes = ("HunYuan labels this rope 'dynamic', but a fixed alpha makes it static NTK (transformers: ntk_alpha): "
             "the base does not grow with the sequence; the other rope_scaling keys are not read",
             f"{VLLM} serves HunYuan V1 through its Transformers backend (transformers' own code)")
    return EngineReading("hunyuan", _model_type(cfg), "transformers 5.25",
                         "transformers/models/hunyuan_v1_dense/modeling_hunyuan_v1_dense.py", text, where, head_dim,
                         _int(text.get("max_position_embeddings")),
                         {"rope_type": "ntk_alpha", "rope_theta": rope["rope_theta"], "alpha": alpha},
                         remote_code=False, rope_class="HunYuanDenseV1RotaryEmbedding, ntk_alpha",
                         num_layers=_layers(text), num_heads=heads, notes=notes, ignored=ignored,
                         refusal={"llama.cpp": "not modelled: posenc has no model of what llama.cpp's converter "
                                               "writes for HunYuan's ntk_alpha"})


_INTERNVL_LLM = {"InternLM2ForCausalLM": "internlm2"}
#: language models of transformers' own types: their vLLM class reads the standard keys (qwen2.py:268, llama.py:266)
_INTERNVL_NATIVE_LLM = {"Qwen2ForCausalLM": ("qwen2", "qwen2.py", 32768),
                        "LlamaForCausalLM": ("llama", "llama.py", 8192)}


def _internvl_chat(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
    """vllm/model_executor/models/internvl.py:609-622: the language model is built from ``llm_config`` by its
    architecture (InternLM2, Qwen2, Llama, ...). InternLM2 is read as above; a transformers type (qwen2, llama) is
    read with the generic rules, which are that class's."""
    llm = cfg.get("llm_config")
    if not isinstance(llm, Mapping):
        raise PosencError("internvl_chat config has no llm_config object (the language model's config)")
    archs = llm.get("architectures") or []
    arch = str(archs[0]) if archs else ""
    inner = _INTERNVL_LLM.get(arch, "")
    family, source, default_max = _INTERNVL_NATIVE_LLM.get(arch, ("internvl_chat", "internvl.py", 8192))
    reader = FAMILIES[inner] if inner else _llama_like(family, source, default_max)
    reading = reader(cfg, llm, "llm_config")
    assert reading is not None  # these readers always read
    note = (f"InternVL chat: vision + language model; text model read from llm_config "
            f"(architectures {list(archs)}) as {VLLM}'s internvl.py builds it")
    return EngineReading("internvl_chat", _model_type(cfg), VLLM, _VLLM_MODELS + "internvl.py -> " + reading.source,
                         llm, "llm_config", reading.head_dim, reading.max_position, reading.rope,
                         reading.is_neox_style, rope_class=reading.rope_class, num_layers=reading.num_layers,
                         num_heads=reading.num_heads, notes=(note, *reading.notes))


def _model_type(cfg: Mapping[str, Any]) -> str | None:
    value = cfg.get("model_type")
    return str(value) if value else None


#: Remote-code families by model type: reader, and what names the family in ``architectures`` when a config has no
#: model_type.
FAMILIES: dict[str, Reader] = {
    "chatglm": _chatglm,
    "internlm2": _llama_like("internlm2", "internlm2.py"),
    "minicpm": _llama_like("minicpm", "minicpm.py"),
    "internvl_chat": _internvl_chat,
    "qwen": _qwen,
    "baichuan": _baichuan,
    "llava_llama": _not_served("llava_llama", "text_config"),
    "vila": _not_served("vila", "llm_cfg"),
    "hunyuan_v1_dense": _hunyuan,
    "hunyuan_v1_moe": _hunyuan,
}
_ARCHITECTURES = {
    "ChatGLMModel": "chatglm", "ChatGLMForConditionalGeneration": "chatglm", "InternLM2ForCausalLM": "internlm2",
    "MiniCPMForCausalLM": "minicpm", "InternVLChatModel": "internvl_chat", "QWenLMHeadModel": "qwen",
    "BaichuanForCausalLM": "baichuan", "BaiChuanForCausalLM": "baichuan", "LlavaLlamaForCausalLM": "llava_llama",
    "LlavaLlamaModel": "vila", "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense",
    "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe",
}


def family_of(cfg: Mapping[str, Any]) -> str | None:
    """The remote-code family a config belongs to: its model_type, else its first known architecture."""
    model_type = str(cfg.get("model_type") or "")
    if model_type:
        return model_type if model_type in FAMILIES else None
    for arch in cfg.get("architectures") or []:
        if isinstance(arch, str) and arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    return None


def _dual_chunk(cfg: Mapping[str, Any], text: Mapping[str, Any], where: str) -> EngineReading:
    """vllm/model_executor/models/qwen2.py:249-275 + rotary_embedding/__init__.py:87-101: Qwen2 (and Qwen2-MoE,
    Qwen3, Qwen3-MoE) pass ``dual_chunk_attention_config`` to ``get_rope``, which then builds a
    ``DualChunkRotaryEmbedding`` over the whole head with ``rope_theta`` (no scaling class)."""
    dca = text["dual_chunk_attention_config"]
    if not isinstance(dca, Mapping):
        raise PosencError("dual_chunk_attention_config must be a JSON object")
    chunk, local = _int(dca.get("chunk_size")), _int(dca.get("local_size"))
    if chunk is None or local is None or not 0 <= local < chunk:
        raise PosencError(f"dual_chunk_attention_config needs whole numbers 0 <= local_size < chunk_size, got "
                          f"chunk_size {dca.get('chunk_size')!r}, local_size {dca.get('local_size')!r}")
    dual = DualChunk(chunk, local, _int(dca.get("original_max_position_embeddings")))
    heads = _int(text.get("num_attention_heads"))
    head_dim = _int(text.get("head_dim")) or _heads_and_dim(text)[1]
    scaled = standard_rope(text)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": scaled["rope_theta"]}
    if "partial_rotary_factor" in scaled:
        rope["partial_rotary_factor"] = scaled["partial_rotary_factor"]
    default_max = 32768 if str(text.get("model_type", "")).startswith("qwen2") else 8192
    max_position = _int(text.get("max_position_embeddings")) or default_max
    ignored = ("rope_scaling",) if scaled["rope_type"] != "default" else ()
    notes = (f"dual chunk attention: transformers ignores dual_chunk_attention_config and runs plain RoPE over "
             f"{max_position:,} positions; {VLLM} folds positions into chunks of {dual.chunk_len:,} "
             f"(chunk_size {chunk:,} - local_size {local:,}): keys at position % {dual.chunk_len:,}, queries at "
             f"position % {dual.chunk_len:,} (intra-chunk), + {dual.chunk_len:,} clamped to {chunk:,} (successive "
             f"chunk) and {chunk:,} (inter-chunk), so no query-key distance exceeds {chunk:,}",
             f"{VLLM} builds that rope (dual_chunk_rope.py) but has no dual-chunk attention backend: its dense "
             "attention implementations take no layer_idx / dual_chunk_attention_config, so the model does not "
             "build; --hf-overrides '{\"dual_chunk_attention_config\": null}' serves it as plain RoPE. "
             f"{SGLANG} builds the same rope but has no dual-chunk attention backend either")
    refusal = {"vllm": (f"dual_chunk_attention_config: {VLLM}'s attention backends take no dual-chunk "
                        "arguments (TypeError when the attention layers are built); serve with --hf-overrides "
                        "'{\"dual_chunk_attention_config\": null}' for plain RoPE"),
               "sglang": (f"not modelled: {SGLANG} builds DualChunkRotaryEmbedding (a query five tables wide) "
                          "but has no dual-chunk attention backend; posenc does not model what its attention does "
                          "with it")}
    return EngineReading("dual_chunk", _model_type(cfg), VLLM, _DUAL_CHUNK_SOURCE, text, where, head_dim,
                         max_position, rope, rope_class="DualChunkRotaryEmbedding", num_layers=_layers(text),
                         num_heads=heads, dual_chunk=dual, remote_code=False, notes=notes, ignored=ignored,
                         refusal=refusal)


def read(cfg: Mapping[str, Any]) -> EngineReading | None:
    """The engine reading of a remote-code family or an engine-only mechanism, or None (transformers' own rules
    apply)."""
    family = family_of(cfg)
    if family is not None:
        return FAMILIES[family](cfg, cfg, "")
    sub = cfg.get("text_config")
    text = sub if isinstance(sub, Mapping) else cfg
    if text.get("dual_chunk_attention_config") is not None:
        return _dual_chunk(cfg, text, "text_config" if text is sub else "")
    return None


# ---------------------------------------------------------------------------------------------------------------
# numbers


def spec(reading: EngineReading, params: Mapping[str, Any] | None = None) -> RopeSpec:
    """The rope the engine's rotary class is built with, as a :class:`RopeSpec` (rotary dim =
    ``head_dim * partial_rotary_factor``, as ``get_rope`` computes it)."""
    from posenc_cli.rope.frequencies import RopeSpec

    if reading.head_dim is None:
        raise PosencError("the config has neither hidden_size nor num_attention_heads; cannot tell the head dim")
    if reading.max_position is None:
        raise PosencError("the config has no max_position_embeddings")
    rope = params if params is not None else reading.rope
    if rope is None:
        raise PosencError(f"{reading.family} applies no RoPE")
    return RopeSpec(rope, reading.head_dim, reading.max_position, default_partial=True)


def engine_frequencies(reading: EngineReading, params: Mapping[str, Any] | None = None,
                       max_model_len: int | None = None) -> Frequencies:
    """inv_freq and cos/sin magnitude of the engine's rotary class for ``reading`` (``params``: one group's rope dict,
    default ``reading.rope``), serving ``max_model_len`` (default ``max_position``; only LongRoPE reads it).

    * ``RotaryEmbedding`` / ``DualChunkRotaryEmbedding``: ``1 / theta ** (arange(0, d, 2) / d)``;
    * ``DynamicNTKScalingRotaryEmbedding``: static, the base computed once from ``max_position`` over
      ``max_trained_positions`` (default the same, so as shipped it is ``rope_theta``);
    * ``DynamicNTKAlphaRotaryEmbedding``: ``theta * alpha ** (d / (d - 2))`` (frequencies' ``ntk_alpha``);
    * ``Phi3LongRoPEScaledRotaryEmbedding``: the long factors for every sequence once ``max_model_len`` passes the
      original length; magnitude ``sqrt(1 + ln(s) / ln(original))``, ``s = max_position / original`` (or
      ``short_mscale`` / ``long_mscale``);
    * anything else: transformers' formula for the rope type (linear, yarn, llama3 are the same in vLLM).
    """
    from posenc_cli.rope.frequencies import Frequencies, compute, default_inv_freq, dynamic_base

    s = spec(reading, params)
    p = s.params
    rope_type = s.rope_type
    d = s.rotary_dim
    if rope_type == "dynamic" and "alpha" in p:  # get_rope: DynamicNTKAlphaRotaryEmbedding, transformers' ntk_alpha
        return compute(spec(reading, {**p, "rope_type": "ntk_alpha"}), None)
    if rope_type == "dynamic":
        if "factor" not in p:
            raise PosencError("dynamic rope scaling must contain either 'alpha' or 'factor' (vLLM's get_rope)")
        trained = int(p.get("max_trained_positions", s.max_position_embeddings))
        base = dynamic_base(s.theta, float(p["factor"]), s.max_position_embeddings, trained, d)
        how = f"static: from max_position {s.max_position_embeddings:,} over max_trained_positions {trained:,}"
        inv = default_inv_freq(base, d)
        band = "kept" if base == s.theta else "rebased"
        return Frequencies(inv, 1.0, default_inv_freq(s.theta, d), [band] * inv.size,
                           {"effective_theta": base, "how": how})
    if rope_type == "longrope":
        original = int(p["original_max_position_embeddings"])
        long = (max_model_len or s.max_position_embeddings) > original
        freqs = compute(s, original + 1 if long else original)
        key = "long_mscale" if long else "short_mscale"
        freqs.attention_factor = float(p[key]) if key in p else longrope_attention_factor(
            {}, s.max_position_embeddings / original, original)
        freqs.details["static"] = f"{'long' if long else 'short'} factors for every sequence"
        return freqs
    if rope_type == "default":
        return compute(s, None)
    return compute(s, max_model_len)


def check_refusal(reading: EngineReading, engine: str) -> str | None:
    """Why ``posenc check`` does not compare ``engine`` for this reading, or None (compare as usual). A message
    starting "not modelled" means nothing was judged; any other is the engine refusing the model as configured."""
    if engine in reading.refusal:
        return reading.refusal[engine]
    if reading.remote_code:
        return (f"not modelled: transformers needs trust_remote_code for {reading.family}, so there is no "
                f"transformers reference to compare {engine} with (posenc inspect shows {reading.numbers_from})")
    return None


#: Families whose engine model code builds its rope without reading rope_scaling / rope_parameters.
_FIXED_ROPE = {"chatglm": "vLLM's chatglm.py builds a plain rope from rope_ratio alone (theta 10000 * rope_ratio)",
               "baichuan": "SGLang's baichuan.py passes only rope_theta to get_rope"}


def scaling_advice(reading: EngineReading) -> tuple[str | None, str | None]:
    """(why a scaled config would change nothing, or None; a note for a scaled config) for ``posenc scale`` and
    ``pick``: transformers' numbers for the scaled file are not what this model's own code or its engine computes."""
    if reading.family in _FIXED_ROPE:
        return (f"{reading.family}: {_FIXED_ROPE[reading.family]}; it never reads rope_scaling, so a scaled config "
                "changes nothing it computes", None)
    if reading.dual_chunk is not None:
        return None, (f"dual_chunk_attention_config is set: {VLLM}'s DualChunkRotaryEmbedding reads only rope_theta "
                      "(no scaling), and vLLM will not start with the key; remove it to serve the scaled rope")
    if reading.remote_code:
        where = reading.numbers_from if reading.served else "no engine"
        return None, (f"{reading.family} is remote code: the scaled keys are what {where} reads; transformers runs the "
                      "model's own Python file, whose rope posenc has not compared")
    return None, None


def v5_refusal(cfg: Mapping[str, Any]) -> str | None:
    """Why a transformers 5 ``rope_parameters`` file would break a remote-code model, or None. The remote config
    classes were written for transformers 4: they take ``rope_scaling`` (and ``rope_theta``) as arguments and their
    modeling files read ``config.rope_scaling``, so moving the scaling to ``rope_parameters`` drops it there."""
    reading = read(cfg)
    if reading is None or not reading.remote_code:
        return None
    return (f"{reading.family} is remote code written for transformers 4: its own config class and modeling file read "
            "rope_scaling, so a v5 rope_parameters file would lose the scaling there; write v4 keys")


def engine_section(reading: EngineReading) -> dict[str, Any]:
    """What ``posenc inspect`` says about the engine reading (JSON-ready)."""
    out: dict[str, Any] = {
        "family": reading.family,
        "transformers_needs_remote_code": reading.remote_code,
        "numbers_from": reading.numbers_from,
        "engine": reading.engine if reading.served else None,
        "source": reading.source or None,
        "rope_class": reading.rope_class if reading.rope is not None and reading.served else None,
        "is_neox_style": reading.is_neox_style,
        "layout": reading.layout,
        "max_position": reading.max_position,
        "ignored_keys": list(reading.ignored),
        "will_not_serve": dict(reading.refusal),
    }
    if reading.dual_chunk is not None:
        dc = reading.dual_chunk
        n = dc.chunk_len
        out["dual_chunk"] = {
            "chunk_size": dc.chunk_size, "local_size": dc.local_size, "chunk_len": n,
            "original_max_position_embeddings": dc.original,
            "key_positions": f"position % {n}",
            "query_positions": {"intra": f"position % {n}", "successive": f"min(position % {n} + {n}, {dc.chunk_size})",
                                "inter": f"{min(2 * n - 1, dc.chunk_size)}",
                                "successive_critical": f"position % {n} + {n}",
                                "inter_critical": f"position % {n} + {dc.chunk_size}"},
            "largest_rotated_position": n - 1 + dc.chunk_size,
        }
    return out
