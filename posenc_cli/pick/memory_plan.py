"""``posenc pick --memory SIZE``: whether the plan's target fits each engine on a device of SIZE, and how (the
first setting that makes it fit), or the longest context that does; from the model's own layers (``--config``)."""

from __future__ import annotations

from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.pick.picker import PickResult, inputs_config


def memory_answer(result: PickResult, size: int, engines: list[str] | None) -> dict[str, Any]:
    """The plan's memory section (:func:`posenc_cli.memory.checked.fit_rows` at the target)."""
    from posenc_cli.memory.checked import fit_rows

    if result.source is None:
        raise PosencError("{memory} sizes a model's caches layer by layer: give the model with --config (a new "
                          "model has no layers to size)", "memory")
    if result.source.kind == "stdin":
        raise PosencError("{memory} reads the model again: give the config as a file, not - (stdin)", "memory")
    return fit_rows(inputs_config(result.source), int(result.answer["inputs"]["ctx"]), engines, size, extended=True)
