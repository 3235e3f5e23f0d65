"""``--memory`` on other commands: whether a context fits each engine, as one short row per engine.

``posenc check --memory SIZE`` adds these rows beside the rope verdicts (a context that does not fit an engine is a
failed check for that engine, reported apart: "does not fit: needs X, has Y"); ``posenc pick --memory SIZE`` puts
them in the plan, with the first of the engine's levers that makes the context fit, or the longest that does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.memory.report import Budget, asked, memory_engine, report
from posenc_cli.units import format_size

if TYPE_CHECKING:
    from posenc_cli.models.sources import Source


def fit_rows(source: str, ctx: int | None, engines: Sequence[str] | None, size: int, *,
             revision: str | None = None, extended: bool = False) -> dict[str, Any]:
    """Per engine with a memory model among ``engines`` (None: all): ``fits``, ``needs``, ``has`` (bytes for the
    caches: ``size`` less the weights and the overheads computed), ``longest`` and ``how`` (the first lever that
    fits, else None), ``line`` (the sentence a table shows); engines without a memory model are listed apart."""
    names = [n for n in engines or [] if _has_model(n)] if engines is not None else None
    skipped = [n for n in engines or [] if not _has_model(n)]
    result, _ = report(asked(source, names, revision=revision), ctx, Budget(memory=size),
                       past_window_note=not extended)
    has = result["budget"]["for_caches"]
    rows = []
    for row in result["engines"]:
        out: dict[str, Any] = {"engine": row["engine"], "runs": row["runs"]}
        if not row["runs"]:
            rows.append({**out, "line": f"cannot run the model: {row['why']}"})
            continue
        how = next((lever for lever in row["levers"] if _reaches(lever, result["ctx"])), None)
        out.update(fits=row["fits"], needs=row["needs"], has=has, longest=row["fit"]["longest"],
                   how=None if how is None else {"label": how["label"], "settings": how["settings"]},
                   settings={s["flag"]: s["value"] for s in row["settings"]})
        out["line"] = _line(out)
        rows.append(out)
    return {"ctx": result["ctx"], "memory": size, "for_caches": has, "weights": result["weights"],
            "engines": rows, "not_sized": skipped, "notes": result["notes"]}


def _has_model(name: str) -> bool:
    try:
        memory_engine(name)
    except ValueError:
        return False
    return True


def _reaches(lever: dict[str, Any], ctx: int) -> bool:
    return bool(lever["unbounded"] or (lever["longest"] is not None and lever["longest"] >= ctx))


def _line(row: dict[str, Any]) -> str:
    need, has = format_size(row["needs"]), format_size(row["has"])
    if row["fits"]:
        return f"fits: needs {need}, has {has}"
    longest = "nothing fits" if row["longest"] is None else f"longest that fits {row['longest']:,}"
    how = f"; fits with {row['how']['label']}" if row["how"] else ""
    return f"does not fit: needs {need}, has {has} ({longest}{how})"


def served_memory(engine: str, source: Source, ctx: int) -> dict[str, Any] | None:
    """What ``engine``'s caches take for ``source`` at ``ctx`` on the engine's defaults (Ollama: at ``num_ctx``
    ``ctx``), as ``{"engine", "ctx", "bytes", "settings", "line"}``; None when posenc cannot size it (no memory
    model, an architecture the engine lacks, a model whose layers posenc cannot read)."""
    from posenc_cli.engines.caches.model import Unsupported
    from posenc_cli.frameworks.registry import load_memory
    from posenc_cli.models.cache_layout import cache_layout
    from posenc_cli.models.gguf.caches import gguf_cache_layout

    memory = load_memory(memory_engine(engine))
    if memory is None:
        return None
    try:
        layout = gguf_cache_layout(source.path, source.label) if source.kind == "gguf" and source.path else \
            cache_layout(source.config)
        values = memory.settings_for({})
        cost = memory.cost(layout, ctx, values)
    except (Unsupported, PosencError):
        return None
    # the engine's first settings say what the defaults are (Ollama: one request at a time, an f16 cache)
    settings = ", ".join(f"{s.flag} {values[s.key]}" for s in memory.settings[:2])
    what = f"num_ctx {ctx}" if memory.engine == "ollama" else f"{ctx:,} tokens"
    return {"engine": memory.engine, "ctx": ctx, "bytes": cost.cache_bytes, "settings": dict(values),
            "line": f"{what}: its caches take {format_size(cost.cache_bytes)} ({settings}; posenc memory "
                    f"--engine {memory.engine} for others)"}


def add_ollama_memory(report: Any, source: str, revision: str | None = None) -> None:
    """``posenc check``'s Ollama row gives num_ctx with its memory: a note on that row (``report`` a
    :class:`~posenc_cli.frameworks.check.CheckReport`; its run's notes are printed under its run line and listed in
    its JSON ``warnings``)."""
    rows = [v for v in report.verdicts if v.run.engine == "ollama" and not v.run.refusal]
    if not rows or source == "-":  # stdin was read once, by the check
        return
    from posenc_cli.models.sources import read_source

    served = served_memory("ollama", read_source(source, revision=revision), report.max_model_len)
    if served is not None:
        for v in rows:
            v.run.warnings.append(served["line"])
