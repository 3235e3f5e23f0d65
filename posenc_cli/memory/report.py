"""``posenc memory``'s core: a model read once (its cache layout and its weights), each asked engine's memory
model run at the context, and with a budget the longest context that fits and what buys more.

The answer is one JSON-ready dict (:func:`memory_report`) and an exit code: 0 computed (a context past the
model's window is computed and flagged), 1 when a budget was given and the context does not fit an engine that
can run the model, 3 when no asked engine can run it. Bytes are exact integers; every setting a row used is
listed with whether it was given or the engine's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.engines.caches.model import EngineMemory, SettingValue, Unsupported
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.frameworks import registry
from posenc_cli.memory.fit import Fit, engine_fit, needed
from posenc_cli.memory.settings import given_settings

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout
    from posenc_cli.models.sources import Source
    from posenc_cli.models.weights import Weights

#: what the user may call an engine beside its registry name and its --engine formats
_ALIASES = {"transformers": "hf"}


def memory_engine(name: str) -> str:
    """The registry name of the engine ``name`` (a registry name, an ``--engine`` format or ``transformers``)
    that has a memory model; one PosencError listing them otherwise."""
    known = registry.memory_engines()
    owner = _ALIASES.get(name, name)
    if owner not in known:
        try:
            owner = registry.format_owner(name)
        except PosencError:
            owner = ""
    if owner not in known:
        raise PosencError(f"{{engine}} {name!r} has no memory model; use one of: "
                          f"{', '.join(shown_name(n) for n in known)}", "engine")
    return owner


def shown_name(name: str) -> str:
    """An engine as posenc memory names it: the registry's ``hf`` is transformers."""
    return "transformers" if name == "hf" else name


class Budget(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """What the caches may use: ``fit`` (bytes left for the caches) or ``memory`` (a whole device: the weights
    and the overheads posenc computes come off it)."""

    fit: int | None = None
    memory: int | None = None


#: no budget: the caches are sized, nothing is judged
NO_BUDGET = Budget()


class MemoryModel(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """A model read for its memory: its layout, its weights, its window and the notes its reading made."""

    label: str
    layout: CacheLayout
    window: int | None
    weights: Weights
    notes: list[str]
    source: Source | None = None  # a config's source, read again for its served window when a length asks for it


def read_model(source: str, revision: str | None = None) -> MemoryModel:
    """The cache layout (a GGUF's header, else the config as transformers reads it), the weights' size (headers
    only) and the window of ``source``. A local GGUF is read for its cache facts alone: its rope (which
    ``read_source`` matches against transformers, with numpy for a ``rope_freqs`` tensor) is not needed here."""
    from posenc_cli.models.weights import weights_of

    gguf = _local_gguf(source)
    if gguf is not None:
        from posenc_cli.models.gguf.caches import gguf_cache_layout

        label, layout = source, gguf_cache_layout(gguf, source)
    else:
        from posenc_cli.models.sources import read_source

        src = read_source(source, revision=revision)
        if src.kind == "gguf" and src.path:  # a folder holding one GGUF
            from posenc_cli.models.gguf.caches import gguf_cache_layout

            layout = gguf_cache_layout(src.path, src.label)
        else:
            from posenc_cli.models.cache_layout import cache_layout

            layout = cache_layout(src.config)
        label = src.label
    return MemoryModel(label, layout, layout.window, weights_of(source, revision=revision), list(layout.notes),
                       None if gguf is not None or src.kind == "gguf" else src)


def _local_gguf(source: str) -> str | None:
    """``source`` when it names a GGUF file (its magic bytes), else None."""
    import os
    from pathlib import Path

    from posenc_cli.models.gguf.header import starts_with_gguf_magic

    path = os.path.expanduser(source)
    try:
        is_file = os.path.isfile(path)
    except (OSError, ValueError):  # a name the OS rejects (too long, NUL) is no file
        return None
    return path if is_file and starts_with_gguf_magic(Path(path), source) else None


def _group(g: Any) -> dict[str, Any]:
    return {**g._asdict(), "bytes": g.bytes}


def _settings(memory: EngineMemory, values: Mapping[str, SettingValue], given: Mapping[str, str]) -> list[dict[
        str, Any]]:
    return [{"key": s.key, "flag": s.flag, "value": values[s.key], "given": s.key in given} for s in memory.settings]


def _fit_json(fit: Fit) -> dict[str, Any]:
    return {"longest": fit.longest, "unbounded": fit.unbounded}


def engine_row(name: str, memory: EngineMemory, model: MemoryModel, ctx: int, given: Mapping[str, str],
               budget: int | None, extras: bool) -> dict[str, Any]:
    """One engine's answer: its caches at ``ctx``, and with a ``budget`` whether they fit, the longest context
    that fits and what each lever reaches."""
    values = memory.settings_for(given)
    row: dict[str, Any] = {"engine": shown_name(name), "version": memory.version, "basis": memory.basis,
                           "settings": _settings(memory, values, given)}
    try:
        cost = memory.cost(model.layout, ctx, values)
    except Unsupported as why:
        return {**row, "runs": False, "why": str(why)}
    row.update(runs=True, ctx=cost.ctx, allocated=cost.allocated, sequences=cost.sequences,
               groups=[_group(g) for g in cost.groups], cache_bytes=cost.cache_bytes,
               extras=[e._asdict() for e in cost.extras], extra_bytes=cost.extra_bytes,
               notes=list(memory.notes) + list(cost.notes))
    if budget is not None:
        row["needs"] = needed(cost, extras=extras)
        row["fits"] = row["needs"] <= budget
        own = engine_fit(memory, model.layout, values, budget, extras=extras)
        row["fit"] = _fit_json(own)
        row["levers"] = _levers(memory, model.layout, values, budget, extras, own)
        if memory.requests is not None and row["fits"]:
            at_once = memory.requests(model.layout, ctx, values, budget)
            row["requests_at_once"] = None if at_once == float("inf") else round(at_once, 2)
    return row


def _levers(memory: EngineMemory, layout: CacheLayout, values: Mapping[str, SettingValue], budget: int,
            extras: bool, own: Fit) -> list[dict[str, Any]]:
    """Each lever that buys more context than the settings asked (one that buys nothing for this model is left
    out: an SWA ratio on a model without sliding layers)."""
    out = []
    for label, change in memory.levers(values):
        try:
            fit = engine_fit(memory, layout, {**values, **change}, budget, extras=extras)
        except (Unsupported, PosencError):  # a lever that does not apply to this model (a --tp it cannot split by)
            continue
        if (fit.longest or 0) <= (own.longest or 0) and not (fit.unbounded and not own.unbounded):
            continue
        out.append({"label": label, "settings": change, **_fit_json(fit)})
    return out


class Asked(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """A model read and the engines asked for, each with its memory model and the settings given it."""

    model: MemoryModel
    models: dict[str, EngineMemory]
    given: dict[str, dict[str, str]]

    def values(self, name: str) -> dict[str, SettingValue]:
        return self.models[name].settings_for(self.given[name])


def asked(source: str, engines: Sequence[str] | None, *, extra: Sequence[str] = (), sets: Sequence[str] = (),
          revision: str | None = None, weights: int | None = None) -> Asked:
    """The engines (default: every one with a memory model), their settings checked, then the model read;
    ``weights`` (bytes) stands for the weights' size when given (the quantized file to be served, or a config.json
    alone)."""
    names = [memory_engine(n) for n in engines] if engines else list(registry.memory_engines())
    models = {shown_name(n): m for n in dict.fromkeys(names) if (m := registry.load_memory(n)) is not None}
    given = given_settings(models, extra, sets)
    for name, memory in models.items():
        memory.settings_for(given[name])  # a bad value is an error before the model is read
    model = read_model(source, revision)
    if weights is not None:
        from posenc_cli.models.weights import Weights

        read = model.weights
        said = f"; the files say {read.bytes:,} bytes" if read.bytes is not None else ""
        model = model._replace(weights=Weights(weights, f"given by --weights{said}"))
    return Asked(model, models, given)


def context_for(model: MemoryModel, ctx: int | None, notes: list[str], *, past_window_note: bool = True) -> int:
    """The context asked, else the window the model serves (noted); a context past it is noted, not refused
    (``past_window_note`` False: the caller extends the model there, as ``pick``'s plan does). The window is the one
    the rope settings serve (a card-patched YaRN config serves 128k with ``max_position_embeddings`` 32k), read only
    when a length needs it."""
    window, trained, serving = model.window, None, ""
    if model.source is not None and (ctx is None or (window is not None and ctx > window)):
        window, trained, serving = _served(model.source, window)
    if ctx is None:
        if window is None:
            raise PosencError("the model names no window (max_position_embeddings): give {ctx}", "ctx")
        notes.append(f"--ctx not given: the model's window, {window:,} tokens" + (f" ({serving})" if serving else ""))
        return window
    if past_window_note and window is not None and ctx > window:
        notes.append(f"{ctx:,} tokens is past the {window:,} the model serves: computed, but its positions stop there "
                     "(posenc scale extends it)")
    elif trained is not None and ctx > trained and serving:
        notes.append(f"the model {serving}, from the {trained:,} it was trained at")
    return ctx


def _served(source: Source, window: int | None) -> tuple[int | None, int | None, str]:
    """(the window the rope settings serve, the trained length, how it serves past it) of a config, by the facts
    every command reads; the file's window when it has no RoPE to read."""
    from posenc_cli.models.facts import model_facts
    from posenc_cli.models.sources import describe_source

    try:
        facts = model_facts(describe_source(source), source.label, cfg=source.config)
    except PosencError:  # no RoPE (ALiBi, learned positions): the file's window stands
        return window, None, ""
    served = max(facts.native or 0, window or 0) or None
    return served, facts.trained, facts.serving


def memory_report(source: str, ctx: int | None, engines: Sequence[str] | None, *, extra: Sequence[str] = (),
                  sets: Sequence[str] = (), budget: Budget = NO_BUDGET, revision: str | None = None,
                  weights: int | None = None) -> tuple[dict[str, Any], ExitCode]:
    """``posenc memory``'s result and exit code (see the module docstring)."""
    return report(asked(source, engines, extra=extra, sets=sets, revision=revision, weights=weights), ctx, budget)


def report(ask: Asked, ctx: int | None, budget: Budget = NO_BUDGET, *,
           past_window_note: bool = True) -> tuple[dict[str, Any], ExitCode]:
    """:func:`memory_report` on a model already read."""
    model = ask.model
    notes = list(model.notes)
    ctx = context_for(model, ctx, notes, past_window_note=past_window_note)
    limit, extras = _budget(budget, model, notes)
    rows = [engine_row(n, m, model, ctx, ask.given[n], limit, extras) for n, m in ask.models.items()]
    result = {"model": {"source": model.label, "model_type": model.layout.model_type,
                        "text_type": model.layout.text_type, "layers": model.layout.num_layers,
                        "dtype": model.layout.dtype, "window": model.window},
              "ctx": ctx, "weights": _weights_json(model.weights),
              "budget": {"fit": budget.fit, "memory": budget.memory, "for_caches": limit,
                         "extras_counted": extras},
              "engines": rows, "notes": notes}
    running = [r for r in rows if r["runs"]]
    if not running:
        return result, ExitCode.COULD_NOT_RUN
    if limit is not None and not all(r["fits"] for r in running):
        return result, ExitCode.CHECK_FAILED
    return result, ExitCode.OK


def budget_for(ask: Asked, budget: Budget) -> tuple[int | None, bool]:
    """Bytes for the caches and whether computed extras count, for ``budget`` on the model asked."""
    return _budget(budget, ask.model, [])


def _weights_json(weights: Weights) -> dict[str, Any]:
    return {"bytes": weights.bytes, "source": weights.source, "by_dtype": dict(weights.by_dtype),
            "parameters": weights.parameters, "notes": list(weights.notes)}


def _budget(budget: Budget, model: MemoryModel, notes: list[str]) -> tuple[int | None, bool]:
    """Bytes for the caches and whether the extras posenc computes count against them."""
    if budget.fit is not None:
        return budget.fit, False
    if budget.memory is None:
        return None, False
    if model.weights.bytes is None:
        notes.append(f"the weights' size is unknown ({model.weights.source}): --memory read as --fit, the whole "
                     "size left for the caches")
        return budget.memory, False
    left = budget.memory - model.weights.bytes
    if left <= 0:
        notes.append("the weights alone do not fit --memory")
        return 0, True
    return left, True
