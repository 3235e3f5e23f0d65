"""What each transformers config class assumes about positions, per model type (stdlib only).

What each config class assumes is generated, not written by hand: ``model_types.json`` (written by
``tests/harness/generate_model_types.py`` from the installed transformers, read here without importing it) holds, per
model type, the path to the decoder's config, the class defaults of every attribute the rotary embedding reads, its
``attribute_map`` aliases, how its head dim is derived, whether plain RoPE honours ``partial_rotary_factor``, what the
class builds from the keys real files carry (``conversions``, probed: MiniMax-M2's ``rotary_dim``, Dots3's
``swa_rope_theta``, a flat dict on a per-layer class, keys beside layer-type dicts) and the layer types it builds when
a file names none (MiMo-V2-Flash). :data:`_RULES` keeps only what no attribute or probe shows (code in a config class
or an attention module), each entry needed by a test. :func:`kind_of` joins the two into one :class:`Kind`.

Also here: whether the installed transformers is newer than the one the data was generated from
(:func:`newer_transformers_notice`), read from package metadata without importing it.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posenc_cli.models.value_checks import int_or_none
from posenc_cli.rope.rope_types import DEFAULT_THETA


@dataclass(frozen=True)
class Kind:
    """What a text model type's config class assumes when config.json is silent."""

    theta: float = DEFAULT_THETA
    head_dim: int | None = None  # class default head_dim (None: hidden_size // num_attention_heads)
    max_positions: int | None = None
    partial: float | None = None  # class default partial_rotary_factor
    mla: bool = False  # head_dim is qk_rope_head_dim; softmax scale gets mscale**2
    original: int | None = None  # a class *field* original_max_position_embeddings (phi3), which always wins
    neox: float | None = None  # GPT-NeoX: reads only rotary_emb_base / rotary_pct (this default pct)
    resolver: str = "flat"
    default_rope: dict[str, Any] | None = None  # the rope dict the class builds when the config has none
    default_partial: bool = False  # plain (default) RoPE applies partial_rotary_factor
    known: bool = False  # transformers has this text config class (generated data) or posenc a rule for it
    defaults: Mapping[str, Any] = field(default_factory=dict)  # class defaults of sizes, window, MLA dims, ...
    aliases: Mapping[str, str] = field(default_factory=dict)  # the class's attribute_map
    head_dim_times: int | None = None  # config.head_dim = times * hidden_size // num_attention_heads, always
    image: bool = False  # a vision encoder: its rotary embedding turns with 2-D patch coordinates
    scales: bool = True  # the rotary class applies the rope type (ESM's computes plain RoPE whatever it says)
    conversions: Mapping[str, Any] = field(default_factory=dict)  # what the class builds from keys files carry
    layer_rule: Mapping[str, Any] | None = None  # the layer types the class builds when a file names none


@functools.lru_cache(maxsize=1)
def generated() -> dict[str, Any]:
    """``model_types.json``: what transformers' config classes assume about positions, per model type, written by
    ``tests/harness/generate_model_types.py`` from the installed transformers (its version is in ``"transformers"``)."""
    data: dict[str, Any] = json.loads(Path(__file__).with_name("model_types.json").read_text(encoding="utf-8"))
    return data


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release segments of a version string (``5.26.0.dev0`` -> ``(5, 26, 0)``)."""
    parts = []
    for piece in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def installed_version(package: str) -> str | None:
    """The version of ``package`` that ``import`` would load, from the name of the first ``NAME-VERSION.dist-info``
    directory on ``sys.path`` (what ``importlib.metadata.version`` finds first), or None. A directory scan: importing
    ``importlib.metadata`` alone cost ``posenc inspect`` about 10 ms of its 130."""
    import os
    import sys

    def normal(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    wanted = normal(package)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name.removesuffix(".dist-info").rpartition("-")
                if normal(dist) == wanted and version:
                    return version
    return None


def newer_transformers_notice() -> str | None:
    """One line for stderr when the installed transformers is newer than the one ``model_types.json`` was generated
    from (new model types, changed class defaults: posenc may read them otherwise than it does), else None (also when
    transformers is not installed). Reads the installed version from its package metadata: nothing is imported."""
    installed = installed_version("transformers")
    if installed is None:
        return None
    data = str(generated()["transformers"])
    if _release(installed) <= _release(data):
        return None
    return (f"note: transformers {installed} is installed, newer than {data}, which posenc's model-type data was "
            "generated from: model types or class defaults added since may read otherwise; upgrade posenc, or in "
            "a checkout run python tests/harness/generate_model_types.py")


#: What the generated data cannot hold, per text model type: code in the config class or the attention module that
#: no attribute shows. Each entry is needed by a test in tests/models/test_model_types.py or
#: tests/models/test_corpus.py.
_RULES: dict[str, dict[str, Any]] = {
    # per-layer-type rope built in the class's code (see the module docstring)
    "gemma3_text": {"resolver": "gemma3"},
    "olmo3": {"resolver": "olmo3"},
    "deepseek_v4": {"resolver": "deepseek_v4"},
    # Gemma 4's head_dim is a per-layer attribute that transformers refuses to read globally
    "gemma4_text": {"resolver": "gemma4", "head_dim": 256},
    "gemma4_unified_text": {"resolver": "gemma4", "head_dim": 256},
    "diffusion_gemma_text": {"resolver": "gemma4", "head_dim": 256},
    "embedding_gemma2_text": {"resolver": "gemma4", "head_dim": 256},
    # MLA: the rope rotates qk_rope_head_dim and the attention module multiplies its softmax scale by mscale**2
    "deepseek_v2": {"mla": True}, "deepseek_v3": {"mla": True}, "deepseek_v32": {"mla": True},
    "minicpm3": {"mla": True},
    # a class field that overrides the dict's original length
    "phi3": {"original": 4096},
    # GPT-NeoX reads rotary_emb_base / rotary_pct, never rope_theta / partial_rotary_factor
    "gpt_neox": {"neox": 0.25}, "gpt_neox_japanese": {"neox": 1.0},
    # vision encoders whose rotary embedding is 2-D over image patches: no sequence positions to report
    "efficientloftr": {"image": True}, "eomt_dinov3": {"image": True}, "mlcd_vision_model": {"image": True},
    "sam3_vit_model": {"image": True},
    # rotate `rotary_dim` features in their own attention code (no rotary class for the generator to probe)
    "gptj": {"default_partial": True, "known": True}, "codegen": {"default_partial": True, "known": True},
}


def text_kind(text: Mapping[str, Any], text_type: str) -> Kind:
    """:func:`kind_of`, and a DeepSeek-V2 text whose file says ``use_mla: false`` (DeepSeek-VL2's remote code, and
    vLLM, then build plain multi-head attention: rope over all ``hidden_size / heads`` dims, no mscale on the
    softmax) read without MLA."""
    kind = kind_of(text_type)
    if kind.mla and text.get("use_mla") is False:
        # the class's head_dim (= qk_rope_head_dim) is MLA's; plain attention splits hidden_size over the heads
        return replace(kind, mla=False, head_dim=None,
                       defaults={k: v for k, v in kind.defaults.items() if k != "head_dim"})
    return kind


@functools.cache
def kind_of(text_type: str) -> Kind:
    """The class facts of a text model type: generated from transformers, then the hand-written :data:`_RULES`."""
    gen = generated()["text"].get(text_type)
    fields: dict[str, Any] = {}
    if gen is not None:
        rope = gen.get("rope")
        head = gen.get("head_dim") or {}
        defaults = dict(gen.get("defaults") or {})
        theta = gen.get("theta")
        if theta is None and rope and isinstance(rope.get("full_attention"), Mapping):
            theta = rope["full_attention"].get("rope_theta")  # per-layer defaults: the full-attention layers'
        fields = {
            "theta": float(theta) if theta is not None else DEFAULT_THETA,
            "head_dim": head.get("default"),
            "max_positions": int_or_none(defaults.get("max_position_embeddings")),
            "partial": gen.get("partial") if gen.get("partial") != 1.0 else None,  # 1.0 rotates all: no key
            "default_rope": rope if rope and (any(isinstance(v, Mapping) for v in rope.values())
                                              or rope.get("rope_type", "default") != "default") else None,
            "default_partial": bool(gen.get("default_partial")),
            "known": True,
            "defaults": defaults,
            "aliases": dict(gen.get("aliases") or {}),
            "head_dim_times": head.get("times") if head.get("derived") and head.get("times", 1) != 1 else None,
            "scales": bool(gen.get("scales", True)),
            "conversions": dict(gen.get("conversions") or {}),
            "layer_rule": gen.get("layer_types"),
        }
    fields.update(_RULES.get(text_type, {}))
    return Kind(**fields)


#: Remote-code model types (no config class in transformers) read with Llama's rules: theta 10000, plain RoPE over
#: the whole head.
LLAMA_LIKE = frozenset({"internlm2", "yi", "baichuan"})


def accepted_rope_types(text_type: str) -> frozenset[str] | None:
    """The rope types the text config class builds a rotary embedding for (Phi-3's rejects all but longrope), as
    probed from transformers; None when unknown (a remote-code type, a per-layer class)."""
    gen = generated()["text"].get(text_type)
    accepts = gen.get("accepts") if gen else None
    return frozenset(accepts) if accepts is not None else None


#: generated reason for a model type transformers builds no rotary embedding for (tests/harness/generate_model_types.py)
NO_ROTARY = "its decoder has no rotary embedding"


def known_type(model_type: str) -> bool:
    data = generated()
    return model_type in data["models"] or model_type in data["text"] or model_type in data["without_rotary"] \
        or model_type in _RULES


#: Model types whose attention adds ALiBi's linear bias instead of rotating (no rotary class in transformers).
ALIBI_TYPES = frozenset({"bloom", "mpt"})


def arch_types() -> frozenset[str]:
    """Model types an ``architectures`` entry can name when a (remote-code) config has no model_type of its own."""
    return frozenset(generated()["models"]) | frozenset(_RULES) | ALIBI_TYPES | LLAMA_LIKE | {"chatglm"}


def generated_layer_types(kind: Kind, n: int | None) -> list[str] | None:
    """The layer types the config class builds when the file names none and they depend on the layer index alone
    (generated ``layer_types``: MiMo-V2-Flash's full attention at layer 0 and every sixth)."""
    rule = kind.layer_rule
    if not rule or n is None:
        return None
    head, cycle = list(rule["head"]), list(rule["cycle"])
    return [head[i] if i < len(head) else cycle[(i - len(head)) % len(cycle)] for i in range(n)]
