"""``posenc audit``'s workflow: which framework wrote a training-settings file (the registry's trainers, each read
back by its module's :class:`~posenc_cli.trainers.settings.Reader`, then a posenc plan and a model's config.json),
what it trained with, and the checkpoint compared with it (:func:`posenc_cli.trainers.audit.audit`).

A framework is named by its registry name (``llamafactory``); :data:`ALIASES` keeps the spellings ``posenc audit``
took before (``llama-factory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.frameworks import registry
from posenc_cli.frameworks.registry import TRAINER
from posenc_cli.models.sources import MODEL_KEYS, read_source
from posenc_cli.trainers.audit import HF_CONFIG, PLAN, PLAN_KEYS, Audit, audit, load_settings, read_hf_config, read_plan
from posenc_cli.trainers.settings import Reader, TrainedWith

#: ``--framework`` spellings accepted for a registry name (audit's own names before they were the registry's)
ALIASES = {"llama-factory": "llamafactory"}


def readers() -> list[Reader]:
    """How each framework's settings are read back, in the registry's order."""
    return [t.reads_back for t in registry.targets(TRAINER) if t.reads_back is not None]


def frameworks() -> list[str]:
    """Every ``--framework`` name."""
    return [r.framework for r in readers()] + [PLAN, HF_CONFIG]


def reader(framework: str) -> Reader | None:
    return next((r for r in readers() if r.framework == framework), None)


def base_model(path: str, framework: str | None) -> str | None:
    """The base model a settings file names (LLaMA-Factory's local ``model_name_or_path``), for a framework that
    scales from the base's own length; None otherwise."""
    scaling = [r for r in readers() if r.base_key is not None and framework in (None, r.framework)]
    if not scaling:
        return None
    fmt, data = load_settings(path)
    for r in scaling:
        local = data.get(r.base_key) if fmt == r.file_format and isinstance(data, dict) else None
        if isinstance(local, str) and Path(local).exists():
            return local
    return None


def takes_base(framework: str) -> bool:
    """Whether ``framework`` scales from a base model's config (``--base-model``)."""
    found = reader(framework)
    return found is not None and found.base_key is not None


def detect_framework(fmt: str, data: Any, path: str) -> str:
    """Which framework wrote a settings file (``--framework`` overrides this)."""
    if fmt == "json":
        # a plan is `posenc pick --json` output; a file with model keys and no plan key is a model's config.json
        model_config = not set(data) & PLAN_KEYS and any(k in data for k in MODEL_KEYS)
        return HF_CONFIG if model_config else PLAN
    candidates = [r for r in readers() if r.file_format == fmt]
    if len(candidates) == 1:
        return candidates[0].framework
    hits = [r for r in candidates if r.keys & set(data)]
    if len(hits) == 1:
        return hits[0].framework
    raise PosencError(f"{path}: cannot tell whether this YAML is {' or '.join(f'{r.title}s' for r in candidates)}; "
                      "pass {framework}", "framework")


def trained_rope(path: str, exported: Mapping[str, Any] | None, framework: str | None = None,
                 base: Mapping[str, Any] | None = None) -> TrainedWith:
    """The rope and window the settings file ``path`` trained with. ``exported``: the checkpoint's config (None:
    missing), read for what the settings leave to the model (theta, the original length); ``base``: the base
    model's config when known (a local LLaMA-Factory ``model_name_or_path``), which wins over ``exported``.
    ``framework``: a registry name (or one of :data:`ALIASES`), ``posenc-plan`` or ``hf-config``; None: detected."""
    fmt, data = load_settings(path)
    framework = ALIASES.get(framework, framework) if framework else detect_framework(fmt, data, path)
    if framework not in frameworks():
        raise PosencError(f"{{framework}} {framework!r} is not known; use one of: {', '.join(frameworks())}",
                          "framework")
    found = reader(framework)
    want = found.file_format if found is not None else "json"
    if fmt != want:
        raise PosencError(f"{path}: {framework} settings are a {want} file, not {fmt}")
    if found is not None:
        return found.read(data, path, exported, base)
    return read_plan(data, path) if framework == PLAN else read_hf_config(data, path)


def audit_checkpoint(checkpoint: str, trained_with: str, framework: str | None = None, base: str | None = None,
                     to: str | None = None, *, writing: bool = False) -> Audit:
    """``posenc audit``: the checkpoint (a folder, its config.json, or any source posenc reads) against the settings
    file ``trained_with``. ``base``: the base model's config (any source) for a framework that scales from it (None:
    the settings' own local base, else the checkpoint's config); ``to``: the form of the right config (``v4``,
    ``v5``; None: the checkpoint's own); ``writing``: the right config is to be written, which needs a config.json
    to correct."""
    if to is not None and to not in ("v4", "v5"):
        raise PosencError(f"{{to}} {to!r} is not known; use v4 or v5", "to")
    if not Path(trained_with).exists():
        raise PosencError(f"{{trained_with}} {trained_with}: no such file", "trained_with")
    exported, label = _read_checkpoint(checkpoint)
    local = base if base is not None else base_model(trained_with, ALIASES.get(framework or "", framework))
    trained = trained_rope(trained_with, exported, framework, read_source(local).config if local else None)
    if base is not None and not takes_base(trained.framework):
        raise PosencError(f"{{base_model}} is for LLaMA-Factory settings; {trained_with} is {trained.framework}'s, "
                          "which name their rope themselves", "base_model")
    found = reader(trained.framework)
    result = audit(label, exported, trained, to, setattr_dict=found is not None and found.setattr_dict)
    if writing and result.findings and result.fixed is None:
        raise PosencError(f"{{write}}: there is no config.json in {label} to correct; merge the rope keys printed "
                          "without {write} into the model's config", "write")
    return result


def _read_checkpoint(checkpoint: str) -> tuple[dict[str, Any] | None, str]:
    """(the exported config, its label); None for a checkpoint folder without config.json."""
    path = Path(checkpoint)
    if path.is_dir() and not (path / "config.json").exists():
        if not any(path.iterdir()):
            raise PosencError(f"{checkpoint} is an empty folder, not a checkpoint")
        return None, str(path)
    src = read_source(checkpoint)
    if src.gguf is not None:
        raise PosencError(f"{src.label} is a GGUF file; audit reads the transformers config.json an export writes")
    return src.config, src.label
