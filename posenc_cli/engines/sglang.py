"""SGLang 0.5.23 (``sglang/srt/layers/rotary_embedding/factory.py`` and ``yarn.py``, ``srt/configs/model_config.py``).

SGLang's rotary classes are vLLM's, forked: ``get_rope`` reads ``rope_type`` (or ``type``) from the config's rope
dict and builds the same classes, so the frequencies follow :mod:`posenc_cli.engines.vllm`, with one difference:
its YaRN takes an ``attn_factor`` multiplier and never reads transformers' ``attention_factor`` key, so a custom
attention factor is not applied. Overrides go through ``--json-model-override-args`` (a dict value replaces the
model's whole dict); ``--context-length`` longer than the model's window needs
``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``.
"""

from __future__ import annotations

import json
from typing import Any

from posenc_cli.engines import EngineRun, GroupRun, vllm
from posenc_cli.models import ModelPositions, text_config

VERSION = "0.5.23"
ENV_LONG = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int) -> EngineRun:
    base = vllm.run(model, cfg, max_model_len)
    groups: list[GroupRun] = []
    warnings = [w.replace("vLLM", "SGLang") for w in base.warnings]
    for layer, group in zip(model.layers, base.groups, strict=True):
        p = layer.params
        if p.get("rope_type") == "yarn" and p.get("attention_factor") is not None \
                and model.text_model_type not in vllm._DEEPSEEK:
            from posenc_cli.attention_factors import yarn_mscale

            factor = float(p.get("factor") or 1.0)
            group = GroupRun(group.name, group.inv_freq, yarn_mscale(factor), group.softmax_scale)
            warnings.append("SGLang's YaRN ignores attention_factor (it takes an attn_factor multiplier)")
        groups.append(group)
    accepts = model.max_position_embeddings or max_model_len
    needs = [ENV_LONG] if max_model_len > accepts else []
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "MODEL", "--context-length", str(max_model_len)]
    over = vllm.overrides(model, cfg, max_model_len)
    if over is not None:
        _, _, where = text_config(cfg)
        body = over.get("text_config", over)
        rope = {"rope_scaling": body["rope_parameters"], "max_position_embeddings": body["max_position_embeddings"]}
        argv += ["--json-model-override-args", json.dumps({"text_config": rope} if where == "text_config" else rope)]
    if needs:
        argv = ["env", *needs, *argv]
    return EngineRun("sglang", VERSION, max_model_len, groups, argv, accepts=accepts, needs=needs,
                     warnings=list(dict.fromkeys(warnings)))
