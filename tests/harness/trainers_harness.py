"""The HF-based trainers' own config handling, run on CPU (tests/trainers/test_hf.py):

* LLaMA-Factory 0.9.5: the real ``llamafactory.model.model_utils.rope.configure_rope``, imported as a module of the
  installed package behind shim parent packages (the package's ``__init__`` pulls the training stack), with
  ``peft``/``accelerate`` installed without dependencies for ``extras.constants``. Under transformers 4.57.6 (the
  4.x its range allows; it fails under 5.x) it runs in a subprocess with ``POSENC_TRANSFORMERS4`` (a
  ``pip install --target`` directory holding transformers 4.57.6, huggingface_hub 0.36.0, tokenizers 0.22.1) first
  on ``sys.path``.
* axolotl 0.21.0: the real ``axolotl.loaders.utils.load_model_config`` (imports on Python 3.11 with ``addict``;
  the package asks for 3.12 and is installed with ``--ignore-requires-python --no-deps``).
* TRL 1.16.0: ``trl.trainer.utils.create_model_from_path`` as shipped, its source taken from the installed file and
  run with the names it uses (importing ``trl.trainer.utils`` needs pandas and datasets).
* Unsloth 2026.10.9: ``_rope_scaling_as_dict``, ``_get_rope_theta`` and ``_user_rope_scaling`` as shipped from
  ``unsloth/models/llama.py``, and the rope types ``FastLanguageModel.from_pretrained`` accepts read from its code
  (importing unsloth needs a GPU or a zoo CPU backend).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

VERSIONS = {"llamafactory": "0.9.5", "axolotl": "0.21.0", "unsloth": "2026.10.9", "trl": "1.16.0",
            "transformers4": "4.57.6"}
#: what CI installs: (pip arguments, installed with --no-deps)
CI_NO_DEPS = ("llamafactory==0.9.5", "peft==0.18.1", "accelerate==1.11.0", "trl==1.16.0", "unsloth==2026.10.9",
              "axolotl==0.21.0")
CI_DEPS = ("addict==2.4.0",)
TRANSFORMERS4 = ("transformers==4.57.6", "huggingface_hub==0.36.0", "tokenizers==0.22.1")


def installed(name: str) -> str | None:
    """The installed version of distribution ``name`` when it is the pinned one, else None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        got = version(name)
    except PackageNotFoundError:
        return None
    return got if got == VERSIONS[name] else None


def _site_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0]) / relative


# --- transformers' numbers for a config object (whatever transformers is imported) ------------------------------

def rotary(config: Any, seq_len: int | None = None, module: Any = None) -> tuple[list[float], float]:
    """inv_freq and attention scaling the model class computes at ``seq_len``: its rotary module at init, or for
    the types that change with the length (dynamic, longrope) transformers' rope function at ``seq_len``. The rotary
    class is the one defined in ``module`` (default: the config class's modeling module)."""
    if module is None:
        module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    classes = [getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding")
               and isinstance(getattr(module, n), type)]
    cls = next(c for c in classes if c.__module__ == module.__name__)
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if seq_len is None or scaling.get("rope_type", scaling.get("type")) not in ("dynamic", "longrope"):
        emb = cls(config)
        return [float(x) for x in emb.inv_freq], float(emb.attention_scaling)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv, att = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu", seq_len=seq_len)
    return [float(x) for x in inv], float(att)


# --- LLaMA-Factory ------------------------------------------------------------------------------------------------

LF_SCRIPT = r"""
import importlib.util, json, sys, types, warnings
warnings.simplefilter("ignore")
import transformers
transformers.logging.set_verbosity_error()
root = sys.argv[1]
for name, path in [("llamafactory", root), ("llamafactory.model", root + "/model"),
                   ("llamafactory.model.model_utils", root + "/model/model_utils")]:
    m = types.ModuleType(name); m.__path__ = [path]; sys.modules[name] = m
from llamafactory.model.model_utils.rope import configure_rope
from llamafactory.extras.constants import RopeScaling
sys.path.insert(0, sys.argv[2])
from trainers_harness import rotary
out = []
for case in json.load(sys.stdin):
    args = types.SimpleNamespace(rope_scaling=RopeScaling(case["rope_scaling"]), model_max_length=case["cutoff_len"])
    try:
        config = transformers.AutoConfig.for_model(**case["config"])
        before = json.dumps(config.to_dict(), sort_keys=True, default=str)
        text = config.get_text_config()
        text_before = json.dumps(text.to_dict(), sort_keys=True, default=str)
        configure_rope(config, args)
        changed = json.dumps(config.to_dict(), sort_keys=True, default=str) != before
        if not case.get("rotary", True):  # what configure_rope left on the config the text model is built from
            out.append({"changed": json.dumps(text.to_dict(), sort_keys=True, default=str) != text_before,
                        "rope_scaling": getattr(text, "rope_scaling", None),
                        "max_position_embeddings": getattr(text, "max_position_embeddings", None),
                        "rope_theta": getattr(text, "rope_theta", None), "transformers": transformers.__version__})
            continue
        if not changed:
            out.append({"error": "unchanged"})
            continue
        inv, att = rotary(config, case.get("seq_len"))
        out.append({"rope_scaling": config.rope_scaling, "max_position_embeddings": config.max_position_embeddings,
                    "inv_freq": inv, "attention": att, "transformers": transformers.__version__})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
"""


def llamafactory_root() -> Path:
    spec = importlib.util.find_spec("llamafactory")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0])


def run_llamafactory(cases: list[dict[str, Any]], transformers_path: str | None) -> list[dict[str, Any]]:
    """LLaMA-Factory's configure_rope on each case (config dict, rope_scaling, cutoff_len, optional seq_len) and
    the frequencies the model class computes from the result, under transformers 4.57.6 (``transformers_path``)
    or the installed transformers (None). A case with ``"rotary": false`` gets only what configure_rope (which
    LLaMA-Factory calls on the top-level config) left on the config the text model is built from
    (``get_text_config()``: ``changed``, ``rope_scaling``, ``max_position_embeddings``, ``rope_theta``); an error,
    in ``error``."""
    env = dict(os.environ)
    if transformers_path:
        env["PYTHONPATH"] = os.pathsep.join([transformers_path, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", LF_SCRIPT, str(llamafactory_root()),
                           str(Path(__file__).resolve().parent)],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- axolotl ------------------------------------------------------------------------------------------------------

def axolotl_config(model_dir: str, model_config: dict[str, Any]) -> Any:
    """axolotl's ``load_model_config`` for ``base_model: model_dir`` and the YAML's ``model_config`` (which
    axolotl's schema renames to ``overrides_of_model_config``, utils/schemas/deprecated.py)."""
    from axolotl.loaders.utils import load_model_config
    from axolotl.utils.dict import DictDefault

    return load_model_config(DictDefault({"base_model": model_dir, "overrides_of_model_config": model_config}))


# --- shipped functions run from their source --------------------------------------------------------------------

def shipped_functions(path: Path, names: tuple[str, ...], env: dict[str, Any]) -> dict[str, Any]:
    """Top-level functions ``names`` of the file at ``path``, as written there, executed with globals ``env``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names}
    assert set(found) == set(names), set(names) - set(found)
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    scope = dict(env)
    exec(compile(module, str(path), "exec"), scope)  # noqa: S102 - the installed package's own code
    return {n: scope[n] for n in names}


def trl_create_model_from_path() -> Any:
    import torch
    import transformers
    from accelerate import PartialState
    from packaging.version import Version

    env = {"torch": torch, "transformers": transformers, "AutoConfig": transformers.AutoConfig,
           "AutoModelForCausalLM": transformers.AutoModelForCausalLM,
           "AutoModelForImageTextToText": transformers.AutoModelForImageTextToText, "PartialState": PartialState,
           "Version": Version, "_BaseAutoModelClass": object, "PreTrainedModel": transformers.PreTrainedModel}
    return shipped_functions(_site_file("trl", "trainer/utils.py"), ("create_model_from_path",),
                             env)["create_model_from_path"]


def unsloth_functions() -> tuple[Any, tuple[str, ...]]:
    """Unsloth's ``_user_rope_scaling`` (with the two helpers it calls) and the rope types
    ``FastLanguageModel.from_pretrained`` keeps a caller's ``rope_scaling`` for."""
    path = _site_file("unsloth", "models/llama.py")
    fns = shipped_functions(path, ("_get_rope_theta", "_rope_scaling_as_dict", "_user_rope_scaling"), {})
    fns["_user_rope_scaling"].__globals__.update(fns)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    accepted: tuple[str, ...] = ()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "_rope_type"
                and isinstance(node.ops[0], ast.NotIn) and isinstance(node.comparators[0], ast.Tuple)):
            accepted = tuple(ast.literal_eval(node.comparators[0]))
    assert accepted, "FastLanguageModel.from_pretrained's rope type check not found"
    return fns["_user_rope_scaling"], accepted


def shim(name: str, path: Path) -> None:
    m = types.ModuleType(name)
    m.__path__ = [str(path)]
    sys.modules[name] = m
