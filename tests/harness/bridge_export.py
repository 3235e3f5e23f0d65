"""Write the config.json Megatron-Bridge's default export (``AutoBridge.from_auto_config``, PR #2778) builds under
transformers 5, with Megatron-Bridge's own functions.

``from_auto_config`` (``models/conversion/auto_bridge.py`` L413-478 @ 067f987df) does::

    hf_cfg = AutoConfig.from_pretrained(hf_model_id)                         # the reference (source) config
    d = bridge._model_bridge.megatron_to_hf_config(megatron_cfg)               # the trained provider, as HF keys
    d = conform_config_to_reference(d, hf_cfg.to_dict())                       # conversion/utils.py L367-385
    d = _drop_readonly_config_properties(d, type(hf_cfg))                      # auto_bridge.py L277-289
    synthesized_config = type(hf_cfg)(**d)                                     # saved by save_hf_pretrained

The two functions are read from a Megatron-Bridge checkout (``git show`` of the commit below; their source is not
copied here) and run unchanged: the package itself needs transformer_engine (reference section 2.5).
``megatron_to_hf_config`` is a classmethod over the provider; its output for a YaRN run is written out from its
mappings (``model_bridge.py`` CONFIG_MAPPING: ``max_position_embeddings <- seq_length``, ``rope_theta <-
rotary_base``; YARN_ROPE_SCALING_MAPPING; ``truncate <- yarn_correction_range_round_to_int``).

The run: a Qwen2 model (theta 1e6, 32k) trained with YaRN x4 from 32k at seq_length 131072 with rotary_base raised
to 5e6, the YaRN defaults (beta 32/1, mscale 1, mscale_all_dim 0, round to int).
``python tests/harness/bridge_export.py GIT_DIR OUT``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
REFERENCE: dict[str, Any] = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                             "num_hidden_layers": 2, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                             "rope_theta": 1000000.0, "vocab_size": 152064}
#: megatron_to_hf_config's dict for the run (the keys its mappings write)
TRAINED: dict[str, Any] = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 2,
    "num_key_value_heads": 4, "max_position_embeddings": 131072, "rope_theta": 5000000.0, "vocab_size": 152064,
    "partial_rotary_factor": 1.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 32.0,
                     "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0, "truncate": True},
    "hidden_act": "silu", "torch_dtype": "bfloat16", "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
}


def bridge_function(git_dir: str, path: str, name: str) -> Any:
    source = subprocess.run(["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], capture_output=True,
                            text=True, check=True).stdout
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    module = ast.Module(body=[node], type_ignores=[])
    from transformers import PretrainedConfig

    # the functions' annotations name typing.Type; the builtin subscripts the same at definition time
    scope: dict[str, Any] = {"Type": type, "PretrainedConfig": PretrainedConfig}
    exec(compile(module, f"{path}:{name}", "exec"), scope)
    return scope[name]


def export(git_dir: str, out: Path) -> Path:
    import transformers
    from transformers import Qwen2Config

    conform = bridge_function(git_dir, "src/megatron/bridge/models/conversion/utils.py", "conform_config_to_reference")
    drop = bridge_function(git_dir, "src/megatron/bridge/models/conversion/auto_bridge.py",
                           "_drop_readonly_config_properties")
    hf_cfg = Qwen2Config(**REFERENCE)
    d = drop(conform(dict(TRAINED), hf_cfg.to_dict()), type(hf_cfg))
    synthesized = type(hf_cfg)(**d)
    folder = out / "bridge-auto-config-v5"
    synthesized.save_pretrained(folder)
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("transformers_version", None)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    print(f"transformers {transformers.__version__}: wrote {path}")
    return path


if __name__ == "__main__":
    export(sys.argv[1], Path(sys.argv[2]))
