"""The rope dict an engine's command line carries for a model (what the engines' renderings share); the request
is handed to the engine that owns its format by :func:`posenc_cli.frameworks.registry.render_request`.

``posenc scale`` without ``--config`` loads one engine and not the model reader (``tests/test_imports.py`` guards
it); the reader loads inside :func:`served_rope` for that reason.
"""

from __future__ import annotations

from typing import Any

from posenc_cli.engines import hf
from posenc_cli.engines.target import Rendering
from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import rope_parameters


def served_rope(r: Rendering, *, replaces_dicts: bool = False) -> dict[str, Any]:
    """The model's whole ``rope_parameters`` after the request (one dict per layer type for Gemma 3), which engines
    that replace the dict must get whole; for a bare request the request's one dict. ``replaces_dicts``: the
    engine's ``--hf-overrides`` sets a dict-valued key whole (vLLM, SGLang), so a text model kept deeper than
    ``text_config`` is refused."""
    if r.config is None or r.facts is None:
        return rope_parameters(r.req)
    from posenc_cli.models.config_keys import ABSENT, text_config
    from posenc_cli.models.remote_code import v5_refusal
    from posenc_cli.models.rope_dicts import rope_dicts

    config, req, group = r.config, r.req, r.facts.group
    # where the language model's config sits as the reader found it (a remote-code family: where its engine reads it)
    where = r.facts.text_source.removesuffix(ABSENT)
    if replaces_dicts and where not in ("", "text_config"):
        # an override of `thinker_config` would replace the thinker's whole config, not its text model's rope dict
        raise PosencError(f"this model keeps its text model in {where}; {r.fmt}'s --hf-overrides would replace "
                          f"{where.split('.')[0]} whole, so posenc writes no override for it: use --engine hf and "
                          "serve the patched config.json")
    if v5_refusal(config):  # remote code reads transformers 4 keys: the whole rope as the v4 file resolves it
        dicts, nested = rope_dicts(hf.patch_config(config, req, "hf", group))
        return dicts if nested else dicts[""]
    rope: dict[str, Any] = text_config(hf.patch_config(config, req, "hf-v5", group))[0]["rope_parameters"]
    return rope


def in_text_config(r: Rendering) -> bool:
    """The model keeps its rope settings in ``text_config`` (multimodal), where vLLM and SGLang read them."""
    return r.facts.text_config if r.config is not None and r.facts is not None else False

