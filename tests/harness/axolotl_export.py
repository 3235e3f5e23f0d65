"""Write the config.json axolotl 0.21 saves, with axolotl's own code on CPU: ``load_model_config`` (the
``model_config`` setattr loop, loaders/utils.py, through tests/harness/trainers_harness.py) and ``ModelLoader.
_adjust_model_config`` (loaders/model.py: max_position_embeddings raised to sequence_len once the model is built),
then transformers' ``save_pretrained`` of that live config (what axolotl's save writes).

``loaders.model`` imports bitsandbytes and the GPU stack, so ``_adjust_model_config`` is taken from the installed
file's syntax tree and run unchanged on a stand-in loader holding the config (its model), the YAML (its cfg) and a
tokenizer with the config's own bos/eos ids (the method's other two branches then change nothing).
"""

from __future__ import annotations

import ast
import json
import logging
import types
from pathlib import Path
from typing import Any


def adjust_model_config() -> Any:
    import axolotl.loaders

    path = Path(axolotl.loaders.__file__).parent / "model.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loader = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelLoader")
    method = next(n for n in loader.body if isinstance(n, ast.FunctionDef) and n.name == "_adjust_model_config")
    scope: dict[str, Any] = {"LOG": logging.getLogger("axolotl")}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return scope["_adjust_model_config"]


def export(base: dict[str, Any], yaml: dict[str, Any], out: Path) -> Path:
    """The config axolotl saves after training ``base`` (a config.json dict) with ``yaml`` (its settings)."""
    import trainers_harness as th
    from axolotl.utils.dict import DictDefault

    source = out / "base"
    source.mkdir(parents=True)
    (source / "config.json").write_text(json.dumps(base))
    config = th.axolotl_config(str(source), yaml.get("model_config", {}))
    loader = types.SimpleNamespace(model=types.SimpleNamespace(config=config), cfg=DictDefault(yaml),
                                   tokenizer=types.SimpleNamespace(bos_token_id=config.bos_token_id,
                                                                   eos_token_id=config.eos_token_id))
    adjust_model_config()(loader)
    folder = out / "export"
    config.save_pretrained(folder)
    return folder
