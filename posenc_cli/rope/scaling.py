"""RoPE context-extension methods as configuration: a validated request and the one rope dict it means.

The bottom of posenc's pipeline (model facts -> rope dict -> renderings), stdlib only (``posenc pick`` uses it and
must not load numpy). A :class:`ScaleRequest` holds one method with its parameters and the model facts;
:func:`rope_parameters` turns it into the transformers 5 ``rope_parameters`` dict. Every rendering of that dict
(transformers 4 and 5 config keys, vLLM, SGLang, llama.cpp) lives in :mod:`posenc_cli.engines`, and a request for
an existing model is built by :func:`posenc_cli.models.extension.extend`. Frequencies are never computed here:
``frequencies.compute`` reads the same dict.

Methods and how transformers names them:

=========  =====================  ===========================================================================
method     rope_type              note
=========  =====================  ===========================================================================
linear     linear                 position interpolation: every frequency divided by ``factor``
ntk        default                static NTK-aware: ``rope_theta * factor ** (d / (d - 2))``, no rope type
dynamic    dynamic                NTK base grown per forward pass past ``max_position_embeddings``
yarn       yarn                   NTK-by-parts ramp plus attention temperature ``0.1 ln s + 1``
longrope   longrope               per-pair factor lists (short below the original length, long above)
llama3     llama3                 Llama 3.1 bands: high frequencies kept, low divided, middle blended
=========  =====================  ===========================================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import DEFAULT_THETA as DEFAULT_THETA  # re-exported: the request's default base
from posenc_cli.rope.rope_types import METHODS as METHODS  # posenc scale's methods, one per record: re-exported
from posenc_cli.rope.rope_types import (
    NOT_NUMBERS,
    ORIGINAL,
    PER_PAIR,
    RECORDS,
    param,
    request_default,
    rotary_dim,
    tunable,
)
from posenc_cli.units import MAX_LENGTH, format_length

#: The furthest jump shipped models serve without training (Qwen2.5/Qwen3 YaRN x4); the default rules' constant
#: ``training_free_cap``, so ``pick`` and ``scale`` call the same jump training-free (a test holds them equal).
TRAINING_FREE_CAP = 4.0
#: Beyond this jump every published method fine-tunes (PI, YaRN, LongRoPE); the rules' ``training_free_cap_asked``.
NO_FINETUNE_LIMIT = 8.0

DEFAULT_HEAD_DIM = 128

# Input limits, checked by validate() so library callers get them too; the CLI's help text reads them from here.
#: A factor past this cannot keep the target within MAX_LENGTH even from a 1-position original length (the target
#: check in validate() then gives the exact bound for the original length in use).
MAX_FACTOR = float(MAX_LENGTH)
#: Shipped rope_theta values reach 1e7-ish (Llama 4: 5e5, Qwen3-2507: 5e6, MiniMax: 1e7); 1e12 is headroom, and keeps
#: ntk's theta * factor ** (d / (d - 2)) and every wavelength far from float64 overflow.
MAX_THETA = 1e12
#: Shipped head dims are 64 to 512 (Gemma 3: 256, DeepSeek MLA: 576 split); the --explain table has one row per pair,
#: and at 4096 (2048 rows) `posenc scale yarn --factor 4 --original-max 4k --head-dim 4096 --explain` takes 0.9 s.
MAX_HEAD_DIM = 4096
#: beta_fast/beta_slow (rotations), mscale, mscale_all_dim, attention_factor, low/high_freq_factor: shipped values are
#: below 100 (beta_fast 32) and above 0.01; the bounds keep attention factors, their squares and llama3's band
#: wavelengths (original / low_freq_factor) finite in float32 and in the printed configs.
MAX_PARAMETER = 1e6
MIN_PARAMETER = 1e-6


def ntk_theta(theta: float, factor: float, rotary_dim: int) -> float:
    """Static NTK-aware base: ``theta * factor ** (d / (d - 2))`` (bloc97), d = rotary dim."""
    return float(theta * factor ** (rotary_dim / (rotary_dim - 2)))


@dataclass(frozen=True)
class ScaleRequest:
    """One context extension: method, scale and the model facts it depends on.

    ``original_max`` is the trained context length, ``target`` the extended one; ``factor`` is
    ``target / original_max`` unless given explicitly (then ``target = original_max * factor``).
    """

    method: str
    original_max: int
    target: int
    factor: float
    theta: float = DEFAULT_THETA
    head_dim: int = DEFAULT_HEAD_DIM
    partial_rotary_factor: float | None = None
    # yarn
    beta_fast: float | None = None
    beta_slow: float | None = None
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool | None = None
    # llama3
    low_freq_factor: float = request_default("llama3", "low_freq_factor")
    high_freq_factor: float = request_default("llama3", "high_freq_factor")
    # longrope
    short_factor: list[float] | None = None
    long_factor: list[float] | None = None
    fine_tuned: bool = False
    notes: list[str] = field(default_factory=list, compare=False)
    # keys of the model's own rope dict that no method sets (mrope_section, llama_4_scaling_beta): carried over
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # the window the model serves before this request (its native window); its own factor multiplies target / native
    native: int | None = None
    # the length the model was trained at, when shorter than ``native`` (a training-free reach): the jump a warning
    # measures runs from here, so a file patched on the way warns as the file it was patched from
    trained: int | None = None
    # the model's own rope dict when the request asks for nothing new (its native window): returned verbatim
    own: dict[str, Any] | None = field(default=None, compare=False)
    # the model's class applies partial_rotary_factor to plain RoPE too (Llama's does not: ntk then rotates all)
    default_partial: bool = True
    # ``target`` is the length one training run trains at (a stage of a ``pick`` plan, ``scale --seq-len``), which the
    # factor may reach past: trainer renderings then set that training length, and refuse where the trainer ties its
    # scaling to it (see :func:`at_length`)
    stage: bool = False

    @property
    def unchanged(self) -> bool:
        """The request keeps the model exactly as it is (it asked for the window the model already serves)."""
        return self.own is not None

    @property
    def trained_length(self) -> int:
        """The length the model was trained at: ``trained``, else its window, else the original length."""
        return self.trained or self.native or self.original_max

    @property
    def jump(self) -> float:
        """How far past the length the model was trained at this request reaches (1.0: not at all)."""
        return self.target / self.trained_length

    @property
    def rotary_dim(self) -> int:
        """Features that turn (:func:`posenc_cli.rope.rope_types.rotary_dim`)."""
        return rotary_dim(self.head_dim, self.partial_rotary_factor, METHODS[self.method], self.default_partial)


_FIELDS = re.compile(r"\{(\w+)\}")


def _bound(x: float) -> str:
    """A limit as written in a message: 2147483648 exactly, 1e+12 short."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e10 else f"{x:g}"


def _finite(value: float | None, name: str, *, minimum: float | None = None, strict: bool = False,
            maximum: float | None = None) -> None:
    """One PosencError unless ``value`` (None: not given) is a finite number in range. ``name`` is how the message
    writes it: ``{field}`` for an input the caller gave (the CLI renders its option), else plain words."""
    if value is None:
        return
    fields = _FIELDS.findall(name)
    relation = "greater than" if strict else "at least"
    allowed = "" if minimum is None else f" {relation} {_bound(minimum)}"
    allowed += "" if maximum is None else (" and" if minimum is not None else "") + f" at most {_bound(maximum)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PosencError(f"{name} must be a finite number{allowed}, got {value!r}", *fields)
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise PosencError(f"{name} must be{allowed}, got {value:g}", *fields)
    if maximum is not None and value > maximum:
        raise PosencError(f"{name} must be{allowed}, got {value:g}", *fields)


def check_theta(value: float, field: str = "theta") -> float:
    """``value`` as a rope base (theta): finite, greater than 1, at most :data:`MAX_THETA`; else one PosencError
    about ``field``. Every command that takes a base (``scale``, ``pick``, ``plot``, ``verify``) checks it here."""
    _finite(value, _written(field), minimum=1.0, strict=True, maximum=MAX_THETA)
    return float(value)


def check_head_dim(value: int, field: str = "head_dim", *, even: bool = True) -> int:
    """``value`` as a head dimension: a whole number from 2 to :data:`MAX_HEAD_DIM`, and even (RoPE rotates pairs)
    unless ``even`` is False (a partial rotary factor may rotate an even part of an odd head); else one
    PosencError about ``field``. Every command that takes a head dim checks it here."""
    name = _written(field)
    fields = _FIELDS.findall(name)
    if isinstance(value, bool) or not 2 <= value <= MAX_HEAD_DIM:
        raise PosencError(f"{name} must be a whole number from 2 to {MAX_HEAD_DIM:,}, got {value!r}", *fields)
    if even and value % 2:
        raise PosencError(f"{name} must be even (RoPE rotates features in pairs), got {value}", *fields)
    return value


def _written(field: str) -> str:
    """A field as a message writes it: ``{field}``; a name already spelled as an option (``--base``) stays as is."""
    return field if field.startswith("--") else f"{{{field}}}"


def make_request(
    method: str,
    *,
    factor: float | None = None,
    original_max: int | None = None,
    target: int | None = None,
    **kwargs: Any,
) -> ScaleRequest:
    """Build and validate a request; the factor or the target is derived from the other.

    Raises :class:`PosencError` for anything transformers would only warn about: factor < 1, non-finite numbers,
    inconsistent lengths, bad longrope lists, low_freq_factor >= high_freq_factor, beta_fast < beta_slow, an odd
    rotary dim, an unknown method.
    """
    if method not in METHODS:
        raise PosencError(f"method {method!r} is not known; use one of: {', '.join(METHODS)}")
    if original_max is None:
        raise PosencError("the original (trained) context length is needed: pass {original_max} (e.g. 32k) "
                          "or {config} with max_position_embeddings", "original_max", "config")
    _finite(factor, "{factor}", minimum=1.0, maximum=MAX_FACTOR)  # before original_max * factor can overflow
    if factor is None and target is None:
        raise PosencError("give the scale: {factor} S, or {target} LENGTH (with the original length)",
                          "factor", "target")
    if factor is not None and target is not None and not math.isclose(target / original_max, factor, rel_tol=1e-9):
        raise PosencError(f"{{factor}} {factor:g} disagrees with {{target}} {target} / original {original_max} "
                          f"= {target / original_max:g}; give one of them", "factor", "target")
    if factor is None:
        assert target is not None
        if target <= original_max:
            raise PosencError(f"target length {format_length(target)} must be longer than the original "
                              f"{format_length(original_max)}; nothing to extend")
        factor = target / original_max
    if target is None:
        exact = original_max * factor
        if exact != int(exact):
            raise PosencError(f"factor {factor:g} x original length {original_max} = {exact:g} is not a whole "
                              "number of positions; pass {target} instead", "target")
        target = int(exact)
    if target < original_max:
        raise PosencError(f"target length {target} is shorter than the original {original_max}")
    return request(method, original_max=original_max, target=target, factor=float(factor), **kwargs)


def request(method: str, *, original_max: int, target: int, factor: float, **kwargs: Any) -> ScaleRequest:
    """A validated request with its lengths and factor as given (a model's own factor times a jump need not be
    ``target / original_max``: llama3 x8 serves 16x its original length)."""
    if method not in METHODS:
        raise PosencError(f"method {method!r} is not known; use one of: {', '.join(METHODS)}")
    req = ScaleRequest(method=method, original_max=original_max, target=target, factor=float(factor), **kwargs)
    validate(req)
    return req


def validate(req: ScaleRequest) -> None:
    """Strict checks on a request (see :func:`make_request`)."""
    _finite(req.factor, "factor", minimum=1.0, maximum=MAX_FACTOR)
    if req.target > MAX_LENGTH:
        raise PosencError(f"target length {req.target} (original {req.original_max} x factor {req.factor:g}) is too "
                          f"long; allowed up to {MAX_LENGTH} ({format_length(MAX_LENGTH)}), so a factor of at most "
                          f"{MAX_LENGTH / req.original_max:g} from this original length")
    check_theta(req.theta)
    # an odd head dim can still rotate an even part of it (partial_rotary_factor): the rotary dim is checked below
    check_head_dim(req.head_dim, even=False)
    if req.partial_rotary_factor is not None:
        _finite(req.partial_rotary_factor, "{partial_rotary_factor}", minimum=0.0, strict=True)
        if req.partial_rotary_factor > 1:
            raise PosencError(f"{{partial_rotary_factor}} must be in (0, 1], got {req.partial_rotary_factor:g}",
                              "partial_rotary_factor")
    d = req.rotary_dim
    if d < 4 or d % 2:
        raise PosencError(f"the rotary dimension must be an even number of at least 4, got {d} "
                          f"(head_dim {req.head_dim} x partial_rotary_factor {req.partial_rotary_factor or 1:g})")
    rope_type = METHODS[req.method]
    written = RECORDS[rope_type].keys
    # every parameter a request holds is checked, whatever the method (a stray --beta-fast on linear is still a
    # number); those the method's rope type writes are checked against each other
    for name in tunable():
        if name not in NOT_NUMBERS:
            _finite(getattr(req, name), f"{{{name}}}", minimum=MIN_PARAMETER, maximum=MAX_PARAMETER)
    fast, slow = param(vars(req), "beta_fast", "yarn"), param(vars(req), "beta_slow", "yarn")
    if fast < slow:
        raise PosencError(f"{{beta_fast}} ({fast:g}) must not be smaller than {{beta_slow}} ({slow:g})",
                          "beta_fast", "beta_slow")
    # equal factors (Llama 4) leave no blended band, which transformers computes fine; inverted ones are nonsense
    if "low_freq_factor" in written and req.low_freq_factor > req.high_freq_factor:
        raise PosencError(f"{{low_freq_factor}} ({req.low_freq_factor:g}) must not be larger than "
                          f"{{high_freq_factor}} ({req.high_freq_factor:g})", "low_freq_factor", "high_freq_factor")
    if rope_type == "llama3" and req.target <= req.original_max:
        raise PosencError("llama3 needs a target longer than the original length")
    for name in (k for k in written if k in PER_PAIR):
        values = getattr(req, name)
        if values is None:
            raise PosencError(f"{req.method} needs {{{name}}}: a JSON list of {d // 2} numbers or @file", name)
        if len(values) != d // 2:
            raise PosencError(f"{{{name}}} has {len(values)} entries; it must have rotary_dim/2 = {d // 2}", name)
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise PosencError(f"{{{name}}}[{i}] = {v!r}; every factor must be a finite number > 0", name)


def needs_training(jump: float) -> str | None:
    """Why a training-free jump of ``jump`` (target / the length the model was trained at) is not advised, or None.

    The same thresholds as the default rules of ``posenc pick`` (training_free_cap, training_free_cap_asked), so
    the two commands never disagree on one jump.
    """
    if jump > NO_FINETUNE_LIMIT:
        return (f"a x{jump:g} jump is past x{NO_FINETUNE_LIMIT:g}, where PI, YaRN and LongRoPE all need a "
                "fine-tuning stage at the target length")
    if jump > TRAINING_FREE_CAP:
        return (f"a x{jump:g} jump is past the x{TRAINING_FREE_CAP:g} that shipped models serve without training "
                "(Qwen2.5/Qwen3 YaRN); expect weaker long-range retrieval, or add a fine-tuning stage at the target "
                "length")
    return None


def warnings_for(req: ScaleRequest) -> list[str]:
    """Advice that is not an error (printed on stderr by the CLI)."""
    why = None if req.fine_tuned or req.unchanged else needs_training(req.jump)
    if why is None:
        return []
    return [f"warning: {format_length(req.trained_length)} -> {format_length(req.target)}: {why} (pass --fine-tuned "
            "if the model is fine-tuned at this scale)"]


def rope_parameters(req: ScaleRequest) -> dict[str, Any]:
    """The transformers 5 ``rope_parameters`` dict for ``req`` (``rope_theta`` inside, as v5 saves it)."""
    if req.own is not None:
        return dict(req.own)
    rope_type = METHODS[req.method]
    p: dict[str, Any] = {"rope_type": rope_type}
    for key in RECORDS[rope_type].keys:  # in the record's order, each key the request holds
        value = _written_value(req, key)
        if value is not None:
            p[key] = value
    theta = ntk_theta(req.theta, req.factor, req.rotary_dim) if req.method == "ntk" else req.theta
    p["rope_theta"] = float(theta)
    if req.partial_rotary_factor is not None:
        p["partial_rotary_factor"] = float(req.partial_rotary_factor)
    for key, value in req.extra.items():
        p.setdefault(key, value)
    return p


def _written_value(req: ScaleRequest, key: str) -> Any:
    """The value ``req`` writes for rope key ``key`` (None: it holds none; the base and fraction are written apart)."""
    if key == "factor":
        return req.factor
    if key == ORIGINAL:
        return req.original_max
    value = getattr(req, key, None) if key not in ("rope_theta", "partial_rotary_factor") else None
    if value is None:
        return None
    if key in PER_PAIR:
        return [float(v) for v in value]
    return bool(value) if key == "truncate" else float(value)


def max_position_embeddings(req: ScaleRequest) -> int:
    """What ``max_position_embeddings`` must say: the target, except for dynamic NTK.

    transformers' ``dynamic`` treats ``max_position_embeddings`` as the trained length and grows the base only past
    it, so it must stay at the original length.
    """
    if req.method == "dynamic":
        return req.original_max
    return req.target


def at_length(req: ScaleRequest, seq_len: int) -> ScaleRequest:
    """``req`` trained at ``seq_len`` (1 to its target): the same rope dict (every key, the factor included) with
    ``max_position_embeddings`` and every rendered length at ``seq_len``; the request is marked as a training run
    (:attr:`ScaleRequest.stage`), so a trainer must train at exactly this length.

    A staged plan trains each stage at its own length with the plan's one scaling (as DeepSeek-V3 trained both of its
    YaRN stages, 32k and 128k, with one s=40 configuration): only the length differs between its stages.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 1 <= seq_len <= req.target:
        raise PosencError(f"{{seq_len}} must be a whole number from 1 to the target {req.target} "
                          f"({format_length(req.target)}), got {seq_len!r}", "seq_len")
    return replace(req, target=seq_len, stage=True)


def with_method(req: ScaleRequest, method: str) -> ScaleRequest:
    """The same model and scale under another method (for side-by-side charts and comparisons)."""
    other = replace(req, method=method)
    validate(other)
    return other
