"""Engine settings as the user types them for ``posenc memory``: each engine's own option names.

With one ``--engine E``, the words after the model are E's options under E's names: ``--cache-type-k q8_0``,
``--cache-type-v=q8_0``, ``--kv-unified`` (an on/off setting alone means on), ``OLLAMA_NUM_PARALLEL=2`` (an
environment variable or Modelfile parameter, as the engine reads it). With several engines, a setting names its
engine: ``--set llama.cpp:--cache-type-k=q8_0`` (repeatable); every setting not given is the engine's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from posenc_cli.engines.caches.model import EngineMemory
from posenc_cli.errors import PosencError


def _split(word: str) -> tuple[str, str | None]:
    name, eq, value = word.partition("=")
    return name, value if eq else None


def engine_args(memory: EngineMemory, words: Sequence[str]) -> dict[str, str]:
    """The settings ``words`` give one engine, ``{key: text}`` (parsed and checked later by
    :meth:`EngineMemory.settings_for`)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        name, value = _split(words[i])
        setting = memory.setting(name)
        if value is None and setting.kind == "bool":
            value = "on"
        elif value is None:
            if i + 1 >= len(words):
                raise PosencError(f"{setting.flag} needs a value")
            i += 1
            value = words[i]
        out[setting.key] = value
        i += 1
    return out


def given_settings(models: Mapping[str, EngineMemory], extra: Sequence[str], sets: Sequence[str]) -> dict[
        str, dict[str, str]]:
    """Per engine, the settings given: ``extra`` (the words after the model, one engine only) and ``sets``
    (``ENGINE:SETTING=VALUE``)."""
    out: dict[str, dict[str, str]] = {name: {} for name in models}
    if extra:
        if len(models) != 1:
            raise PosencError(f"{' '.join(extra)}: with several engines, give each engine's setting as "
                              "{set} ENGINE:SETTING=VALUE (for example llama.cpp:--cache-type-k=q8_0)", "set")
        (name, memory), = models.items()
        out[name].update(engine_args(memory, extra))
    for text in sets:
        engine, colon, rest = text.partition(":")
        if not colon or engine not in models:
            raise PosencError(f"{{set}} {text!r}: use ENGINE:SETTING=VALUE with ENGINE one of the engines asked for "
                              f"({', '.join(models)})", "set")
        out[engine].update(engine_args(models[engine], [rest]))
    return out
