"""ExLlamaV3 1.6.5's cache classes run from the installed source on this CPU (torch's meta device).

Importing exllamav3 compiles its CUDA extension, so, as for its rope code (posenc_cli/engines/installed/exllamav3.py),
the files are run from their source: ``constants.py``, ``cache/cache.py`` (``CacheLayer``), ``cache/fp16.py``,
``cache/quant.py`` and ``cache/mla.py`` whole without their imports of the package (``ext``, the extension, is used
only when a cache is written or read, never while it is shaped or sized), and the ``SWALayerState`` and
``GDNLayerState`` classes of ``modules/sliding_attn.py`` and ``modules/gated_delta_net.py``. The attention modules a
cache layer is built for are stand-ins carrying the sizes an architecture gives them.
"""

from __future__ import annotations

import ast
import functools
import sys
import types
from importlib import metadata
from pathlib import Path
from typing import Any

#: (file, the top-level classes to take, or None for the whole file)
_SOURCES = (("constants.py", None), ("cache/cache.py", None), ("cache/fp16.py", None), ("cache/quant.py", None),
            ("cache/mla.py", None), ("modules/sliding_attn.py", ("SWALayerState",)),
            ("modules/gated_delta_net.py", ("GDNLayerState",)))


def root() -> Path:
    return Path(str(metadata.distribution("exllamav3").locate_file("exllamav3")))


def available() -> bool:
    try:
        return metadata.version("exllamav3") == "1.6.5" and all((root() / f).is_file() for f, _ in _SOURCES)
    except metadata.PackageNotFoundError:
        return False


def _package_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("exllamav3"))


@functools.cache
def namespace() -> dict[str, Any]:
    """The cache classes, compiled from the installed files into one namespace."""
    import numpy as np
    import torch

    module = types.ModuleType("_posenc_exllamav3_cache")
    sys.modules[module.__name__] = module
    ns: dict[str, Any] = module.__dict__
    ns.update(torch=torch, np=np, ext=None, Config=object, Attention=object, Model=object, Module=object)
    for relative, wanted in _SOURCES:
        path = root() / relative
        tree = ast.parse(path.read_text(encoding="utf-8"))
        body = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
        if wanted is None:
            body += [n for n in tree.body if not _package_import(n) and n not in body]
        else:
            body += [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
        exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)  # noqa: S102
    return ns


def attention(kv_heads: int, head_dim: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(num_kv_heads=kv_heads, head_dim=head_dim)


def mla_attention(kv_lora_rank: int, rope_dim: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope_dim)


def layer_bytes(kind: str, module: Any, max_num_tokens: int, bits: tuple[int, int] | None) -> int:
    """``storage_size()`` of the cache layer ExLlamaV3 builds for ``module``: an attention layer (``kind`` "kv") or an
    MLA layer ("mla"), float16 (``bits`` None) or quantized."""
    ns = namespace()
    if kind == "mla":
        cls = ns["CacheLayer_MLA_fp16"] if bits is None else ns["CacheLayer_MLA_quant"]
    else:
        cls = ns["CacheLayer_fp16"] if bits is None else ns["CacheLayer_quant"]
    extra = {} if bits is None else {"k_bits": bits[0], "v_bits": bits[1]}
    return int(cls(None, module, 0, max_num_tokens, **extra).storage_size())


def ring_bytes(kv_heads: int, head_dim: int, kv_state_size: int, slots: int) -> int:
    """``SWALayerState.storage_size()`` for a SlidingAttention with that ring."""
    module = types.SimpleNamespace(kv_state_size=kv_state_size, num_kv_heads=kv_heads, head_dim=head_dim)
    return int(namespace()["SWALayerState"](module, slots, 0, 0).storage_size())


def state_bytes(module: Any, slots: int, fp32: bool) -> int:
    """``GDNLayerState.storage_size()`` as ``Cache`` builds it (``set_state_dtype(half)`` unless fp32 or Mamba2)."""
    import torch

    state = namespace()["GDNLayerState"](module, slots, 0, 0)
    if not fp32 and not getattr(module, "mamba2", False):
        state.set_state_dtype(torch.half)
    return int(state.storage_size())


def arch_strings() -> dict[str, str]:
    """Architecture string -> file stem of every architecture of the installed exllamav3."""
    out = {}
    for path in sorted((root() / "architecture").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "arch_string" for t in node.targets)
                    and isinstance(node.value, ast.Constant)):
                out[str(node.value.value)] = path.stem
    return out


def constructs(stem: str, name: str) -> bool:
    """Whether ``architecture/<stem>.py`` calls ``name(...)`` anywhere."""
    tree = ast.parse((root() / "architecture" / f"{stem}.py").read_text(encoding="utf-8"))
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == name for n in ast.walk(tree))
