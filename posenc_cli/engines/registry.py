"""The registry of engines and training frameworks: one module each, named here and loaded by name when needed.

Each module exports one :class:`Target` (``TARGET``): its name, the package and version its numbers are proven
against, ``render`` (the text ``posenc scale`` prints, and caveats), ``run`` (what it computes for a model, an
:class:`~posenc_cli.engines.runs.EngineRun`), what it cannot express and, for a trainer, how ``posenc audit`` reads
its settings back. ``posenc scale --format``, ``posenc check``, ``posenc pick --trainer``, ``posenc audit`` and the
docs' tables iterate over :data:`ENTRIES`.

An entry carries what start-up needs without loading a module: the name, the module and the ``--format`` names it
renders (listed only here, so that ``posenc scale`` loads the one module its ``--format`` names:
``tests/test_imports.py``). :func:`load` is the only place these modules are imported lazily, by name
(``importlib``): the trainers sit a stage above the engines, and the engines reach them only through here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    from posenc_cli.engines.runs import EngineRun
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.rope.scaling import ScaleRequest

ENGINE = "engine"
TRAINER = "trainer"


class Rendering(NamedTuple):  # a named tuple, not a dataclass: `posenc scale` builds the class at start-up
    """What ``posenc scale --format`` renders: the request, the format, the model's name (or GGUF path) for command
    lines, and with ``--config`` the model's config dict and facts (``gguf``: the model was given as its GGUF)."""

    req: ScaleRequest
    fmt: str
    model: str = "MODEL"
    config: dict[str, Any] | None = None
    facts: ModelFacts | None = None
    gguf: bool = False


#: ``(model, config, max_model_len, seq_len) -> EngineRun``: what the target computes serving (or training at)
#: ``max_model_len`` for a sequence of ``seq_len`` tokens (None: ``max_model_len``).
Runner = Callable[["ModelPositions", "dict[str, Any]", int, "int | None"], "EngineRun"]
Renderer = Callable[[Rendering], "tuple[str, list[str]]"]


@dataclass(frozen=True)
class Target:
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


class Entry(NamedTuple):  # as Rendering
    """What the registry knows of a target without loading its module."""

    name: str
    module: str
    formats: tuple[str, ...]
    kind: str = ENGINE


#: Report order: the engines (transformers first, the reference), then the trainers (the Megatron stack, the
#: PyTorch-native ones, the Hugging Face-based ones).
ENTRIES: tuple[Entry, ...] = (
    Entry("hf", "posenc_cli.engines.hf", ("hf", "hf-v5")),
    Entry("vllm", "posenc_cli.engines.vllm", ("vllm",)),
    Entry("sglang", "posenc_cli.engines.sglang", ("sglang",)),
    Entry("llama.cpp", "posenc_cli.engines.llamacpp", ("llama.cpp", "llama-cpp-python")),
    Entry("ollama", "posenc_cli.engines.ollama", ("ollama",)),
    Entry("lmstudio", "posenc_cli.engines.lmstudio", ("lmstudio",)),
    Entry("mlx-lm", "posenc_cli.engines.mlx_lm", ("mlx-lm",)),
    Entry("lmdeploy", "posenc_cli.engines.lmdeploy", ("lmdeploy",)),
    Entry("exllamav3", "posenc_cli.engines.exllamav3", ("exllamav3",)),
    Entry("megatron", "posenc_cli.trainers.megatron", ("megatron",), TRAINER),
    Entry("megatron-bridge", "posenc_cli.trainers.megatron_bridge", ("megatron-bridge",), TRAINER),
    Entry("torchtitan", "posenc_cli.trainers.torchtitan", ("torchtitan",), TRAINER),
    Entry("torchtune", "posenc_cli.trainers.torchtune", ("torchtune",), TRAINER),
    Entry("llamafactory", "posenc_cli.trainers.llamafactory", ("llamafactory",), TRAINER),
    Entry("axolotl", "posenc_cli.trainers.axolotl", ("axolotl",), TRAINER),
    Entry("unsloth", "posenc_cli.trainers.unsloth", ("unsloth",), TRAINER),
    Entry("trl", "posenc_cli.trainers.trl", ("trl",), TRAINER),
)


def entry(name: str) -> Entry:
    found = next((e for e in ENTRIES if e.name == name), None)
    if found is None:
        raise PosencError(f"{name!r} is neither an engine nor a trainer posenc knows; use one of: "
                          f"{', '.join(e.name for e in ENTRIES)}")
    return found


def entries(kind: str | None = None) -> tuple[Entry, ...]:
    return tuple(e for e in ENTRIES if kind is None or e.kind == kind)


def names(kind: str) -> tuple[str, ...]:
    """The engines' (or trainers') names, in report order."""
    return tuple(e.name for e in entries(kind))


def formats(kind: str | None = None) -> tuple[str, ...]:
    """Every ``--format`` name (of one kind), in report order."""
    return tuple(f for e in entries(kind) for f in e.formats)


def training_formats() -> tuple[str, ...]:
    """The formats a training run reads (``scale --seq-len``, ``pick --trainer`` stages): transformers' config keys
    (the config a stage's checkpoint carries) and every trainer's."""
    return (*entries(ENGINE)[0].formats, *formats(TRAINER))


def load(name: str) -> Target:
    """The target named ``name`` (an engine or a trainer), its module imported now."""
    target: Target = importlib.import_module(entry(name).module).TARGET
    return target


def format_owner(fmt: str) -> str:
    """The name of the target that renders ``--format fmt``."""
    owner = next((e for e in ENTRIES if fmt in e.formats), None)
    if owner is None:
        raise PosencError(f"--format {fmt!r} is not known; use one of: {', '.join(formats())}")
    return owner.name


def for_format(fmt: str) -> Target:
    """The target that renders ``--format fmt``."""
    return load(format_owner(fmt))


def targets(kind: str | None = None) -> list[Target]:
    """Every target (of one kind), loaded, in report order."""
    return [load(e.name) for e in entries(kind)]


def render(rendering: Rendering) -> tuple[str, list[str]]:
    """What ``posenc scale --format`` prints (stdout text, stderr caveats), from the target that owns the format."""
    return for_format(rendering.fmt).render(rendering)


# --- the docs' tables ---------------------------------------------------------------------------------------------

def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def docs_tables(kind: str) -> tuple[str, str]:
    """The two Markdown tables docs/engines.md (``kind`` engine) or docs/trainers.md (trainer) carry: each target
    with its version and formats, and what each cannot express."""
    loaded = [(load(e.name), ", ".join(f"`{f}`" for f in e.formats)) for e in entries(kind)]
    if kind == ENGINE:
        lines = ["| engine | version targeted | `scale --format` | proven against |", "|---|---|---|---|"]
        lines += [_row([t.title, t.targets.format(version=t.version), fmts, t.proven_by]) for t, fmts in loaded]
        head = ["| engine | differs from transformers, or refuses |", "|---|---|"]
    else:
        lines = ["| `--format` | framework (version targeted) | what posenc prints | proven by |", "|---|---|---|---|"]
        lines += [_row([fmts, t.targets.format(version=t.version), t.prints, t.proven_by]) for t, fmts in loaded]
        head = ["| framework | cannot express |", "|---|---|"]
    head += [_row([t.title, t.cannot_express]) for t, _ in loaded if t.cannot_express]
    return "\n".join(lines) + "\n", "\n".join(head) + "\n"
