"""The values a config may hold: sizes and lengths in range, rope dicts the frequency functions can read (stdlib).

:func:`bad_sizes` lists every count, length or theta out of range (``inspect --lint`` reports them all),
:func:`check_sizes` refuses the first, and :func:`check_rope_params` refuses a resolved rope dict that no engine could
compute (a missing key, not a number, a theta or factor that is not positive, a value past float32). The reader
(:func:`posenc_cli.models.model_positions.describe`) calls them on every config it reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import DIVISORS, MAGNITUDES, ORIGINAL, PER_PAIR, numeric_keys, record
from posenc_cli.rope.scaling import MAX_HEAD_DIM


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: Counts and lengths a config gives, with what posenc allows: (keys, least, most). A value outside would make no
#: engine's model (a window of -4096 positions, 10**30 layers) or hang the reader; ``None`` means "not given".
#: The most: a length int32 engines can index (units.MAX_LENGTH); layers, heads and head dims far above any model.
SIZE_KEYS: tuple[tuple[tuple[str, ...], int, int], ...] = (
    (("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"), 1, 1 << 31),
    (("original_max_position_embeddings",), 1, 1 << 31),
    (("num_hidden_layers", "n_layer", "num_layers"), 0, 1 << 16),
    (("full_attention_interval", "no_rope_layer_interval"), 1, 1 << 16),  # a layer period: i % it
    (("num_attention_heads", "n_head", "n_heads"), 1, 1 << 16),
    (("hidden_size", "n_embd", "d_model"), 1, 1 << 24),
    (("head_dim", "qk_rope_head_dim", "rotary_dim", "global_head_dim"), 0, MAX_HEAD_DIM),  # DeepSeek-VL2: 0
)

#: The largest float32: every engine computes the rope in float32, so a setting past it has no value there.
FLOAT32_MAX = 3.4028234663852886e38

FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32: a smaller theta is 0 there

#: Sizes other models give per stage or per part (SegFormer's heads [1, 2, 5, 8], LXMERT's layers per encoder):
#: a list or object there is not read as the size, and not refused.
_PER_STAGE = frozenset({"num_attention_heads", "n_head", "n_heads", "hidden_size", "n_embd", "d_model",
                        "num_hidden_layers", "n_layer", "num_layers"})


#: Rope settings that must be positive (a theta of 0 or a factor of -2 has no frequencies any engine computes).
_POSITIVE = ("rope_theta", "factor", "original_max_position_embeddings", "rope_local_base_freq",
             "compress_rope_theta", "rotary_emb_base")


def bad_sizes(text: Mapping[str, Any], where: str = "") -> list[tuple[str, Any, str]]:
    """(key, value, what is allowed) for every count or length (:data:`SIZE_KEYS`) that is not a whole number in its
    range (a list or object of heads, sizes or layers is some other model's per-stage sizes: not read) and every
    theta (:data:`_POSITIVE`) that is not a positive finite number; ``where`` prefixes the key (``text_config.``).
    ``inspect --lint`` lists them all; :func:`describe` refuses the first."""
    out: list[tuple[str, Any, str]] = []
    for keys, least, most in SIZE_KEYS:
        for key in keys:
            value = text.get(key)
            if isinstance(value, (list, dict)) and key in _PER_STAGE:
                continue  # per-stage or per-part sizes (SegFormer's heads [1, 2, 5, 8], LXMERT's layers): not read
            if value is not None and not (is_number(value) and value == int(value) and least <= value <= most):
                out.append((f"{where}{key}", value, f"a whole number from {least:,} to {most:,}"))
    for key in _POSITIVE:
        value = text.get(key)
        if value is not None and not (is_number(value) and value > 0):
            out.append((f"{where}{key}", value, "a finite number greater than 0"))
    return out


def check_sizes(text: Mapping[str, Any], where: str = "") -> None:
    """One PosencError for the first value :func:`bad_sizes` finds, or a rope dict that is not a JSON object (a
    false-ish value, as transformers reads it, means none)."""
    for key, value, allowed in bad_sizes(text, where)[:1]:
        raise PosencError(f"{key} = {shown(value)} is not allowed; use {allowed}")
    for key in ("rope_scaling", "rope_parameters"):
        value = text.get(key)
        if value and not isinstance(value, Mapping):
            raise PosencError(f"{where}{key} = {shown(value)} is not allowed; use a JSON object (or null)")
    for key in ("layer_types", "no_rope_layers", "cross_attention_layers", "compress_ratios"):
        value = text.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value)):
            raise PosencError(f"{where}{key} = {shown(value)} is not allowed; use a list with one entry per layer "
                              "(or null)")
    archs = text.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise PosencError(f"{where}architectures = {shown(archs)} is not allowed; use a list of class names "
                          "(or null)")


def check_rope_params(params: Mapping[str, Any], where: str) -> None:
    """One clear PosencError for a rope dict the frequency functions could not read (missing key, not a number, a
    theta, factor or original length that is not positive)."""
    rope_type = str(params.get("rope_type"))
    found = record(rope_type)
    # keys the frequency functions read unconditionally (a missing one would be a KeyError)
    for key in found.needs if found is not None else ():
        if params.get(key) is None:
            raise PosencError(f"{where}: rope_type {rope_type!r} needs {key!r}, which the config does not set")
    numeric = numeric_keys()
    for key in numeric:
        value = params.get(key)
        if value is not None and not is_number(value):
            raise PosencError(f"{where}: {key} = {shown(value)} is not a finite number")
    if params.get("rope_theta") is None:
        raise PosencError(f"{where}: rope_theta = None is not allowed; give the rope base (10000 for Llama 2)")
    for key in numeric:
        value = params.get(key)
        if value is not None and value != 0 and not FLOAT32_TINY <= abs(value) <= FLOAT32_MAX:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; every engine computes RoPE in float32: "
                              f"use 0 or a magnitude from {FLOAT32_TINY:.6g} to {FLOAT32_MAX:.6g}")
    for key in DIVISORS:
        value = params.get(key)
        if value is not None and value <= 0:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; use a finite number greater than 0")
    factor = params.get("factor")
    if factor is not None and factor < 1:
        # scaling lengthens the context; below 1 it shortens every wavelength (and 1e-147 divides by zero in float32)
        raise PosencError(f"{where}: factor = {factor!r} is not allowed; use a number of at least 1 (1: no scaling)")
    for key in MAGNITUDES:
        value = params.get(key)
        if value is not None and value < 0:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; use a finite number of at least 0")
    prf = params.get("partial_rotary_factor", 1.0)
    if prf is None or not 0 < prf <= 1:  # None: transformers multiplies the head dim by it (a TypeError)
        raise PosencError(f"{where}: partial_rotary_factor = {prf!r} is not allowed; use a fraction of the head "
                          "greater than 0 and at most 1")
    original = params.get(ORIGINAL)
    if original is not None and not (original == int(original) and original <= 1 << 31):
        raise PosencError(f"{where}: {ORIGINAL} = {original!r} is not allowed; use a whole "
                          f"number from 1 to {1 << 31:,}")
    for key in PER_PAIR:
        values = params.get(key)
        if values is not None and (not isinstance(values, list)
                                   or not all(is_number(v) and 0 < v <= FLOAT32_MAX for v in values)):
            raise PosencError(f"{where}: {key} must be a list of numbers greater than 0 (each divides a frequency)")
