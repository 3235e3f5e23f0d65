"""ExLlamaV3 as the user's installed exllamav3 computes it: its config reader and its ``RoPE`` class, run.

ExLlamaV3's frequencies are torch code in ``exllamav3/util/rope.py``; only applying them runs in its CUDA extension.
Importing the package compiles or loads that extension (``exllamav3/ext.py``: CUDA_HOME, nvcc) and its quantization
modules need triton, so the files are run from their source instead: ``util/file.py`` whole (stdlib only),
``util/rope.py`` without its one relative import (``from ..ext import exllamav3_ext as ext``; ``ext`` is used only by
``RoPE.apply``, never while the frequencies are built), and ``Config.read_rope_settings_default`` of
``model/config.py`` called on the raw config.json. :func:`version` is None when the distribution or those files are
missing.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import exllamav3 as model_of
from posenc_cli.engines.runs import WILL_NOT_START, EngineRun, GroupRun

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

_FILES = ("exllamav3/util/file.py", "exllamav3/util/rope.py", "exllamav3/model/config.py")


def _file(relative: str) -> Path | None:
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution("exllamav3").locate_file(relative)))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def version() -> str | None:
    """The installed exllamav3's version; None when it is not installed or its rope files are missing."""
    from importlib import metadata

    try:
        found = metadata.version("exllamav3")
    except metadata.PackageNotFoundError:
        return None
    return found if all(_file(f) is not None for f in _FILES) else None


def _source(relative: str) -> tuple[Path, ast.Module]:
    path = _file(relative)
    if path is None:
        raise FileNotFoundError(relative)
    return path, ast.parse(path.read_text(encoding="utf-8"))


def _namespace() -> dict[str, Any]:
    """``util/file.py`` and ``util/rope.py`` (its relative import left out) run into one namespace, and
    ``read_rope_settings_default`` compiled as a plain function there."""
    import sys
    import types

    # a module object of posenc's own name: RopeSettings is a dataclass, which looks its module up in sys.modules
    module = types.ModuleType("_posenc_exllamav3_rope")
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["ext"] = None
    for relative in _FILES[:2]:
        path, tree = _source(relative)
        body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.level > 0)]
        exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    path, tree = _source(_FILES[2])
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    method = next(n for n in config.body if isinstance(n, ast.FunctionDef) and n.name == "read_rope_settings_default")
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _settings(cfg: dict[str, Any], head_dim: int) -> Any:
    """The installed reader's ``RopeSettings`` for the raw config ``cfg`` (``RopeStyle.NEOX``, the architecture's
    head dim)."""
    ns = _namespace()
    reader = SimpleNamespace(config_dict=cfg, head_dim=head_dim)
    return ns["read_rope_settings_default"](reader, ns["RopeStyle"].NEOX)


def _rope(cfg: dict[str, Any], head_dim: int) -> Any:
    """The installed ``RoPE`` built on the CPU for ``cfg`` (``.inv_freq``, ``.attn_factor``)."""
    ns = _namespace()
    return ns["RoPE"]("cpu", _settings(cfg, head_dim))


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the installed ExLlamaV3 computes with a cache of ``max_model_len`` tokens, by its own code."""
    from posenc_cli.models.record import rope_groups

    installed = version() or "unknown"
    argv = model_of.invocation("MODEL", max_model_len)
    why = model_of.refusal(cfg)
    head_dim = model_of.head_dim_of(cfg)
    if why is None and head_dim is None:
        why = f"{WILL_NOT_START}: ExLlamaV3 reads head_dim, or hidden_size and num_attention_heads, which are missing"
    if why is not None or head_dim is None:
        return EngineRun(model_of.NAME, installed, max_model_len, [], argv, refusal=why)
    try:
        rope = _rope(cfg, head_dim)
    except ValueError as exc:
        return EngineRun(model_of.NAME, installed, max_model_len, [], argv,
                         refusal=f"{WILL_NOT_START}: ExLlamaV3 raises {exc}")
    inv = rope.inv_freq.float().numpy()
    groups = [GroupRun(g.name, inv, float(rope.attn_factor), model.softmax_scale) for g in rope_groups(model)]
    return EngineRun(model_of.NAME, installed, max_model_len, groups, argv, accepts=max_model_len)
