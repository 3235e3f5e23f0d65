"""transformers' config keys for a request: the fragment to merge (v4 legacy keys or v5 ``rope_parameters``) and a
whole patched config.json (stdlib only: ``posenc scale`` and ``posenc pick`` render these without numpy).

Both come from the one rope dict :func:`posenc_cli.rope.scaling.rope_parameters` returns; a patched file is written by
:func:`posenc_cli.models.convert.with_rope`, so it keeps its format (v4 or v5), its nesting (``text_config``, one dict
per layer type) and every key the request does not change. The config reader loads only for a patched file (a
fragment from a bare request needs none of it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_config, dumps_json
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.engines.runs import EngineRun
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.models.model_positions import ModelPositions

NAME = "hf"
#: the transformers release posenc's frequency code is proven equal to (the reference of every comparison)
VERSION = "5.25"
#: the ``scale --engine`` names of transformers' keys: v4 legacy keys, v5 ``rope_parameters`` (the
#: registry's entry names these, so they are written here once)
FORMATS = ("hf", "hf-v5")


def format_hf(req: ScaleRequest) -> dict[str, Any]:
    """Legacy keys (transformers 4.x reads them; 5.x still accepts them): top-level theta + ``rope_scaling``."""
    p = rope_parameters(req)
    theta = p.pop("rope_theta")
    prf = p.pop("partial_rotary_factor", None)
    plain = p.get("rope_type", "default") == "default" and len(p) <= 1
    out: dict[str, Any] = {"rope_theta": theta, "rope_scaling": None if plain else p}
    if prf is not None:
        out["partial_rotary_factor"] = prf
    out["max_position_embeddings"] = max_position_embeddings(req)
    return out


def format_hf_v5(req: ScaleRequest) -> dict[str, Any]:
    """transformers 5 shape: one ``rope_parameters`` dict with ``rope_theta`` inside."""
    return {"rope_parameters": rope_parameters(req), "max_position_embeddings": max_position_embeddings(req)}


def own_format(facts: ModelFacts | None) -> str:
    """The format a model's file writes its rope settings in (``hf-v5`` for ``rope_parameters`` and for the model
    types only transformers 5 has, else ``hf``)."""
    if facts is None:
        return "hf"
    from posenc_cli.models.convert import V5_ONLY

    return "hf-v5" if facts.rope_parameters or facts.model_type in V5_ONLY else "hf"


def patch_config(config: dict[str, Any], req: ScaleRequest, fmt: str, group: str = "") -> dict[str, Any]:
    """A copy of a model's config.json with ``req`` applied to the rope group ``group`` (``""``: the only one).

    ``hf`` writes the legacy keys, ``hf-v5`` ``rope_parameters``; the other form is dropped, so no two copies can
    disagree. A request that keeps the model as it is returns the config unchanged.
    """
    if fmt not in FORMATS:
        raise PosencError(f"writing a config needs --engine hf or hf-v5, not {fmt!r}")
    from posenc_cli.models.config_keys import text_config
    from posenc_cli.models.convert import V5_ONLY, convert, with_rope

    to = "v5" if fmt == "hf-v5" else "v4"
    if req.unchanged:
        # the model as it is, in the form asked for: its own file, or the other transformers version of it
        text, text_type, _ = text_config(config)
        # a transformers-5-only type is in its one form whatever keys it uses
        v5 = text_type in V5_ONLY or (isinstance(text.get("rope_parameters"), dict) and not text.get("rope_scaling"))
        return dict(config) if v5 == (to == "v5") else convert(config, to)
    return with_rope(config, group, rope_parameters(req), max_position_embeddings(req),
                     to, head_dim=req.head_dim)


def fragment(config: dict[str, Any], req: ScaleRequest, fmt: str, group: str = "") -> dict[str, Any]:
    """The keys of :func:`patch_config`'s result that carry positions (inside ``text_config`` when the model keeps
    them there): what to merge into the model's config.json by hand."""
    from posenc_cli.models.config_keys import ABSENT, text_config

    patched = patch_config(config, req, fmt, group)
    text, _, where = text_config(patched)
    before = text_config(config)[0]
    keys = ("rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rope_local_base_freq",
            "max_position_embeddings")
    # keys that carry positions only in some families: shown when the request changes them
    changed = ("rotary_emb_base", "rotary_pct", "head_dim", "original_max_position_embeddings", "n_positions",
               "max_seq_len")
    out = {k: text[k] for k in keys if k in text}
    out |= {k: text[k] for k in changed if k in text and (k not in before or before[k] != text[k])}
    for key in reversed(where.removesuffix(ABSENT).split(".") if where else []):
        out = {key: out}  # in the file's nesting (text_config, thinker_config.text_config)
    return out


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine hf`` (v4 keys) or ``hf-v5``: for a model the keys to merge into its config (in its nesting, only
    the extended layer group changed), else the request's keys."""
    if r.config is not None and r.facts is not None:
        return dumps_config(fragment(r.config, r.req, r.fmt, r.facts.group)), []
    return dumps_json(format_hf(r.req) if r.fmt == "hf" else format_hf_v5(r.req)), []


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What transformers computes serving ``max_model_len`` for a sequence of ``seq_len`` tokens (default: that
    long): dynamic NTK and LongRoPE change with the sequence length (:func:`short_run`: at the original length)."""
    from posenc_cli.engines.transformers import reference_run  # numpy: only when a model is run

    return reference_run(NAME, VERSION, model, max_model_len, seq_len or max_model_len, past_window=True)


def short_run(model: ModelPositions, cfg: dict[str, Any], seq_len: int) -> EngineRun:
    """What transformers computes for a sequence of ``seq_len`` tokens (length-dependent rope's short length)."""
    from posenc_cli.engines.transformers import reference_run  # numpy: only when a model is run

    return reference_run(NAME, VERSION, model, seq_len, seq_len)


TARGET = Target(
    NAME, "transformers", "transformers", VERSION, render, run,
    targets="{version} (the reference; `convert --to v4` and `inspect --lint` also know 4.x)",
    proven_by="its own rotary classes (parity tests)")
