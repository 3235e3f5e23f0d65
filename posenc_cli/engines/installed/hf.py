"""The installed transformers, run: the model's own rotary embedding class (``XRotaryEmbedding`` of its modeling
module, which calls ``ROPE_INIT_FUNCTIONS`` and, per forward, the dynamic/LongRoPE update) on the config built by
``AutoConfig``, for the reference row of ``posenc check --installed``: the reference itself is then run, not
modelled.

Per rope group (a per-layer-type model such as Gemma 3: the class's ``{layer_type}_inv_freq`` buffers), one forward
at the last position of a ``seq_len``-token sequence, as a generation of that length runs it, then the inverse
frequencies (float32, rotate-half pairs: ``inv_freq[i]`` turns dims ``i`` and ``i + rotary_dim/2``) and the
attention scaling the module multiplies cos and sin by. The softmax scale (``query_pre_attn_scalar``, DeepSeek's
mscale) is applied by the attention class, outside the rotary module: that one is posenc's modelled value.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import hf as modelled
from posenc_cli.engines.runs import EngineRun, GroupRun

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions


class NotRun(Exception):
    """The installed transformers could not build this model's rotary embedding here (the message says why)."""


def version() -> str | None:
    """The installed transformers' version, or None when it is not installed or does not import (the distribution
    is looked up first: no import without it)."""
    if importlib.util.find_spec("transformers") is None:
        return None
    try:
        import transformers
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return str(transformers.__version__)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' validation messages and Python warnings are not the result: silenced."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def rotary_class(text_config: Any) -> type:
    """The model's ``XRotaryEmbedding`` class (the one with ``compute_default_rope_parameters``; of several, the one
    named after the text config's class)."""
    module = importlib.import_module(type(text_config).__module__.replace(".configuration_", ".modeling_"))
    found = [getattr(module, name) for name in dir(module)
             if name.endswith("RotaryEmbedding") and hasattr(getattr(module, name), "compute_default_rope_parameters")]
    if len(found) > 1:
        own = type(text_config).__name__.removesuffix("Config") + "RotaryEmbedding"
        found = [cls for cls in found if cls.__name__ == own]
    if len(found) != 1:
        raise NotRun(f"no one rotary embedding class in {module.__name__}")
    cls: type = found[0]
    return cls


#: the rope types whose frequencies transformers changes per forward (``dynamic_rope_update``): only these need a
#: forward at the sequence's last position; the others are the module's buffers as built
_PER_FORWARD = ("dynamic", "longrope")


def _forward(rotary: Any, x: Any, position_ids: Any, layer_type: str | None) -> None:
    """One forward of the rotary module (its frequency update runs), at ``position_ids``."""
    import torch

    try:
        with _quiet(), torch.no_grad():
            if layer_type is not None:
                rotary(x, position_ids, layer_type=layer_type)
            else:
                rotary(x, position_ids)
    except Exception as exc:  # noqa: BLE001 - a rotary class with its own position layout (M-RoPE)
        raise NotRun(f"{type(rotary).__name__}.forward: {type(exc).__name__}: {exc}") from exc


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the installed transformers computes serving ``max_model_len`` for a sequence of ``seq_len`` tokens
    (default: that long), per rope group. Raises :class:`NotRun` when it cannot build the model's rotary class."""
    import torch
    from transformers import AutoConfig

    from posenc_cli.models.record import rope_groups

    at = seq_len or max_model_len
    try:
        with _quiet():
            config = AutoConfig.for_model(**{"model_type": "llama", **cfg})
            text = config.get_text_config(decoder=True)
            rotary = rotary_class(text)(text)
    except NotRun:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's transformers may reject or lack the model
        raise NotRun(f"{type(exc).__name__}: {exc}") from exc
    x = torch.zeros(1, dtype=torch.float32)
    position_ids = torch.tensor([[at - 1]], dtype=torch.long)
    groups = []
    for g in rope_groups(model):
        layered = hasattr(rotary, f"{g.name}_inv_freq")
        if g.params.get("rope_type") in _PER_FORWARD:
            _forward(rotary, x, position_ids, g.name if layered else None)
        prefix = f"{g.name}_" if layered else ""
        inv = getattr(rotary, f"{prefix}inv_freq").to(torch.float32).numpy().copy()
        scaling = float(getattr(rotary, f"{prefix}attention_scaling"))
        groups.append(GroupRun(g.name, inv, scaling, g.softmax_scale))
    version_ = version() or "?"
    return EngineRun(modelled.NAME, version_, max_model_len, groups, ["config.json as it is"], accepts=None)
