"""Write the config.json LLaMA-Factory 0.9.5 exports, with LLaMA-Factory's own ``configure_rope`` and transformers
4.57's ``save_pretrained`` (what ``llamafactory-cli export`` calls: ``model.save_pretrained`` writes
``model.config``).

Run with a Python that has ``llamafactory==0.9.5`` and ``transformers==4.57.6`` (LLaMA-Factory's configure_rope fails
under transformers 5: a float max_position_embeddings), e.g.::

    python3 -m venv /work/venv-audit
    pip install --no-deps torch-2.13.0+cpu...whl && pip install sympy networkx jinja2 fsspec transformers==4.57.6
    pip install --no-deps llamafactory==0.9.5 peft==0.18.1 accelerate==1.11.0 psutil
    python tests/harness/llamafactory_export.py tests/fixtures/audit

``llamafactory.model`` imports trl and the whole loader; the rope module needs neither, so ``llamafactory.model`` and
``llamafactory.model.model_utils`` are registered as bare packages (their ``__init__`` skipped) and
``model/model_utils/rope.py`` is imported unchanged. The whole export (``llamafactory-cli export``) also needs a
tokenizer, a chat template and trl; it is not run here.

Cases (a 4k Llama, trained with ``rope_scaling: yarn``, ``cutoff_len: 16384``):

* ``lf-yarn-train``: the config after training (configure_rope with model_max_length = cutoff_len,
  hparams/parser.py L518), saved: what the training run's final save and a CPU export with that cutoff_len write.
* ``lf-yarn-export``: ``lf-yarn-train`` loaded back and exported with ``rope_scaling: yarn`` in the export YAML
  (model_max_length None: the inference branch, rope.py L64-65): factor 2.0.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

BASE: dict[str, Any] = {"hidden_size": 2048, "intermediate_size": 5504, "num_attention_heads": 16,
                        "num_hidden_layers": 2, "num_key_value_heads": 16, "max_position_embeddings": 4096,
                        "rope_theta": 10000.0, "vocab_size": 32000}


def configure_rope_module() -> Any:
    import llamafactory

    root = Path(llamafactory.__file__).parent
    for name, folder in (("llamafactory.model", root / "model"),
                         ("llamafactory.model.model_utils", root / "model" / "model_utils")):
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        sys.modules[name] = module
    from llamafactory.model.model_utils import rope

    return rope


def export(out: Path) -> dict[str, Path]:
    import transformers
    from transformers import AutoConfig, LlamaConfig

    rope = configure_rope_module()
    from llamafactory.extras.constants import RopeScaling

    written = {}
    config = LlamaConfig(**BASE)
    rope.configure_rope(config, types.SimpleNamespace(rope_scaling=RopeScaling.YARN, model_max_length=16384))
    config.save_pretrained(out / "lf-yarn-train")
    written["lf-yarn-train"] = out / "lf-yarn-train" / "config.json"
    trained = AutoConfig.from_pretrained(out / "lf-yarn-train")
    rope.configure_rope(trained, types.SimpleNamespace(rope_scaling=RopeScaling.YARN, model_max_length=None))
    trained.save_pretrained(out / "lf-yarn-export")
    written["lf-yarn-export"] = out / "lf-yarn-export" / "config.json"
    for path in written.values():
        cfg = json.loads(path.read_text())
        cfg.pop("transformers_version", None)  # the file is compared across runs; the version is in this docstring
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    print(f"transformers {transformers.__version__}: wrote {', '.join(str(p) for p in written.values())}")
    return written


if __name__ == "__main__":
    export(Path(sys.argv[1]))
