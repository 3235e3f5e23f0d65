"""The record each engine and training-framework module exports (``TARGET``): a :class:`Target`, with the
:class:`Rendering` its ``render`` takes and the :data:`Runner` signature of its ``run``.

These types sit in the engines stage so that engine and trainer modules can build their record without reaching up;
the list of records and their loader are :mod:`posenc_cli.frameworks.registry`, a stage above both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from posenc_cli.engines.runs import EngineRun
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.rope.scaling import ScaleRequest


class Rendering(NamedTuple):  # a named tuple, not a dataclass: `posenc scale` builds the class at start-up
    """What ``posenc scale --engine`` renders: the request, the format, the model's name (or GGUF path) for command
    lines, and with ``--config`` the model's config dict and facts (``gguf``: the model was given as its GGUF;
    ``named``: ``model`` is the name the user gave, ``--model``, not one posenc derived from the source)."""

    req: ScaleRequest
    fmt: str
    model: str = "MODEL"
    config: dict[str, Any] | None = None
    facts: ModelFacts | None = None
    gguf: bool = False
    named: bool = False


#: ``(model, config, max_model_len, seq_len) -> EngineRun``: what the target computes serving (or training at)
#: ``max_model_len`` for a sequence of ``seq_len`` tokens (None: ``max_model_len``).
Runner = Callable[["ModelPositions", "dict[str, Any]", int, "int | None"], "EngineRun"]
Renderer = Callable[[Rendering], "tuple[str, list[str]]"]
#: ``(rendering, run) -> text``: the model as it is (its rope unchanged) served as ``run`` serves it, at
#: ``run.max_model_len``: what ``posenc scale --engine`` prints for a target inside the model's window
Server = Callable[[Rendering, "EngineRun"], str]


class Target(NamedTuple):  # not a frozen dataclass: every command that renders defines it at start-up
    """One engine or training framework, as its module exports it (``TARGET``).

    ``version``: the version its numbers are proven against, as reports print it; ``targets``: the docs' "version
    targeted" cell (``{version}`` filled in); ``proven_by``: what the tests run it against; ``prints``: what its
    rendering is (trainers); ``cannot_express``: where it differs from transformers or refuses (docs' table);
    ``reads_back``: how ``posenc audit`` reads its settings (None: audit does not read this framework's files)."""

    name: str
    title: str
    package: str
    version: str
    render: Renderer
    run: Runner
    cannot_express: str = ""
    targets: str = "{version}"
    proven_by: str = ""
    prints: str = ""
    reads_back: Any = None  # a posenc_cli.trainers.settings.Reader (a stage above: not typed here)
    serve: Server | None = None
    prints_config: bool = False
