"""The rope record: one immutable :class:`RopeGroup` per layer group of a model, the interface between the reader
(and the request) and every rendering and runner. :func:`rope_groups` builds them once from a
:class:`~posenc_cli.models.model_positions.ModelPositions`; no runner re-derives a group's rope from the raw config.

Conventions: a group rotates the first ``spec.rotary_dim`` features of each head (``head_dim *
partial_rotary_factor``, the rest pass through), in pairs with inverse frequency ``theta ** (-2i / rotary_dim)``
before scaling (base ``theta``, ``rope_theta``). ``layout`` says how the pairs are formed: ``rotate-half`` pairs feature
``i`` with ``i + rotary_dim / 2`` (rotate-half, GPT-NeoX, as transformers does), ``interleaved`` pairs ``2i`` with
``2i + 1`` (GPT-J; remote-code families read with ``is_neox_style=False``). numpy at import (``frequencies``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.facts import window_of
from posenc_cli.models.model_positions import LayerRope, ModelPositions
from posenc_cli.rope.frequencies import RopeSpec, compute
from posenc_cli.rope.windows import Window

#: rope types whose frequencies do not depend on the window (Recurrent Gemma's config names none)
_WINDOW_FREE = frozenset({"default", "linear", "proportional"})


def spec_for(model: ModelPositions, layer: LayerRope) -> RopeSpec:
    """The :class:`RopeSpec` transformers would build for one layer group of ``model``."""
    head_dim = layer.head_dim or model.head_dim
    if head_dim is None:
        raise PosencError("the config has neither head_dim nor hidden_size and num_attention_heads; "
                          "cannot tell the rotary dimension")
    rope_type = layer.params.get("rope_type", "default")
    if model.max_position_embeddings is None and rope_type not in _WINDOW_FREE:
        raise PosencError(f"the config has no max_position_embeddings, which rope_type {rope_type!r} scales from")
    return RopeSpec(layer.params, head_dim, model.max_position_embeddings or 0, default_partial=model.default_partial)


@dataclass(frozen=True)
class RopeGroup:
    """One layer group's rope, as every engine, trainer and report reads it.

    ``name``: the group (``full_attention``, ``sliding_attention``, ``main``...; ``default`` for a single one);
    ``layers``: its layer indices (None when the config gives no layer count); ``spec``: the rope transformers
    builds for it (parameters, rope type, theta, head dim, rotary dim); ``layout``: ``rotate-half`` or ``interleaved``
    (module docstring); ``softmax_scale``: the model's multiplier on ``1/sqrt(head_dim)``; ``window``: the window
    it serves (None without a ``max_position_embeddings``); ``top_level``: the config's outer rope keys
    transformers also reads (``truncate``)."""

    name: str
    layers: tuple[int, ...] | None
    spec: RopeSpec
    layout: str
    softmax_scale: float
    window: Window | None
    top_level: dict[str, Any] | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.spec.params)

    @cached_property
    def attention_factor(self) -> float:
        """The cos/sin factor transformers applies at the native window (the window, else
        ``max_position_embeddings``); computed when first asked, once."""
        length = self.window.native if self.window else self.spec.max_position_embeddings
        return compute(self.spec, length or None, top_level=self.top_level).attention_factor


def rope_groups(model: ModelPositions) -> tuple[RopeGroup, ...]:
    """The model's rope record: one :class:`RopeGroup` per layer group, in the reader's order."""
    layout = model.engine.pair_layout if model.engine is not None else "rotate-half"
    return tuple(RopeGroup(layer.name, tuple(layer.layers) if layer.layers is not None else None,
                           spec_for(model, layer), layout, model.softmax_scale, window_of(model, layer),
                           model.top_level)
                 for layer in model.layers)
