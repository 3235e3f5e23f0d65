"""The registry of engines and training frameworks: one entry each, the one list every command and the docs iterate
over, and the one loader of their modules.

Each engine or trainer module exports one :class:`~posenc_cli.engines.target.Target` (``TARGET``): its name, the
package and version its numbers are proven against, ``render`` (the text ``posenc scale`` prints, and caveats),
``run`` (what it computes for a model, an :class:`~posenc_cli.engines.runs.EngineRun`), what it cannot express and,
for a trainer, how ``posenc audit`` reads its settings back. ``posenc scale --engine``, ``posenc check``,
``posenc pick --trainer``, ``posenc audit --framework`` and the docs' tables iterate over :data:`ENTRIES`.

An entry carries what start-up needs without loading a module: the name, the module and the ``--engine`` names it
renders (listed only here, so that ``posenc scale`` loads the one module its format names: ``tests/test_imports.py``),
and for ``posenc check --installed`` the module that runs the installed package and why a row may stay modelled.
:func:`_load` is the only place posenc modules are imported by name (``importlib``; ``tests/test_layout.py`` holds
it to that): this stage sits above both the engines and the trainers, so every edge it hides runs down.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.engines import hf
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    from posenc_cli.engines.caches.model import EngineMemory
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.rope.scaling import ScaleRequest

ENGINE = "engine"
TRAINER = "trainer"
#: why ``check --installed`` keeps a row modelled when its entry names no installed runner
NO_INSTALLED_RUN = "posenc has no installed run of it"


class Entry(NamedTuple):  # a named tuple, not a dataclass: `posenc scale` builds the class at start-up
    """What the registry knows of a target without loading its module.

    ``installed``: the module that runs the installed package with its own code (``version()`` and ``run()``, the
    modelled run's signature) for ``posenc check --installed``; None: posenc has none, and ``not_run`` says why the
    row stays modelled."""

    name: str
    module: str
    formats: tuple[str, ...]
    kind: str = ENGINE
    installed: str | None = None
    not_run: str = NO_INSTALLED_RUN
    memory: str | None = None  # the module of its memory model (``MEMORY``), under posenc_cli.engines.caches


_INSTALLED = "posenc_cli.engines.installed"
_CACHES = "posenc_cli.engines.caches"

#: Report order: the engines (transformers first, the reference), then the trainers (the Megatron stack, the
#: PyTorch-native ones, the Hugging Face-based ones).
ENTRIES: tuple[Entry, ...] = (
    Entry("hf", "posenc_cli.engines.hf", hf.FORMATS, installed=f"{_INSTALLED}.hf", memory=f"{_CACHES}.transformers"),
    Entry("vllm", "posenc_cli.engines.vllm", ("vllm",), installed=f"{_INSTALLED}.vllm", memory=f"{_CACHES}.vllm"),
    Entry("sglang", "posenc_cli.engines.sglang", ("sglang",),
          not_run="SGLang's rotary classes import triton (about 1 GB, absent from CPU installs)",
          memory=f"{_CACHES}.sglang"),
    Entry("llama.cpp", "posenc_cli.engines.llamacpp", ("llama.cpp", "llama-cpp-python"),
          not_run="llama.cpp runs a GGUF and exposes logits, not frequencies: its numbers stay modelled (proven on "
                  "converted GGUFs' logits)", memory=f"{_CACHES}.llamacpp"),
    Entry("ollama", "posenc_cli.engines.ollama", ("ollama",), memory=f"{_CACHES}.ollama"),
    Entry("lmstudio", "posenc_cli.engines.lmstudio", ("lmstudio",), memory=f"{_CACHES}.lmstudio"),
    Entry("mlx-lm", "posenc_cli.engines.mlx_lm", ("mlx-lm",), installed=f"{_INSTALLED}.mlx_lm",
          memory=f"{_CACHES}.mlx_lm"),
    Entry("lmdeploy", "posenc_cli.engines.lmdeploy", ("lmdeploy",), installed=f"{_INSTALLED}.lmdeploy",
          memory=f"{_CACHES}.lmdeploy"),
    Entry("exllamav3", "posenc_cli.engines.exllamav3", ("exllamav3",), installed=f"{_INSTALLED}.exllamav3",
          memory=f"{_CACHES}.exllamav3"),
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
    """Every ``--engine`` name (of one kind), in report order."""
    return tuple(f for e in entries(kind) for f in e.formats)


def training_formats() -> tuple[str, ...]:
    """The formats a training run reads (``scale --seq-len``, ``pick --trainer`` stages): transformers' config keys
    (the config a stage's checkpoint carries) and every trainer's."""
    return (*entries(ENGINE)[0].formats, *formats(TRAINER))


def _load(module: str) -> ModuleType:
    """The one import of a posenc module by name: an entry's target or installed runner."""
    return importlib.import_module(module)


def load(name: str) -> Target:
    """The target named ``name`` (an engine or a trainer), its module imported now."""
    target: Target = _load(entry(name).module).TARGET
    return target


def load_installed(name: str) -> ModuleType | None:
    """The module that runs ``name``'s installed package (its entry's ``installed``), or None when posenc has none.
    The module imports its package only when run: loading it needs nothing installed."""
    module = entry(name).installed
    return None if module is None else _load(module)


def load_memory(name: str) -> EngineMemory | None:
    """The memory model of engine ``name`` (its entry's ``memory`` module loaded now), or None when it has none."""
    module = entry(name).memory
    if module is None:
        return None
    memory: EngineMemory = _load(module).MEMORY
    return memory


def memory_engines() -> tuple[str, ...]:
    """The engines with a memory model, in report order."""
    return tuple(e.name for e in entries(ENGINE) if e.memory)


def format_owner(fmt: str) -> str:
    """The name of the target that renders ``--engine fmt``."""
    owner = next((e for e in ENTRIES if fmt in e.formats), None)
    if owner is None:
        raise PosencError(f"--engine {fmt!r} is not known; use one of: {', '.join(formats())}")
    return owner.name


def for_format(fmt: str) -> Target:
    """The target that renders ``--engine fmt``."""
    return load(format_owner(fmt))


def targets(kind: str | None = None) -> list[Target]:
    """Every target (of one kind), loaded, in report order."""
    return [load(e.name) for e in entries(kind)]


def render(rendering: Rendering) -> tuple[str, list[str]]:
    """What ``posenc scale --engine`` prints (stdout text, stderr caveats), from the target that owns the format."""
    return for_format(rendering.fmt).render(rendering)


def render_request(req: ScaleRequest, fmt: str, config: dict[str, Any] | None = None, facts: ModelFacts | None = None,
                   model: str = "MODEL", *, gguf: bool = False) -> tuple[str, list[str]]:
    """What ``posenc scale --engine fmt`` prints (stdout text, stderr caveats) for ``req``: on the model whose
    config dict and facts are given (``--config``), else for the bare request. ``posenc scale`` and
    ``posenc pick --trainer`` both render through here."""
    if config is not None and facts is not None:
        return render(Rendering(req, fmt, model, config, facts, gguf))
    return render(Rendering(req, fmt, model))


# --- the docs' tables ---------------------------------------------------------------------------------------------

def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def docs_tables(kind: str) -> tuple[str, str]:
    """The two Markdown tables docs/engines.md (``kind`` engine) or docs/trainers.md (trainer) carry: each target
    with its version and formats, and what each cannot express."""
    loaded = [(load(e.name), ", ".join(f"`{f}`" for f in e.formats)) for e in entries(kind)]
    if kind == ENGINE:
        lines = ["| engine | version targeted | `scale --engine` | proven against |", "|---|---|---|---|"]
        lines += [_row([t.title, t.targets.format(version=t.version), fmts, t.proven_by]) for t, fmts in loaded]
        head = ["| engine | differs from transformers, or refuses |", "|---|---|"]
    else:
        lines = ["| `--engine` | framework (version targeted) | what posenc prints | proven by |", "|---|---|---|---|"]
        lines += [_row([fmts, t.targets.format(version=t.version), t.prints, t.proven_by]) for t, fmts in loaded]
        head = ["| framework | cannot express |", "|---|---|"]
    head += [_row([t.title, t.cannot_express]) for t, _ in loaded if t.cannot_express]
    return "\n".join(lines) + "\n", "\n".join(head) + "\n"
