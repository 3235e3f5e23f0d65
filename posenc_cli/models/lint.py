"""``posenc inspect --lint``: problems in a model config's positional settings that engines trip on (stdlib only).

Each :class:`Problem` says what is wrong, why it matters (which engine or transformers version reads it otherwise)
and the fix. The checks read the raw config (the keys as written) and the resolved :class:`ModelPositions`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from posenc_cli.models.config_keys import ABSENT, text_config
from posenc_cli.models.model_positions import ModelPositions
from posenc_cli.models.ollama_convert import FIX, ollama_converter_drops
from posenc_cli.models.rope_dicts import REMAPS_YARN
from posenc_cli.models.transformers_versions import KEY_SINCE, MODEL_TYPE_SINCE, ROPE_TYPE_SINCE, SCALING_READ_SINCE
from posenc_cli.models.value_checks import FLOAT32_MAX, FLOAT32_TINY, bad_sizes
from posenc_cli.rope.rope_types import ORIGINAL, RECORDS, every_key, known_keys, rope_type_of

# The keys each rope type reads (the multimodal classes, Qwen2-VL onwards, read mrope_section beside yarn too, as the
# Qwen2.5-VL card's long-context config writes it): posenc_cli.rope.rope_types.known_keys.
#: Keys some model classes read beside the rope type's own (Ministral 3's query scaling).
_MODEL_KEYS = {"ministral3": {"llama_4_scaling_beta", "max_position_embeddings"}}
# a phi3 config class turns these into longrope
_PHI3_REMAP = {"yarn", "su"}


@dataclass(frozen=True)
class Problem:
    """One finding. ``severity`` "error": some reader computes other positions than the file means (lint exits 1);
    "warning": the file is read right, but an engine served without the flags posenc prints admits more context
    than the model was extended to (reported, exit 0)."""

    code: str
    problem: str
    why: str
    fix: str
    severity: str = "error"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _rope_dicts(text: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(where, key holding it, the dict as written) for every rope dict in the text config."""
    for key in ("rope_scaling", "rope_parameters"):
        rp = text.get(key)
        if not isinstance(rp, Mapping) or not rp:
            continue
        if all(isinstance(v, Mapping) for v in rp.values()):
            for name, sub in rp.items():
                yield f"{key}.{name}", key, sub
        else:
            yield key, key, rp


def lint_config(cfg: Mapping[str, Any], model: ModelPositions | None) -> list[Problem]:
    """Every problem found, in a stable order (config order, then check order).

    ``model`` is None when the config cannot be resolved at all; the raw keys are still checked.
    """
    text, text_type, where = text_config(cfg)
    prefix = "text_config." if where == "text_config" else ""
    window = model.max_position_embeddings if model is not None else text.get("max_position_embeddings")
    out: list[Problem] = []
    out += impossible_values(cfg)
    if any(p.code == IMPOSSIBLE for p in out):
        return out  # the other checks read these numbers: a window of -4096 has no mismatch to report
    for place, key, rp in _rope_dicts(text):
        out += _dict_problems(prefix + place, key, rp, text, text_type, window)
    if model is not None:
        out += _model_problems(text, text_type, model, prefix)
    return out


IMPOSSIBLE = "impossible-value"
#: Rope dict keys that must be positive finite numbers, and the factor, which must be at least 1.
_POSITIVE_ROPE = ("rope_theta", "original_max_position_embeddings", "attention_factor")


def impossible_values(cfg: Mapping[str, Any]) -> list[Problem]:
    """A window, count, theta or factor no engine can run: a max_position_embeddings of 0 or -4096, a theta of 0,
    a factor below 1 (scaling exists to lengthen the context; below 1 it shortens every wavelength). One problem
    per value, in config order; a rope original length longer than the window is a warning (a typo engines run)."""
    text, _, where = text_config(cfg)
    out: list[Problem] = []
    sub = where if where and not where.endswith(ABSENT) else ""
    found = bad_sizes(cfg) + (bad_sizes(text, f"{sub}.") if sub else [])
    for key, value, allowed in found:
        out.append(_impossible(key, value, allowed))
    prefix = f"{sub}." if sub else ""
    window = text.get("max_position_embeddings")
    for place, _, rp in _rope_dicts(text):
        loc = prefix + place
        for name in _POSITIVE_ROPE:
            value = rp.get(name)
            if value is not None and not (_finite(value) and FLOAT32_TINY <= value <= FLOAT32_MAX):
                out.append(_impossible(f"{loc}.{name}", value, f"a number from {FLOAT32_TINY:.6g} to "
                                                               f"{FLOAT32_MAX:.6g} (float32, which engines compute "
                                                               "the rope in)"))
        factor = rp.get("factor")
        if factor is not None and not (_finite(factor) and 1 <= factor <= FLOAT32_MAX):
            out.append(_impossible(f"{loc}.factor", factor, f"a number from 1 (no scaling) to {FLOAT32_MAX:.6g} "
                                                            "(float32)"))
        original = rp.get(ORIGINAL)
        rope_type = rope_type_of(rp, None)
        kind = RECORDS.get(rope_type) if isinstance(rope_type, str) else None  # as written: su is not read here
        if (kind is not None and kind.reads_original and isinstance(original, (int, float))
                and isinstance(window, (int, float)) and _finite(original) and _finite(window)
                and original > window > 0):
            # a warning, not impossible: MiniCPM-V 4 ships 32786 (sic) over a 32768 window and engines run it
            out.append(Problem(
                "original-beyond-window", f"{loc}.original_max_position_embeddings {original:,} is longer than "
                f"max_position_embeddings {window:,}",
                f"{rope_type} extends from the original length to the window: past the window the scaling never "
                "applies (longrope keeps its short factors, yarn and llama3 scale by a factor the window never "
                "reaches), so the file most likely holds a typo",
                "set the length the model was pre-trained at (at most max_position_embeddings)", severity="warning"))
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _impossible(key: str, value: Any, allowed: str) -> Problem:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return Problem(IMPOSSIBLE, f"{key} = {shown}: use {allowed}",
                   "no model has this value: a window or count outside the range, or a theta or factor whose "
                   "frequencies are 0, infinite or shrunk in the float32 every engine computes them in; posenc "
                   "refuses to read it (inspect without --lint: exit 2)",
                   f"set {key.rsplit('.', 1)[-1]} to the model's real value")


def unreadable(message: str) -> Problem:
    """The problem a config that cannot be resolved at all is."""
    return Problem("unreadable-rope-settings", message,
                   "transformers refuses the same config when it loads it (or builds the model)",
                   "fix the keys named above")


def _dict_problems(loc: str, key: str, rp: Mapping[str, Any], text: Mapping[str, Any], text_type: str,
                   window: int | None) -> list[Problem]:
    """Every problem of one rope dict (at ``loc``, under ``key``): its keys, how its class reads it, its values."""
    rope_type = str(rope_type_of(rp))
    return (_key_problems(loc, rp, rope_type, text_type) + _class_problems(loc, key, rp, rope_type, text, text_type)
            + _value_problems(loc, rp, rope_type, text, window))


def _key_problems(loc: str, rp: Mapping[str, Any], rope_type: str, text_type: str) -> list[Problem]:
    """Keys spelled the legacy way, or that the rope type does not read."""
    out: list[Problem] = []
    if "type" in rp:
        both = "rope_type" in rp
        out.append(Problem(
            "legacy-type-key",
            f"{loc} uses the legacy key 'type'" + (" beside 'rope_type'" if both else f" ({rp['type']!r})"),
            "transformers reads 'rope_type' since 4.43.1 and copies 'type' over only for old files; tools that read "
            "the dict themselves (vLLM overrides, converters) look for 'rope_type'"
            + ("; two keys can disagree" if both else ""),
            "rename 'type' to 'rope_type'" if not both else "drop 'type'"))
    own = known_keys(rope_type)
    if own is not None:
        known = own | _MODEL_KEYS.get(text_type, set())
        vocabulary = sorted(every_key())
        for name in rp:
            if name in known:
                continue
            close = difflib.get_close_matches(name, vocabulary, n=1, cutoff=0.6)
            read_elsewhere = name in vocabulary
            out.append(Problem(
                "unknown-rope-key",
                f"{loc}.{name} is not read by rope_type {rope_type!r}"
                + (f" (did you mean {close[0]!r}?)" if close and not read_elsewhere else ""),
                "transformers only warns about unknown keys and uses the default instead, so the model silently "
                "runs without this setting",
                f"rename it to {close[0]!r}" if close and not read_elsewhere else "remove it, or change rope_type"))
    return out


def _class_problems(loc: str, key: str, rp: Mapping[str, Any], rope_type: str, text: Mapping[str, Any],
                    text_type: str) -> list[Problem]:
    """A dict the model's config class rewrites, ignores or completes otherwise than other readers do."""
    out: list[Problem] = []
    if text_type in REMAPS_YARN and rope_type in _PHI3_REMAP:
        out.append(Problem(
            "remapped-rope-type",
            f"{loc} says {rope_type!r} on a phi3 model",
            "Phi3Config turns 'yarn' and 'su' into 'longrope', which ignores beta_fast/beta_slow/mscale and needs "
            "short_factor/long_factor; engines that read the file directly apply YaRN instead",
            "write rope_type 'longrope' with its factor lists"))
    if text_type in ("gemma3_text", "olmo3") and key == "rope_parameters" and ("rope_type" in rp or "type" in rp):
        flat = not any(isinstance(v, Mapping) for v in (text.get("rope_parameters") or {}).values())
        if flat:
            out.append(Problem(
                "flat-rope-parameters-ignored",
                f"{loc} is a flat dict on a {text_type} model",
                f"{text_type}'s config class reads rope_parameters per layer type (full_attention, "
                "sliding_attention) and ignores a flat dict: every layer runs default RoPE",
                "nest it under 'full_attention' (and 'sliding_attention'), or use legacy rope_scaling"))
    if key == "rope_parameters" and "rope_theta" not in rp:
        out.append(Problem(
            "v5-dict-without-theta",
            f"{loc} has no rope_theta",
            "transformers 5 fills it from a top-level rope_theta or the class default when it loads the file, but "
            "a dict set after loading (vLLM --hf-overrides, AutoConfig kwargs) gets rope_theta None and fails, "
            "and transformers 4 reads only the top-level key",
            "put rope_theta inside rope_parameters"))
    return out


def _value_problems(loc: str, rp: Mapping[str, Any], rope_type: str, text: Mapping[str, Any],
                    window: int | None) -> list[Problem]:
    """Values an engine computes otherwise than transformers: llama3's empty blend band, windows that disagree."""
    out: list[Problem] = []
    factor = rp.get("factor")
    original = rp.get("original_max_position_embeddings", text.get("original_max_position_embeddings"))
    if rope_type == "llama3" and rp.get("low_freq_factor") is not None and \
            rp.get("low_freq_factor") == rp.get("high_freq_factor"):
        out.append(Problem(
            "llama3-no-blend-band",
            f"{loc}: low_freq_factor == high_freq_factor ({rp['low_freq_factor']})",
            "the blend divides by high_freq_factor - low_freq_factor: transformers has no blended pair then and "
            "works, but an implementation that evaluates the blend for every pair divides by zero",
            "keep it only if the weights were trained this way (Llama 4); otherwise set high_freq_factor above "
            "low_freq_factor (Llama 3.1: 1 and 4)"))
    if isinstance(factor, (int, float)) and isinstance(window, int) and factor > 1:
        # dynamic's max_position_embeddings is the trained length by definition (transformers grows the base past
        # it), so vLLM's window x factor is the length the factor was set for: nothing to warn about
        if rope_type == "linear":
            out.append(Problem(
                "engine-double-scaling",
                f"{loc}: linear factor {factor:g} with max_position_embeddings {window:,}",
                "vLLM and SGLang multiply max_position_embeddings by a linear factor and accept up to "
                f"{int(window * factor):,} tokens; transformers reads {window:,} as the window (Gemma 3 ships this "
                f"way), so requests past it run {factor:g}x beyond what the model was extended to",
                f"serve with --max-model-len {window} (posenc scale --engine vllm/sglang and posenc check pass it)",
                severity="warning"))
        # llama3's factor divides low frequencies; it is not a window ratio (Llama 3.1: 8192 x 8 serves 131072)
        elif rope_type in ("yarn", "longrope") and isinstance(original, int) and int(original * factor) != window:
            out.append(Problem(
                "window-factor-mismatch",
                f"{loc}: original {original:,} x factor {factor:g} = {int(original * factor):,}, but "
                f"max_position_embeddings is {window:,}",
                "transformers scales by the factor as given, while engines size their tables and length checks from "
                "original x factor or from max_position_embeddings: the two windows disagree",
                f"set max_position_embeddings to {int(original * factor):,}, or the factor to "
                f"{window / original:g}"))
    return out


def _model_problems(text: Mapping[str, Any], text_type: str, model: ModelPositions, prefix: str) -> list[Problem]:
    out: list[Problem] = []
    if model.family == "none" and any(k in text for k in ("rope_theta", "rope_scaling", "rope_parameters")):
        out.append(Problem(
            "rope-keys-unused",
            f"{prefix}rope settings on a {text_type} model, which applies no RoPE",
            "the keys are never read; tools that trust them report positions the model does not use",
            "ignore them (or remove them)"))
    if text.get("rope_scaling") and text.get("rope_parameters"):
        out.append(Problem(
            "two-rope-dicts",
            f"{prefix}rope_scaling and rope_parameters are both set",
            "transformers uses rope_scaling and drops rope_parameters; other readers may pick the other one",
            "keep one: rope_parameters for transformers 5, rope_scaling for 4"))
    # Ollama's converter reads a safetensors folder's config.json; a GGUF is what Ollama serves as it is
    drops = [] if model.from_gguf else ollama_converter_drops(text, text_type)
    out += [Problem("ollama-converter-drops", f"{prefix}{drop}", "`ollama create` from this model folder converts "
                    "with Ollama's own converter, whose GGUF then computes other positions than this file means",
                    FIX, "warning") for drop in drops]
    return out


def oldest_reader(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """(version, why) of the oldest transformers release that reads this config's positions, when known."""
    text, text_type, _ = text_config(cfg)
    needs: list[tuple[str, str]] = []
    model_type = str(cfg.get("model_type") or "")
    for mt in dict.fromkeys((model_type, text_type)):
        if mt in MODEL_TYPE_SINCE:
            needs.append((MODEL_TYPE_SINCE[mt], f"model_type {mt!r}"))
    for _, key, rp in _rope_dicts(text):
        rope_type = str(rope_type_of(rp))
        if rope_type in ROPE_TYPE_SINCE:
            needs.append((ROPE_TYPE_SINCE[rope_type], f"rope_type {rope_type!r}"))
            if text_type in SCALING_READ_SINCE:
                needs.append((SCALING_READ_SINCE[text_type], f"{text_type} applying rope_scaling"))
        if "rope_type" in rp and "type" not in rp:
            needs.append((KEY_SINCE["rope_type"], "the 'rope_type' key without 'type'"))
        if key == "rope_parameters":
            needs.append((KEY_SINCE["rope_parameters"], "the rope_parameters key"))
    if not needs:
        return None
    return max(needs, key=lambda n: tuple(int(p) for p in n[0].split(".")))
