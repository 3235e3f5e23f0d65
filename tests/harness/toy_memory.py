"""A toy engine memory model for the memory stage's tests: registered by a monkeypatched entry (as
``toy_engine.py`` is), it pages full layers in blocks, keeps sliding layers at their window and states fixed, and
cannot run a model whose text type is ``mamba``. Its arithmetic is simple enough to recompute by hand in a test."""

from __future__ import annotations

from collections.abc import Mapping

from posenc_cli.engines.caches.model import CacheGroup, Cost, EngineMemory, Setting, SettingValue, Unsupported
from posenc_cli.models.cache_layout import CacheLayout

NAME = "toy"
BYTES = {"f16": 2, "q8": 1}


def cells(ctx: int, block: int, window: int | None) -> int:
    kept = ctx if window is None else min(ctx, window)
    return -(-kept // block) * block


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    if layout.text_type == "mamba":
        raise Unsupported("the toy engine runs no state-space model")
    block, slots, elem = int(settings["block"]), int(settings["slots"]), BYTES[str(settings["kv"])]
    groups = []
    for g in layout.groups():
        c = g.cache
        n = cells(ctx, block, c.window) if c.k_per_token else 0
        states = sum(4 * _prod(s.shape) for s in c.states) * slots
        groups.append(CacheGroup(c.kind, len(g.layers), n, len(g.layers) * n * c.k_per_token * elem * slots,
                                 len(g.layers) * n * c.v_per_token * elem * slots, len(g.layers) * states))
    return Cost(NAME, ctx, cells(ctx, block, None), slots, dict(settings), tuple(groups))


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def levers(settings: Mapping[str, SettingValue]) -> list[tuple[str, dict[str, SettingValue]]]:
    out: list[tuple[str, dict[str, SettingValue]]] = []
    if settings["kv"] != "q8":
        out.append(("--kv q8", {"kv": "q8"}))
    if int(settings["slots"]) > 1:
        out.append(("--slots 1", {"slots": 1}))
    return out


MEMORY = EngineMemory(NAME, "0.1", "a test's engine", (
    Setting("block", "--block", 16, "int", (16, 32, 256)),
    Setting("kv", "--kv", "f16", "str", ("f16", "q8")),
    Setting("slots", "--slots", 1),
    Setting("swa_full", "--swa-full", False, "bool"),
), cost, levers)
