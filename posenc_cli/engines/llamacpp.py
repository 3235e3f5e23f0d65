"""llama.cpp (as vendored in llama-cpp-python :data:`PACKAGE_VERSION`, the one place its version is written;
pyproject's ``engines`` extra pins the same, a test asserts it): what a GGUF converted from the model computes with
the flags posenc gives (``common/arg.cpp``, ``src/llama-context.cpp``, ``ggml`` ``rope_yarn``).

* Flags: ``--rope-scaling {none,linear,yarn}``, ``--rope-scale S`` (frequency scale 1/S), ``--rope-freq-base``,
  ``--yarn-orig-ctx``, ``--yarn-beta-fast``/``--yarn-beta-slow`` (always written: the defaults differ per
  architecture), ``--ctx-size``.
* YaRN's correction range is always floored and ceiled: transformers' ``truncate: false`` (gpt-oss) cannot be
  reproduced, and the difference is measured, not estimated.
* In YaRN mode llama.cpp overwrites ``--yarn-attn-factor`` and uses ``(0.1 ln s + 1)`` times the GGUF's
  ``rope.scaling.attn_factor``: another attention factor A is set with
  ``--override-kv ARCH.rope.scaling.attn_factor=float:A/(0.1 ln s + 1)``.
* deepseek2 (DeepSeek V2/V3, Kimi K2) is different (``llama-context.cpp``, ``models/deepseek2.cpp``): the magnitude
  is ``rope.scaling.attn_factor`` itself and the softmax is scaled by ``(attn_factor mscale(s, m_all))^2``, with
  ``m_all`` the GGUF's ``yarn_log_multiplier`` / 0.1 (:mod:`posenc_cli.models.gguf.deepseek2`); the flags give the
  log multiplier explicitly and ``attn_factor`` only when it is not 1 (:func:`_deepseek2_yarn`).
* llama-server (not llama-cpp-python's server) caps each slot's context at the model's training context
  (``server-context.cpp``, ``n_ctx_slot``): the GGUF's ``context_length``, which ``llama_init_from_model``
  re-adjusts to ``yarn_orig_ctx / freq_scale`` only for YaRN flags whose scale differs from the GGUF's own. Past it,
  the llama-server flags add ``--override-kv ARCH.context_length=int:N`` (:func:`server_slot_context`).
* What conversion bakes into the GGUF has no flag: llama3 scaling (the ``rope_freqs`` tensor, which also applies
  on top of any flag: :func:`stacking` says when flags would stack on it) and LongRoPE (``rope_factors_long``/
  ``_short``, chosen once per context by ``--ctx-size``). A model that already has them runs them from its GGUF; a
  new llama3 or LongRoPE scaling cannot be given by flags.
  There is no dynamic NTK: a converted dynamic model runs plain RoPE.

:func:`flags` is stdlib (``posenc scale --engine llama.cpp`` renders it without numpy); :func:`run` computes.
"""

from __future__ import annotations

import math
import shlex
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.render import served_rope
from posenc_cli.engines.runs import EngineRun, GroupRun, static_longrope
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.deepseek2 import deepseek2_keys
from posenc_cli.models.gguf.metadata import DEEPSEEK_ARCHS
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale
from posenc_cli.rope.rope_types import param
from posenc_cli.rope.scaling import rope_parameters
from posenc_cli.units import format_number

if TYPE_CHECKING:  # the reader loads only when an engine runs a model
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.models.record import RopeGroup

NAME = "llama.cpp"
#: the llama-cpp-python release whose vendored llama.cpp posenc models
PACKAGE_VERSION = "0.3.36"
VERSION = f"llama-cpp-python {PACKAGE_VERSION}"
# llama.cpp's GGUF architecture names for transformers model types, where they differ
GGUF_ARCH = {"gpt_oss": "gpt-oss", "qwen2_5_vl_text": "qwen2vl", "deepseek_v3": "deepseek2", "deepseek_v2": "deepseek2",
             "mistral": "llama", "mixtral": "llama", "gemma3_text": "gemma3", "llama4_text": "llama4",
             "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "glm4_moe": "glm4moe"}


class NoEquivalent(PosencError):
    """The scaling cannot be expressed with llama.cpp's flags."""


@dataclass
class Flags:
    argv: list[str]
    warnings: list[str] = field(default_factory=list)
    attention_factor: float | None = None  # the cos/sin magnitude these flags give (YaRN)
    softmax_scale: float | None = None  # the softmax multiplier these flags give (deepseek2 YaRN), else the model's
    server_only: list[str] = field(default_factory=list)  # what llama-server needs beyond llama-cpp-python's server


def _float32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _readjusted_training_context(options: Mapping[str, str], gguf_factor: float | None) -> int | None:
    """The training context llama.cpp sets after YaRN flags whose frequency scale differs from the GGUF's own:
    ``yarn_orig_ctx / freq_scale`` in float32, truncated (``llama_init_from_model``, after the context is made, so
    an ``--override-kv`` of ``context_length`` cannot change it); None when these flags do not re-adjust it."""
    if options.get("--rope-scaling") != "yarn" or "--rope-scale" not in options or "--yarn-orig-ctx" not in options:
        return None
    scale = _float32(1.0 / _float32(float(options["--rope-scale"])))
    own = _float32(1.0 / _float32(gguf_factor)) if gguf_factor else 1.0
    if scale == own:
        return None
    return int(_float32(_float32(float(options["--yarn-orig-ctx"])) / scale))


def server_slot_context(argv: list[str], n_ctx: int, gguf_context: int, gguf_factor: float | None) -> int:
    """The context of one llama-server slot started with ``argv`` (flags as :func:`flags` writes them, an
    ``--override-kv ARCH.context_length`` included) and ``--ctx-size n_ctx``, on a GGUF whose ``context_length`` is
    ``gguf_context`` and ``rope.scaling.factor`` ``gguf_factor``: at most the training context (the GGUF's, or the
    override's), which YaRN flags with another frequency scale than the GGUF's re-adjust. The default ``-np``
    (auto: 4 slots, unified KV) gives each slot the whole ``n_ctx``."""
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    trained = gguf_context
    override = options.get("--override-kv", "")
    if ".context_length=int:" in override:
        trained = int(override.rsplit(":", 1)[1])
    readjusted = _readjusted_training_context(options, gguf_factor)
    return min(n_ctx, trained if readjusted is None else readjusted)


def _deepseek2_linear(out: Flags, params: Mapping[str, Any], factor: float, arch: str) -> None:
    """deepseek2 with linear scaling: the ``yarn_log_multiplier`` override that gives transformers' softmax scale
    (:func:`posenc_cli.models.gguf.deepseek2.deepseek2_keys`)."""
    keys = deepseek2_keys(params)
    out.argv += ["--override-kv", f"{arch}.rope.scaling.yarn_log_multiplier=float:{keys.log_multiplier!r}"]
    out.attention_factor, out.softmax_scale = keys.magnitude, keys.softmax


def _deepseek2_yarn(out: Flags, params: Mapping[str, Any], factor: float, arch: str) -> None:
    """deepseek2: the overrides that give transformers' magnitude and softmax scale on any GGUF of the model
    (:func:`posenc_cli.models.gguf.deepseek2.deepseek2_keys`). The converter writes ``yarn_log_multiplier`` from
    the config's mscale_all_dim, which a request can change, so it is always given (``--override-kv``), and
    ``attn_factor`` whenever it is not llama.cpp's 1: the same flags are then right on the GGUF of the shipped
    config and on one of the patched config, and ``posenc check`` of the patched config prints them too. No
    ``attn_factor`` override for DeepSeek V2/V3 as shipped, and none for a new factor for them (issue 18: the
    override posenc printed before moved the logits by 1.5-1.6 relative).
    """
    keys = deepseek2_keys(params)
    out.argv += ["--override-kv", f"{arch}.rope.scaling.yarn_log_multiplier=float:{keys.log_multiplier!r}"]
    if keys.attn_factor is not None:
        out.argv += ["--override-kv", f"{arch}.rope.scaling.attn_factor=float:{keys.attn_factor!r}"]
    out.attention_factor, out.softmax_scale = keys.magnitude, keys.softmax
    if not keys.exact:
        wanted = yarn_attention_factor(params, factor)
        m_all = params.get("mscale_all_dim")
        wanted_softmax = yarn_mscale(factor, float(m_all)) ** 2 if m_all else 1.0
        out.warnings.append(f"{arch}: llama.cpp ties the softmax scale to the cos/sin magnitude; transformers' "
                            f"magnitude {wanted:.6g} with softmax x{wanted_softmax:.6g} cannot be given")


def arch_name(model_type: str | None) -> str:
    text = model_type or "llama"
    return GGUF_ARCH.get(text, text)


def flags(params: Mapping[str, Any], *, max_model_len: int, arch: str, in_gguf: bool,
          truncate: bool | None = None, gguf_context: int | None = None, gguf_factor: float | None = None) -> Flags:
    """The llama.cpp flags for one rope dict; with ``gguf_context`` (the GGUF's ``context_length``) and
    ``gguf_factor`` (its ``rope.scaling.factor``), also what llama-server needs to give a slot ``max_model_len``
    (:attr:`Flags.server_only`). See :func:`_flags`."""
    out = _flags(params, max_model_len=max_model_len, arch=arch, in_gguf=in_gguf, truncate=truncate)
    if gguf_context is None or server_slot_context(out.argv, max_model_len, gguf_context,
                                                   gguf_factor) >= max_model_len:
        return out
    options = dict(zip(out.argv[::2], out.argv[1::2], strict=False))
    readjusted = _readjusted_training_context(options, gguf_factor)
    if readjusted is None:
        out.server_only = ["--override-kv", f"{arch}.context_length=int:{max_model_len}"]
    else:
        out.warnings.append(f"llama-server gives each slot {readjusted:,} tokens, not {max_model_len:,}: with these "
                            f"YaRN flags it sets the training context to yarn_orig_ctx / float32(1/scale), "
                            f"truncated, and caps slots there (no flag changes that); llama-cpp-python's server has "
                            f"no such cap")
    return out


def _flags(params: Mapping[str, Any], *, max_model_len: int, arch: str, in_gguf: bool,
           truncate: bool | None = None) -> Flags:
    """The llama.cpp flags for one rope dict (transformers 5 form, ``rope_theta`` inside).

    ``in_gguf``: the model's own rope, already written into its GGUF by conversion (llama3 and LongRoPE then need
    no flag); otherwise a new scaling given on the command line. ``truncate``: YaRN's setting as transformers reads
    it (None: the dict's own, default true). ``arch``: the GGUF architecture (``ARCH`` when not known).
    """
    rope_type = params.get("rope_type", "default")
    theta = format_number(float(params["rope_theta"]))
    ctx = ["--ctx-size", str(max_model_len)]
    if rope_type == "default":
        return Flags(["--rope-scaling", "none", "--rope-freq-base", theta, *ctx])
    if rope_type == "linear":
        out = Flags(["--rope-scaling", "linear", "--rope-scale", format_number(float(params["factor"])),
                     "--rope-freq-base", theta, *ctx])
        if arch in DEEPSEEK_ARCHS and float(params["factor"]) > 1:
            _deepseek2_linear(out, params, float(params["factor"]), arch)
        return out
    if rope_type == "yarn":
        original = int(params["original_max_position_embeddings"])
        factor = float(params["factor"])
        out = Flags(["--rope-scaling", "yarn", "--rope-scale", format_number(factor), "--yarn-orig-ctx",
                     str(original), "--rope-freq-base", theta,
                     "--yarn-beta-fast", format_number(float(param(params, "beta_fast", "yarn"))),
                     "--yarn-beta-slow", format_number(float(param(params, "beta_slow", "yarn"))), *ctx])
        wanted = yarn_attention_factor(params, factor)
        if arch in DEEPSEEK_ARCHS:
            _deepseek2_yarn(out, params, factor, arch)
        else:
            default = yarn_mscale(factor)
            if not math.isclose(wanted, default, rel_tol=1e-12):
                out.argv += ["--override-kv", f"{arch}.rope.scaling.attn_factor=float:{wanted / default!r}"]
                if arch == "ARCH":
                    out.warnings.append("for a deepseek2 GGUF (DeepSeek V2/V3, Kimi K2) these flags are wrong: "
                                        "llama.cpp derives its attention factor from the GGUF's "
                                        "rope.scaling.yarn_log_multiplier; pass --config to get that model's flags")
            out.attention_factor = wanted
        if (params.get("truncate", True) if truncate is None else truncate) is False:
            out.warnings.append("llama.cpp always rounds YaRN's correction range (truncate=true); this config has "
                                "truncate=false")
        return out
    if in_gguf and rope_type in ("llama3", "longrope"):
        baked = {"llama3": "the rope_freqs tensor", "longrope": "the rope_factors_long/short tensors"}[rope_type]
        return Flags(ctx, [f"{rope_type} comes from {baked} written at conversion: no rope flag (one would stack)"])
    if in_gguf and rope_type == "dynamic":
        return Flags(["--rope-scaling", "none", "--rope-freq-base", theta, *ctx],
                     ["llama.cpp has no dynamic NTK: the converted model runs plain RoPE"])
    if rope_type == "dynamic":
        raise NoEquivalent("dynamic NTK has no llama.cpp equivalent (llama.cpp has no per-length base); the closest "
                           "static choice is `posenc scale ntk` (--rope-freq-base)")
    if rope_type == "longrope":
        raise NoEquivalent("longrope has no llama.cpp flag: the factor lists are stored in the GGUF "
                           "(rope_factors_long/short) by convert_hf_to_gguf.py from a patched config.json")
    if rope_type == "llama3":
        raise NoEquivalent("llama3 scaling has no llama.cpp flag: it is baked into the GGUF's rope_freqs tensor by "
                           "convert_hf_to_gguf.py; patch config.json with --engine hf and convert")
    raise NoEquivalent(f"rope_type {rope_type!r} has no llama.cpp flag")


def stacking(native: Mapping[str, Any], new: Mapping[str, Any], *, gguf: bool) -> str | None:
    """Why these flags would stack on a ``rope_freqs`` tensor, or None: the model's own rope (``native``) is llama3,
    which convert_hf_to_gguf.py writes as a ``rope_freqs`` tensor that llama.cpp applies under any rope flag, and
    the new rope (``new``) is not llama3. ``gguf``: the file itself was given (so the tensor is there)."""
    if native.get("rope_type") != "llama3" or new.get("rope_type", "default") == "llama3":
        return None
    where = "this GGUF has" if gguf else "a GGUF converted from this config (convert_hf_to_gguf.py) has"
    return (f"{where} a rope_freqs tensor holding the llama3 factors, which llama.cpp divides every frequency by "
            f"under any --rope-scaling flag: on that file these flags compute {new.get('rope_type', 'default')} of "
            "the llama3-scaled frequencies, not what transformers computes (on a converted tiny Llama 3.1 twin the "
            f"logits moved by {STACKED_LOGIT_DIFF} relative); convert a config patched with `posenc scale ... "
            "--engine hf -o DIR/config.json` instead: its GGUF has no rope_freqs tensor and these flags are right "
            "for it")


#: measured with tests/engines/test_llamacpp_converted.py's twins (``posenc scale yarn --target 256k`` flags on a
#: converted Llama 3.1 twin, two weight seeds: the largest per-position |llama.cpp - transformers| / |transformers|)
STACKED_LOGIT_DIFF = "0.35-0.55"


#: GGUF architectures whose sliding-window layers llama.cpp turns with a base of their own (``rope.freq_base_swa``,
#: which the converter writes from the config's sliding-attention theta) and a frequency scale of 1
#: (``hparams.rope_freq_scale_train_swa``, never read from the GGUF: ``llama_model::get_rope_freq_scale``), every other
#: rope setting (YaRN's mode and magnitude) shared with the global layers (``models/gemma3.cpp``): arch -> the layer
#: pattern when the GGUF has no ``sliding_window_pattern`` (the gemma3 converter writes none): layer ``il`` slides when
#: ``il % n < n - 1`` (``llama_hparams::set_swa_pattern``). Proven on Gemma 3 twins converted by llama.cpp's own
#: converter (tests/engines/test_llamacpp_converted.py).
SWA_PATTERN = {"gemma3": 6}


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the engine computes serving ``max_model_len``, for a sequence of ``seq_len`` tokens (default: that long)."""
    from posenc_cli.models.record import rope_groups

    if len(model.layers) != 1:
        return _per_layer_run(model, max_model_len)
    return _one_group_run(model, rope_groups(model)[0], max_model_len)


def _per_layer_run(model: ModelPositions, max_model_len: int) -> EngineRun:
    """A model with a full-attention and a sliding-attention rope group (Gemma 3): the flags turn the global layers;
    the sliding layers keep ``rope.freq_base_swa`` unscaled, with the magnitude YaRN mode gives them (the GGUF's
    ``rope.scaling.attn_factor`` without YaRN's ``1 + 0.1 ln s``), see :data:`SWA_PATTERN`."""
    from posenc_cli.models.record import rope_groups
    from posenc_cli.rope.frequencies import default_inv_freq

    arch = arch_name(model.text_model_type)
    groups = {g.name: g for g in rope_groups(model)}
    if arch not in SWA_PATTERN or sorted(groups) != ["full_attention", "sliding_attention"]:
        return EngineRun(NAME, VERSION, max_model_len, [], [], refusal=(
            f"not modelled: {len(groups)} rope groups ({', '.join(groups)}); posenc models llama.cpp's per-layer "
            f"bases (rope.freq_base_swa) for the {', '.join(SWA_PATTERN)} architecture only, not {arch}"))
    full, sliding = groups["full_attention"], groups["sliding_attention"]
    n = SWA_PATTERN[arch]
    if full.layers is not None and sliding.layers is not None:
        expected = tuple(i for i in range(len(full.layers) + len(sliding.layers)) if i % n < n - 1)
        if tuple(sorted(sliding.layers)) != expected:
            return EngineRun(NAME, VERSION, max_model_len, [], [], refusal=(
                f"not modelled: the config's sliding layers are not llama.cpp's {arch} pattern (every layer but "
                f"each {n}th slides; the converter writes no sliding_window_pattern)"))
    run = _one_group_run(model, full, max_model_len)
    if run.refusal:
        return run
    (turned,) = run.groups
    p = full.params
    magnitude = 1.0
    if p.get("rope_type") == "yarn":  # the GGUF's attn_factor (posenc's override, else 1) without YaRN's growth
        default = yarn_mscale(float(p["factor"]))
        if not math.isclose(turned.attention_factor, default, rel_tol=1e-12):
            magnitude = turned.attention_factor / default
    swa = GroupRun(sliding.name, default_inv_freq(sliding.spec.theta, sliding.spec.rotary_dim), magnitude,
                   sliding.softmax_scale)
    if sliding.params.get("rope_type", "default") != "default":
        run.warnings.append(f"llama.cpp turns {arch}'s sliding layers with rope.freq_base_swa and no scaling: the "
                            f"sliding group's {sliding.params.get('rope_type')} scaling is not applied")
    if magnitude != 1.0:
        run.warnings.append(f"the attn_factor override also multiplies the sliding layers' cos/sin ({magnitude:.6g})")
    run.groups = [turned if name == full.name else swa for name in groups]
    return run


def _one_group_run(model: ModelPositions, g: RopeGroup, max_model_len: int) -> EngineRun:
    """The run of a model's one rope group ``g`` (a per-layer model's global layers), with the flags posenc prints."""
    from posenc_cli.rope.frequencies import compute

    spec, p = g.spec, g.params
    if p.get("rope_type", "default") in ("linear", "dynamic", "yarn", "llama3") and p.get("factor") is None:
        return EngineRun(NAME, VERSION, max_model_len, [], [], refusal=(
            f"not modelled: the {p.get('rope_type')} rope dict names no factor (transformers derives one from the "
            "lengths); posenc has no model of what llama.cpp's GGUF converter writes then"))
    # transformers reads truncate from the outer dict: per-layer-type configs always round
    truncate = bool((model.top_level or {}).get("truncate", True))
    f = flags(p, max_model_len=max_model_len, arch=arch_name(model.text_model_type), in_gguf=True, truncate=truncate)
    rope_type = p.get("rope_type", "default")
    if rope_type == "yarn":
        # ggml rounds the correction range whatever the config says
        freqs = compute(replace(spec, params={**p, "truncate": True}), max_model_len)
        group = GroupRun(g.name, freqs.inv_freq, f.attention_factor or freqs.attention_factor)
    elif rope_type == "longrope":
        group = static_longrope(g, max_model_len)
    elif rope_type == "dynamic":
        freqs = compute(replace(spec, params={**p, "rope_type": "default"}), None)
        group = GroupRun(g.name, freqs.inv_freq, 1.0)
    else:
        freqs = compute(spec, max_model_len, top_level=model.top_level)
        group = GroupRun(g.name, freqs.inv_freq, freqs.attention_factor)
    group.softmax_scale = f.softmax_scale if f.softmax_scale is not None else model.softmax_scale
    warnings = list(f.warnings)
    if rope_type in ("linear", "yarn") and arch_name(model.text_model_type) == "llama":
        warnings.append("a Llama 3.x GGUF's rope_freqs tensor applies on top of these flags: check the GGUF with "
                        "`posenc inspect MODEL.gguf`")
    return EngineRun(NAME, VERSION, max_model_len, [group], ["llama-server", "-m", "MODEL.gguf", *f.argv],
                     accepts=None, warnings=warnings)


#: llama-server flag -> (llama-cpp-python server setting, value converter). The Python server takes the same
#: ``llama_context_params`` under their C names; only the scale is inverted (``--rope-scale S`` is
#: ``rope_freq_scale = 1/S``) and the scaling type is the ``enum llama_rope_scaling_type`` number.
_ROPE_SCALING_TYPES = {"none": "0", "linear": "1", "yarn": "2"}
PYTHON_SERVER_FLAGS: dict[str, tuple[str, Callable[[str], str]]] = {
    "--rope-scaling": ("--rope_scaling_type", lambda v: _ROPE_SCALING_TYPES[v]),
    "--rope-scale": ("--rope_freq_scale", lambda v: format_number(1.0 / float(v))),
    "--rope-freq-base": ("--rope_freq_base", str),
    "--yarn-orig-ctx": ("--yarn_orig_ctx", str),
    "--yarn-beta-fast": ("--yarn_beta_fast", str),
    "--yarn-beta-slow": ("--yarn_beta_slow", str),
    "--ctx-size": ("--n_ctx", str),
    "--override-kv": ("--kv_overrides", str),
}


def python_server_argv(argv: list[str], model: str = "MODEL") -> list[str]:
    """llama-server flags from :func:`flags` as a ``python -m llama_cpp.server`` command (llama-cpp-python)."""
    out = ["python", "-m", "llama_cpp.server", "--model", model]
    overrides: list[str] = []
    pairs = iter(argv)
    for flag in pairs:
        value = next(pairs)
        name, convert = PYTHON_SERVER_FLAGS[flag]
        if flag == "--override-kv":
            overrides.append(convert(value))
        else:
            out += [name, convert(value)]
    # the server's list settings are one argparse option with nargs="*": a second --kv_overrides would replace the
    # first, so every override follows one flag
    return out + (["--kv_overrides", *overrides] if overrides else [])


def gguf_context_length(r: Rendering) -> int:
    """The ``context_length`` of the model's GGUF: the GGUF's own, else what convert_hf_to_gguf.py writes (the text
    config's ``max_position_embeddings``), else the window posenc reads; for a bare request, the length it scales
    from."""
    if r.config is not None and r.facts is not None:
        from posenc_cli.models.config_keys import text_config

        value = text_config(r.config)[0].get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if r.facts.native:
            return r.facts.native
    return r.req.original_max


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine llama.cpp`` (llama-server) or ``llama-cpp-python``: the flags for the request's rope, refused where
    they would stack on what the model's GGUF already carries."""
    group = rope_parameters(r.req)
    facts = r.facts
    arch = arch_name(facts.model_type) if facts is not None and facts.model_type else "ARCH"
    native = facts.params if facts is not None else {}
    stacked = stacking(native, group, gguf=r.gguf)
    if stacked is not None and r.gguf:
        raise NoEquivalent(stacked)
    factor = native.get("factor") if native.get("rope_type") in ("linear", "yarn") else None
    f = flags(group, max_model_len=r.req.target, arch=arch, in_gguf=False, gguf_context=gguf_context_length(r),
              gguf_factor=float(factor) if isinstance(factor, int | float) else None)
    # llama-cpp-python's server has no slot cap: the override is llama-server's alone
    argv = [*f.argv, *f.server_only] if r.fmt == NAME else python_server_argv(f.argv, r.model)
    caveats = list(f.warnings) + ([stacked] if stacked else [])
    if any(isinstance(v, dict) for v in served_rope(r).values()):  # one dict per layer type (Gemma 3)
        caveats.append("these flags turn the global layers; llama.cpp turns the sliding-window layers with the "
                       "GGUF's rope.freq_base_swa and no scaling (the verdict says whether that is transformers')")
    return shlex.join(argv), caveats


def serve(r: Rendering, run_: EngineRun) -> str:
    """The model as it is served by ``run_`` (llama-server's command line): as that line (``--engine llama.cpp``) or
    as llama-cpp-python's server (``--engine llama-cpp-python``)."""
    if r.fmt == NAME:
        return shlex.join(run_.invocation)
    model, server_flags = run_.invocation[2], run_.invocation[3:]
    return shlex.join(python_server_argv(server_flags, model))


TARGET = Target(
    NAME, "llama.cpp", "llama-cpp-python", VERSION, render, run, serve=serve,
    targets="the llama.cpp in {version} (commit 0c1e570)",
    proven_by="logits of tiny GGUFs, and GGUFs converted by its own `convert_hf_to_gguf.py`",
    cannot_express="dynamic NTK (none); YaRN with `truncate: false` (the correction range is always rounded); llama3 "
                   "and LongRoPE only from tensors written at conversion (no flag); sliding-window layers: Gemma 3's "
                   "turn with `rope.freq_base_swa` unscaled (as transformers, for a scaling of the global layers), but "
                   "a YaRN `attn_factor` override reaches them too; other per-layer rope (OLMo 3) not modelled")
