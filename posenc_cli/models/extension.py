"""The rope settings for one request on one model: a pure function of the model's facts and what was asked.

The middle of posenc's pipeline (model facts -> rope dict -> renderings): ``posenc scale --config``, ``posenc pick
--config`` and every command that extends a model build their request here, so they agree on what a request means.
Stdlib only.

What a target length means for a model that already has a window ``W`` (its native window,
:func:`posenc_cli.models.facts.window_of`):

* ``target == W``: nothing to extend; the model's own rope dict comes back verbatim, whatever the method (unless
  a parameter is given too: then it is applied at the same window).
* the model's own scaling family (llama3 on Llama 3.1, yarn on Qwen3-2507 or DeepSeek-V3, linear on Gemma 3): its
  parameters are kept and its factor is multiplied by the jump ``target / W``; yarn/llama3/longrope keep their
  ``original_max_position_embeddings`` (Llama 3.1 8k x8 serves 128k; 512k is x32 from the same 8k).
* another method, or an unscaled model: the method scales from the length the model's scaling refers to (its
  original length, else ``W``), replacing any scaling the model had; a note says so.
* ``target < W``: refused (the model already serves it; ``posenc scale --engine`` answers it with the serving command).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import METHODS, RECORDS, request_defaults, tunable
from posenc_cli.rope.scaling import (
    DEFAULT_HEAD_DIM,
    DEFAULT_THETA,
    MAX_FACTOR,
    ScaleRequest,
    _finite,
    make_request,
    request,
)
from posenc_cli.units import format_length

if TYPE_CHECKING:  # facts come from the reader, which a bare request (pick or scale without --config) never loads
    from posenc_cli.models.facts import ModelFacts

#: Parameters a caller can set explicitly (every key a method's rope type reads: rope_types.tunable); None means
#: "not given" (the model's own value, else the record's default for a new request).
TUNABLE = tunable()
_DEFAULTS = request_defaults()


def extend(
    method: str,
    facts: ModelFacts | None,
    *,
    target: int | None = None,
    factor: float | None = None,
    original_max: int | None = None,
    theta: float | None = None,
    head_dim: int | None = None,
    partial_rotary_factor: float | None = None,
    fine_tuned: bool = False,
    notes: list[str] | None = None,
    **given: Any,
) -> ScaleRequest:
    """The request for ``method`` on the model ``facts`` describes (or, with ``facts`` None, on a model given only by
    ``original_max``, ``theta`` and ``head_dim``).

    With a model, ``factor`` is the jump from its native window (``target = W x factor``), so it means the same for
    every family. ``original_max``, ``theta`` and ``head_dim`` given with a model replace the model's values (a note
    says so). ``given`` holds the :data:`TUNABLE` parameters; None or absent means not given. Notes for the user are
    appended to ``notes``.
    """
    unknown = set(given) - set(TUNABLE)
    if unknown:
        raise TypeError(f"unknown parameters: {', '.join(sorted(unknown))}")
    if method not in METHODS:
        raise PosencError(f"method {method!r} is not known; use one of: {', '.join(METHODS)}")
    said = notes if notes is not None else []
    _finite(factor, "{factor}", minimum=1.0, maximum=MAX_FACTOR)
    explicit = {k: v for k, v in given.items() if v is not None}
    if facts is None:
        params = {k: explicit.get(k, _DEFAULTS.get(k)) for k in TUNABLE}
        return make_request(method, factor=factor, original_max=original_max, target=target,
                            theta=DEFAULT_THETA if theta is None else theta,
                            head_dim=DEFAULT_HEAD_DIM if head_dim is None else head_dim,
                            partial_rotary_factor=partial_rotary_factor, fine_tuned=fine_tuned, **params)
    label = facts.label or "the model"
    for name, value, own in (("--theta", theta, facts.theta), ("--head-dim", head_dim, facts.head_dim)):
        if value is not None and own is not None and value != own:
            said.append(f"note: {name} {value:g} replaces {label}'s own {own:g}")
    prf = facts.partial_rotary_factor if partial_rotary_factor is None else partial_rotary_factor
    rope: dict[str, Any] = {  # the rope every request below is built for
        "theta": facts.theta if theta is None else theta,
        "head_dim": (facts.head_dim or DEFAULT_HEAD_DIM) if head_dim is None else head_dim,
        "partial_rotary_factor": prf, "fine_tuned": fine_tuned, "default_partial": facts.default_partial}
    # an explicit trained length overrides what the file says: the request is the plain one from there
    native = facts.native if original_max is None else None
    if native is None:
        _refuse_unreadable(method, facts, facts.params.get("rope_type", "default"), label)
        start = original_max if original_max is not None else facts.scale_from
        if start is None:
            raise PosencError(f"{label} names no max_position_embeddings: pass {{original_max}} (e.g. 4k)",
                              "original_max")
        inherited = facts.inherited(method)
        params = {k: explicit.get(k, inherited.get(k, _DEFAULTS.get(k))) for k in TUNABLE}
        return make_request(method, factor=factor, original_max=start, target=target, **rope, **params)
    rope["trained"] = facts.trained if facts.trained is not None and facts.trained < native else None
    target = _target_from(native, factor, target, label)
    own_type = facts.params.get("rope_type", "default")
    if target > native:
        _refuse_unreadable(method, facts, own_type, label)
    asked_more = bool(explicit) or any(v is not None for v in (theta, head_dim, partial_rotary_factor))
    if target == native and not asked_more:
        said.append(f"note: {label} already serves {format_length(native)}; its rope settings are returned "
                    "unchanged")
        # the model's own dict, not re-derived: it is what the checkpoint was trained with, valid or not by
        # posenc's stricter rules (a request validates only what posenc writes)
        return ScaleRequest(method=_method_of(own_type, method), original_max=facts.scale_from or native,
                            target=native, factor=float(facts.params.get("factor") or 1.0), native=native,
                            own=dict(facts.params), **rope)
    inherited = facts.inherited(method)
    params = {k: explicit.get(k, inherited.get(k, _DEFAULTS.get(k))) for k in TUNABLE}
    if facts.scaled and METHODS[method] == own_type:
        start, new_factor = _own_scaling(facts, native, target, "long_factor" in explicit, said)
    else:
        start = facts.scale_from or native
        new_factor = target / start
        if facts.scaled:
            said.append(f"note: {method} replaces {label}'s own {own_type} scaling (which serves "
                        f"{format_length(native)}); it scales from the original {format_length(start)}")
    return request(method, original_max=start, target=target, factor=new_factor, native=native, extra=facts.extra,
                   **rope, **params)


def _target_from(native: int, factor: float | None, target: int | None, label: str) -> int:
    """The target length a request names: ``--target``, or ``--factor`` times the native window (both: they agree).
    Shorter than the native window is refused."""
    if factor is not None:
        exact = native * factor
        if target is not None and not math.isclose(target, exact, rel_tol=1e-9):
            raise PosencError(f"{{factor}} {factor:g} x the native window {native} = {exact:g} disagrees with "
                              f"{{target}} {target}; give one of them", "factor", "target")
        if target is None:
            if not math.isfinite(exact) or exact != int(exact):
                raise PosencError(f"{{factor}} {factor:g} x the native window {native} = {exact:g} is not a whole "
                                  "number of positions; pass {target} instead", "factor", "target")
            target = int(exact)
    if target is None:
        raise PosencError("give the scale: {target} LENGTH, or {factor} S (S x the model's native window)",
                          "target", "factor")
    if target < native:
        raise PosencError(f"{{target}} {format_length(target)} is shorter than the {format_length(native)} {label} "
                          "already serves; nothing to extend (--engine ENGINE gives the command serving it at that "
                          "length)", "target")
    return target


def _own_scaling(facts: ModelFacts, native: int, target: int, new_lists: bool, said: list[str]) -> tuple[int, float]:
    """(the length it scales from, the factor) for a model extended with its own scaling family: its factor
    multiplied by the jump ``target / native``, from the length its factor refers to."""
    label = facts.label or "the model"
    own_type = facts.params.get("rope_type", "default")
    if own_type == "longrope" and not new_lists:
        # the lists, not the factor, set longrope's frequencies: the same lists past W would only change the
        # attention factor and claim a window nobody searched factors for
        raise PosencError(f"{label}'s longrope factors were searched for {format_length(native)}; posenc cannot "
                          f"invent factors for {format_length(target)}: pass {{long_factor}} and {{short_factor}} "
                          "searched for it (microsoft/LongRoPE)", "long_factor", "short_factor")
    jump = target / native
    if not RECORDS[own_type].reads_original:
        own_factor = float(facts.params.get("factor") or 1.0)
        # these name no original length: the length the factor refers to is the window over the factor
        start = max(1, int(round(native / own_factor)))
    else:
        start = int(facts.params["original_max_position_embeddings"])
        # a longrope dict without a factor (Phi-3 as shipped): transformers scales by the window over the original
        # length, so that is the factor the jump multiplies (read as 1, a Phi-3 at 256k got attention factor 1.04
        # where 64x gives 1.22)
        own_factor = float(facts.params.get("factor") or native / start)
    new_factor = own_factor * jump
    said.append(f"note: {label} keeps its own {own_type} scaling: factor {own_factor:g} x {jump:g} = "
                f"{new_factor:g} ({format_length(native)} -> {format_length(target)})")
    return start, new_factor


def _refuse_unreadable(method: str, facts: ModelFacts, own_type: str, label: str) -> None:
    """Refuse a request whose config the model's own class would reject or misread (tested on the corpus)."""
    if own_type not in set(METHODS.values()):
        raise PosencError(f"{label} uses rope_type {own_type!r}, which posenc does not write: replacing it with "
                          f"{method} would change frequencies the model was trained with (serve its own window, or "
                          "extend it with the tools of its authors)")
    # the per-model-type data loads only when there is a model: a bare `scale` or `pick` never reads it
    from posenc_cli.models.model_types import accepted_rope_types

    accepts = accepted_rope_types(facts.model_type)
    rope_type = METHODS[method]
    if accepts is not None and rope_type != "default" and rope_type not in accepts:
        way_out = " or longrope with the model's factor lists" if "longrope" in accepts else ""
        raise PosencError(f"{label} is a {facts.model_type} model: transformers' config class takes "
                          f"{', '.join(sorted(accepts)) or 'no scaling dict'} (it rejects {rope_type}); use ntk "
                          f"(a larger rope_theta, no scaling dict){way_out}")


def _method_of(rope_type: str, asked: str) -> str:
    """The method name of a model's own rope type (for a request that returns the model as it is); a type posenc
    does not write (proportional, mrope) keeps the name asked for."""
    return next((m for m, t in METHODS.items() if t == rope_type), asked)
