"""``--memory`` on other commands: whether a context fits each engine, as one short row per engine.

``posenc check --memory SIZE`` adds these rows beside the rope verdicts (a context that does not fit an engine is a
failed check for that engine, reported apart: "does not fit: needs X, has Y"); ``posenc pick --memory SIZE`` puts
them in the plan, with the first of the engine's levers that makes the context fit, or the longest that does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc_cli.memory.report import Budget, asked, memory_engine, report
from posenc_cli.units import format_size


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
