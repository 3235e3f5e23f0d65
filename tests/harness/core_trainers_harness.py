"""The training frameworks' own RoPE code, loaded on CPU without their GPU-minded package imports.

Pinned versions (``.ci/run`` installs them with ``--no-deps``): megatron-core 0.19.2 (it ships Megatron-LM's
``megatron/training``), torchtitan 0.3.0 (+ spmd_types 0.2.3, tyro), torchtune 0.6.1. Nothing here computes RoPE:
each loader returns the framework's classes; the only glue is how a framework turns its settings into those classes'
arguments, quoted from its code (file:line in the docstrings).

* Megatron-Core: ``megatron/core/__init__.py`` imports triton, so ``megatron`` and ``megatron.core`` are registered as
  bare packages and only the rotary modules are imported (torch only). ``YarnRotaryEmbedding`` builds its cos/sin
  cache on ``torch.cuda.current_device()`` in ``__init__``: the caller patches that to ``"cpu"``.
* Megatron-LM's parser: ``megatron.training.arguments`` needs the whole of megatron.core, so the ``add_argument`` calls
  of the flags posenc prints are taken from that file's syntax tree and run on a fresh ``argparse`` parser (Megatron's
  own types and defaults); ``_apply_yarn_config_from_args`` is taken the same way from ``argument_utils.py``.
* torchtitan: ``torchtitan.models.common.__init__`` reaches triton through its MoE code; ``torchtitan.models`` and
  ``.common`` are registered bare and ``rope`` imported.
* torchtune: ``import torchtune`` needs torchao; the position-embedding files import ``math`` and ``torch`` only and
  load by path.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import sys
import types
import warnings
from pathlib import Path
from typing import Any

#: megatron-bridge: only its HF->provider mapping constants are read, from source (the package needs TE)
VERSIONS = {"megatron-core": "0.19.2", "megatron-bridge": "0.6.2", "torchtitan": "0.3.0", "torchtune": "0.6.1"}
BRIDGE_VERSION = VERSIONS["megatron-bridge"]
#: pip arguments for CI: each package without its dependencies (they would pull CUDA torch, triton, TE), plus the
#: pure-Python packages torchtitan's rope import needs
PIP_NO_DEPS = [*(f"{name}=={version}" for name, version in VERSIONS.items()), "spmd_types==0.2.3"]
PIP_DEPS = ["tyro==1.0.17"]


def installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _root(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bare(name: str, path: Path) -> None:
    if name not in sys.modules:
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module


def megatron_root() -> Path | None:
    """``site-packages/megatron`` when megatron-core is installed (its ``core`` and ``training`` folders)."""
    if installed("megatron-core") is None:
        return None
    if "megatron" in sys.modules and getattr(sys.modules["megatron"], "__path__", None):
        return Path(next(iter(sys.modules["megatron"].__path__)))
    for entry in sys.path:
        candidate = Path(entry) / "megatron" / "core"
        if candidate.is_dir():
            return candidate.parent
    return None


def megatron_rope() -> tuple[Any, Any]:
    """(``rotary_pos_embedding`` module, ``yarn_rotary_pos_embedding`` module) of megatron-core."""
    root = megatron_root()
    assert root is not None
    _bare("megatron", root)
    _bare("megatron.core", root / "core")
    with warnings.catch_warnings():  # the packages' import-time deprecation warnings (torch.jit in torch.compile)
        warnings.simplefilter("ignore")
        import megatron.core.models.common.embeddings.rotary_pos_embedding as rotary
        import megatron.core.models.common.embeddings.yarn_rotary_pos_embedding as yarn

    return rotary, yarn


#: the flags posenc's megatron format prints (their definitions are read from Megatron-LM's arguments.py)
MEGATRON_FLAGS = (
    "--position-embedding-type", "--rotary-base", "--rotary-percent", "--rotary-seq-len-interpolation-factor",
    "--use-rope-scaling", "--rope-scaling-factor", "--rotary-scaling-factor", "--mscale", "--mscale-all-dim",
    "--yarn-original-max-position-embeddings", "--yarn-beta-fast", "--yarn-beta-slow",
    "--yarn-correction-range-round-to-int", "--no-yarn-correction-range-round-to-int", "--max-position-embeddings",
    "--rope-type", "--qk-pos-emb-head-dim", "--no-rope-fusion",
    "--seq-length",  # a pick stage's training length
)
#: flags Megatron-LM generates from TransformerConfig fields (ArgumentGroupFactory, arguments.py L2290)
MEGATRON_FACTORY_FLAGS = ("multi_latent_attention",)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def megatron_parser() -> argparse.ArgumentParser:
    """A parser with Megatron-LM's own definitions (type, default, action) of :data:`MEGATRON_FLAGS`."""
    root = megatron_root()
    assert root is not None
    parser = argparse.ArgumentParser(exit_on_error=False)
    found = set()
    for node in ast.walk(_tree(root / "training" / "arguments.py")):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in MEGATRON_FLAGS):
            call = ast.Call(func=ast.Name("add", ast.Load()), args=node.args, keywords=node.keywords)
            code = compile(ast.fix_missing_locations(ast.Expression(call)), "arguments.py", "eval")
            eval(code, {"add": parser.add_argument})  # noqa: S307 - Megatron's own add_argument call
            found.add(node.args[0].value)
    assert found == set(MEGATRON_FLAGS), set(MEGATRON_FLAGS) - found
    _factory_flags(parser)
    return parser


def megatron_config_module() -> Any:
    """megatron-core's ``transformer/transformer_config.py`` (TransformerConfig, MLATransformerConfig): it imports
    on CPU once ``megatron.core.transformer`` is a bare package (its ``__init__`` builds the GPU modules)."""
    root = megatron_root()
    assert root is not None
    megatron_rope()
    _bare("megatron.core.transformer", root / "core" / "transformer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import megatron.core.transformer.transformer_config as config

    return config


def _factory_flags(parser: argparse.ArgumentParser) -> None:
    """Megatron-LM's own ``ArgumentGroupFactory`` (argument_utils.py, run unchanged) over TransformerConfig, keeping
    only :data:`MEGATRON_FACTORY_FLAGS` (arguments.py excludes the fields it cannot type; these are plain bools)."""
    import builtins
    import dataclasses
    import enum
    import inspect
    import itertools
    import typing

    config = megatron_config_module()
    root = megatron_root()
    assert root is not None
    tree = _tree(root / "training" / "argument_utils.py")
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and n.name in ("TypeInferenceError", "ArgumentGroupFactory")]
    scope: dict[str, Any] = {
        "ast": ast, "builtins": builtins, "dataclasses": dataclasses, "enum": enum, "inspect": inspect,
        "itertools": itertools, "types": types, "typing": typing, "warnings": warnings,
        "ArgumentParser": argparse.ArgumentParser, "Namespace": argparse.Namespace,
        "_ArgumentGroup": argparse._ArgumentGroup, "Field": dataclasses.Field, "fields": dataclasses.fields,
        "Any": Any, "Callable": typing.Callable, "Optional": typing.Optional}
    exec(compile(ast.Module(body=classes, type_ignores=[]), "argument_utils.py", "exec"), scope)  # noqa: S102
    exclude = [f.name for f in dataclasses.fields(config.TransformerConfig) if f.name not in MEGATRON_FACTORY_FLAGS]
    scope["ArgumentGroupFactory"](config.TransformerConfig, exclude=exclude).build_group(parser, "transformer")


def megatron_function(name: str, file: str = "argument_utils.py") -> ast.FunctionDef:
    """A top-level function of ``megatron/training/FILE`` as a syntax tree."""
    root = megatron_root()
    assert root is not None
    for node in _tree(root / "training" / file).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not in {file}")


def apply_yarn_config(config: Any, args: argparse.Namespace) -> None:
    """Megatron-LM's ``_apply_yarn_config_from_args`` (argument_utils.py L384-413), run unchanged."""
    module = ast.Module(body=[megatron_function("_apply_yarn_config_from_args")], type_ignores=[])
    scope: dict[str, Any] = {}
    exec(compile(module, "argument_utils.py", "exec"), scope)  # noqa: S102 - Megatron's own function
    scope["_apply_yarn_config_from_args"](config, args)


def titan_root() -> Path:
    root = _root("torchtitan")
    assert root is not None
    return root


def titan_rope() -> Any:
    """torchtitan's ``models/common/rope.py`` module."""
    root = _root("torchtitan")
    assert root is not None
    _bare("torchtitan.models", root / "models")
    _bare("torchtitan.models.common", root / "models" / "common")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torchtitan.models.common.rope as rope

    return rope


def tune_module(relative: str) -> Any:
    """A torchtune source file (``models/llama3_1/_position_embeddings.py``) loaded by path."""
    root = _root("torchtune")
    assert root is not None
    name = "torchtune_file_" + relative.replace("/", "_").removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, root / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def bridge_constant(name: str) -> Any:
    """A literal class attribute of Megatron-Bridge's ``MegatronModelBridge`` (model_bridge.py), read from source:
    the package imports transformer_engine, so it is not imported."""
    root = megatron_root()
    assert root is not None and installed("megatron-bridge") == BRIDGE_VERSION
    tree = _tree(root / "bridge" / "models" / "conversion" / "model_bridge.py")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in model_bridge.py")
