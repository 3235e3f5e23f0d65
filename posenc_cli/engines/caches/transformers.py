"""transformers' caches: what ``generate`` holds after a context of N tokens (its default cache, a
``DynamicCache(config=...)`` or the model's own class), from
:func:`~posenc_cli.models.cache_layout.transformers_cache`.

Proven against the cache tensors of tiny random models of every causal-LM type that builds on a CPU
(``tests/models/test_cache_layout.py``) and, for this module's settings, ``tests/engines/test_memory_transformers.py``.
transformers allocates as it goes: no padding, one sequence per batch row, a sliding layer keeps its last
``window - 1`` tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from posenc_cli.engines.caches.model import CacheGroup, Cost, EngineMemory, Extra, Setting, SettingValue
from posenc_cli.models.cache_layout import transformers_cache

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout

VERSION = "5.25.0"

SETTINGS = (
    Setting("dtype", "dtype", "auto", "str", ("auto", "float32", "float16", "bfloat16"),
            help="the compute dtype (auto: the config's dtype, else bfloat16)"),
    Setting("batch", "batch_size", 1, help="sequences generated at once"),
)


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The bytes of transformers' cache after ``ctx`` tokens, per group of equal layers."""
    dtype = str(settings["dtype"])
    notes = []
    if dtype == "auto":
        dtype = layout.dtype or "bfloat16"
        if layout.dtype is None:
            notes.append("the config names no dtype: bfloat16 assumed (transformers loads the weights' own)")
    batch = int(settings["batch"])
    tensors = transformers_cache(layout, ctx, batch, dtype)
    groups = []
    for group in layout.groups():
        members = set(group.layers)
        k = sum(t.nbytes for t in tensors if t.layer in members and t.name in ("keys", "indexer_keys"))
        v = sum(t.nbytes for t in tensors if t.layer in members and t.name == "values")
        s = sum(t.nbytes for t in tensors if t.layer in members and t.name not in ("keys", "values", "indexer_keys"))
        window = group.cache.window
        cells = 0 if k + v == 0 else ctx if window is None or window <= 1 else min(ctx, window - 1)
        groups.append(CacheGroup(group.cache.kind, len(group.layers), cells, k, v, s, dtype, dtype))
    extras = (Extra("activations", None, "transformers allocates them per forward pass; posenc does not model them"),)
    return Cost("transformers", ctx, ctx, batch, dict(settings, dtype=dtype), tuple(groups), extras, tuple(notes))


MEMORY = EngineMemory(
    "transformers", VERSION, "proven against the cache tensors of tiny random models (transformers 5.25.0)",
    SETTINGS, cost)
