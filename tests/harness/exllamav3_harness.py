"""ExLlamaV3 1.6.5 for the engine tests: the pinned version, its own config reader and RoPE class run on a config.

exllamav3 goes in without its dependencies. Its package import compiles its CUDA extension (``exllamav3/ext.py``
needs CUDA_HOME) and its quantization modules need triton, so :mod:`posenc_cli.engines.installed.exllamav3` runs
the rope files from the installed source: ``util/file.py``, ``util/rope.py`` without its import of the extension
(used only to apply the rope, not to build it) and ``Config.read_rope_settings_default``.
"""

from __future__ import annotations

import ast
from importlib import metadata
from pathlib import Path
from typing import Any

from posenc_cli.engines.installed import exllamav3 as installed

EXLLAMAV3_VERSION = "1.6.5"
#: .ci/run installs these with --no-deps
PIP_NO_DEPS = (f"exllamav3=={EXLLAMAV3_VERSION}",)


def available() -> bool:
    return installed.version() == EXLLAMAV3_VERSION


def their_settings(cfg: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """The ``RopeSettings`` fields ExLlamaV3's own ``read_rope_settings_default(RopeStyle.NEOX)`` fills."""
    s = installed._settings(cfg, head_dim)
    fields = ("head_dim", "rope_theta", "rope_scaling", "rotary_dim", "partial_rotary_factor",
              "max_position_embeddings", "original_max_position_embeddings")
    return {f: getattr(s, f) for f in fields}


def their_rope(cfg: dict[str, Any], head_dim: int) -> Any:
    """ExLlamaV3's own ``RoPE`` for ``cfg`` on the CPU (``inv_freq``, ``attn_factor``, ``llama_4_scaling_beta``)."""
    return installed._rope(cfg, head_dim)


def rope_readers() -> dict[str, str]:
    """Per architecture string of the installed exllamav3: the source of the call its config class (or the class it
    derives from) makes to read the rope, or ``""`` when it makes none or several."""
    root = Path(str(metadata.distribution("exllamav3").locate_file("exllamav3/architecture")))
    classes: dict[str, tuple[str, list[str]]] = {}  # class -> (its rope call, its bases)
    arch_of: dict[str, str] = {}
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            calls = [ast.unparse(c) for c in ast.walk(node) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Attribute) and c.func.attr == "read_rope_settings_default"]
            classes[node.name] = (calls[0] if len(calls) == 1 else "", [ast.unparse(b) for b in node.bases])
            for item in node.body:
                if (isinstance(item, ast.Assign) and any(getattr(t, "id", "") == "arch_string" for t in item.targets)
                        and isinstance(item.value, ast.Constant)):
                    arch_of[str(item.value.value)] = node.name

    def reader(name: str) -> str:
        call, bases = classes.get(name, ("", []))
        if call or not bases:
            return call
        return reader(bases[0])

    return {arch: reader(name) for arch, name in arch_of.items()}
