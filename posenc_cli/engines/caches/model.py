"""The record each engine's cache module exports (``MEMORY``: an :class:`EngineMemory`) and the answer it gives
(:class:`Cost`), stdlib only.

An engine's memory model takes a :class:`~posenc_cli.models.cache_layout.CacheLayout` (what each layer caches, as
transformers or a GGUF states it), a context length in tokens and the engine's settings (every one of
:attr:`EngineMemory.settings`, given or defaulted: :meth:`EngineMemory.settings_for`), and returns the bytes the
engine allocates for its caches at that length, per group of equal layers, K and V apart, states apart, with the
memory outside the caches that posenc can compute (:class:`Extra`; ``bytes`` None: named, not computed).

Settings are named as the engine names them (``--cache-type-k``, ``num_ctx``, ``--block-size``): ``flag`` is what
the user types for that engine, ``key`` the field name posenc uses in JSON and the library. Defaults are the engine's
own at :attr:`EngineMemory.version`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout

SettingValue = int | str | bool
SettingKind = Literal["int", "str", "bool", "size"]


class Setting(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """One engine setting that changes what its caches cost.

    ``key``: posenc's name (a Python identifier, the JSON key); ``flag``: the engine's own (``--cache-type-k``,
    ``OLLAMA_NUM_PARALLEL``); ``choices``: the allowed values (empty: any value of ``kind``); ``minimum`` for ints."""

    key: str
    flag: str
    default: SettingValue
    kind: SettingKind = "int"
    choices: tuple[SettingValue, ...] = ()
    minimum: int = 1
    help: str = ""

    def parse(self, text: str | SettingValue) -> SettingValue:
        """``text`` as this setting's value, checked against its choices (a :class:`PosencError` naming them)."""
        value: SettingValue
        if self.kind == "bool":
            if isinstance(text, bool):
                value = text
            elif str(text).lower() in ("1", "true", "on", "yes"):
                value = True
            elif str(text).lower() in ("0", "false", "off", "no"):
                value = False
            else:
                raise PosencError(f"{self.flag} {text!r}: use on or off")
        elif self.kind in ("int", "size"):
            if isinstance(text, bool):
                raise PosencError(f"{self.flag} {text!r} is not a whole number")
            if self.kind == "size" and isinstance(text, str):
                from posenc_cli.units import parse_size

                value = parse_size(text, name=self.flag)
            else:
                try:
                    value = int(text)
                except ValueError:
                    raise PosencError(f"{self.flag} {text!r} is not a whole number") from None
            if value < self.minimum:
                raise PosencError(f"{self.flag} {text!r} must be at least {self.minimum}")
        else:
            value = str(text)
        if self.choices and value not in self.choices:
            raise PosencError(f"{self.flag} {text!r} is not allowed; use one of: "
                              f"{', '.join(str(c) for c in self.choices)}")
        return value


class CacheGroup(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """What one group of equal layers holds at the context, as the engine allocates it.

    ``cells``: token slots per layer and sequence stream as allocated (padded, a sliding layer's cells), 0 for
    state-only layers; ``k_bytes``, ``v_bytes``, ``state_bytes``: the whole group's bytes (every layer, every
    sequence the engine allocates for)."""

    kind: str
    layers: int
    cells: int
    k_bytes: int
    v_bytes: int
    state_bytes: int = 0
    k_type: str = ""
    v_type: str = ""
    note: str = ""

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes + self.state_bytes


class Extra(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """Memory outside the caches: ``bytes`` None when posenc names it without computing it (``why`` says why)."""

    name: str
    bytes: int | None
    why: str = ""


class Cost(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """An engine's caches for one model at one context: the groups, what lies outside them, and notes.

    ``ctx``: the context asked (tokens per sequence); ``allocated``: the cells the engine sizes its full-attention
    cache to (padded); ``sequences``: how many sequences of ``ctx`` the allocation serves at once."""

    engine: str
    ctx: int
    allocated: int
    sequences: int
    settings: Mapping[str, SettingValue]
    groups: tuple[CacheGroup, ...]
    extras: tuple[Extra, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def cache_bytes(self) -> int:
        return sum(g.bytes for g in self.groups)

    @property
    def extra_bytes(self) -> int:
        return sum(e.bytes for e in self.extras if e.bytes is not None)


#: a change of settings that buys a longer context (``--fit``): a label in the engine's words and the new values
Lever = tuple[str, dict[str, SettingValue]]


class Unsupported(Exception):  # noqa: N818 - a reason, not an error: the row says why and the command goes on
    """The engine cannot run this model (an architecture it lacks): ``str()`` says why."""


def _no_levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    return []


class EngineMemory(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """An engine's memory model.

    ``cost(layout, ctx, settings)``: a :class:`Cost` (raises :class:`Unsupported` for a model the engine cannot
    run); ``levers(settings)``: the setting changes that buy more context, in the order a user would try them;
    ``basis``: how the model is known (``"proven against llama.cpp's log (llama-cpp-python 0.3.36)"``,
    ``"modelled from source at SGLang 0.5.23"``); ``requests(layout, ctx, settings, memory)``: where the engine
    serves requests from one pool, how many of ``ctx`` tokens a pool of ``memory`` bytes serves at once (None: the
    engine allocates per slot, so no such figure)."""

    engine: str
    version: str
    basis: str
    settings: tuple[Setting, ...]
    cost: Callable[[CacheLayout, int, Mapping[str, SettingValue]], Cost]
    levers: Callable[[Mapping[str, SettingValue]], list[Lever]] = _no_levers
    notes: tuple[str, ...] = ()
    requests: Callable[[CacheLayout, int, Mapping[str, SettingValue], int], float] | None = None

    def setting(self, name: str) -> Setting:
        """The setting called ``name`` (its key or the engine's flag)."""
        bare = name.lstrip("-")
        for s in self.settings:
            if bare in (s.key, s.flag.lstrip("-")) or name == s.flag:
                return s
        allowed = ", ".join(s.flag for s in self.settings) or "none"
        raise PosencError(f"{self.engine} has no memory setting {name!r}; its settings: {allowed}")

    def settings_for(self, given: Mapping[str, str | SettingValue] | None = None) -> dict[str, SettingValue]:
        """Every setting's value: the given ones (by key or flag) parsed and checked, the rest the defaults."""
        out: dict[str, SettingValue] = {s.key: s.default for s in self.settings}
        for name, text in (given or {}).items():
            s = self.setting(name)
            out[s.key] = s.parse(text)
        return out
