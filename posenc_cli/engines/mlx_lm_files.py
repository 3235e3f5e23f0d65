"""MLX-LM 0.32.2's model files and the model types it remaps (stdlib data, read by the rope model
:mod:`posenc_cli.engines.mlx_lm` and the memory model :mod:`posenc_cli.engines.caches.mlx_lm`; kept apart so that
``posenc memory`` loads no rope code). ``tests/engines/test_mlx_lm.py`` checks both against the installed package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: mlx-lm 0.32.2's model files (``mlx_lm/models/*.py`` less its helpers): the model types it loads
MODEL_FILES = frozenset("""
Klear afm7 afmoe apertus baichuan_m1 bailing_hybrid bailing_moe bailing_moe_linear bailing_moe_v3 bitnet cohere
cohere2 dbrx deepseek deepseek_v2 deepseek_v3 deepseek_v32 deepseek_v41 dots1 ernie4_5 ernie4_5_moe exaone exaone4
exaone_moe falcon_h1 gemma gemma2 gemma3 gemma3_text gemma3n gemma4 gemma4_text glm glm4 glm4_moe glm4_moe_lite
gear glm_moe_dsa gpt2 gpt_bigcode gpt_neox gpt_oss gptj granite granitemoe granitemoehybrid helium hunyuan
hunyuan_v1_dense internlm2 internlm3 iquestloopcoder jamba kimi_k25 kimi_k3 kimi_linear kimi_vl laguna lfm2-vl lfm2
lfm2_moe lille-130m llama llama4 llama4_text longcat_flash longcat_flash_ngram mamba mamba2 mellum mimo mimo_v2_flash
minicpm minicpm3 minimax minimax_m3_vl ministral3 mistral3 mistral4 mixtral muse_glimmer muse_spark nanbeige nanochat
nemotron-nas nemotron nemotron_h olmo olmo2 olmo3 olmo_hybrid olmoe openelm phi phi3 phi3small phimoe phixtral
pixtral plamo plamo2 plamo3 prism_hadamard_qwen35 qwen qwen2 qwen2_moe qwen2_vl qwen3 qwen3_5 qwen3_5_moe qwen3_moe
qwen3_next qwen3_vl qwen3_vl_moe recurrent_gemma rwkv7 seed_oss smollm3 solar_open spark2_5 stablelm starcoder2 step3p5
talkie telechat3 youtu_llm
""".split())
#: ``mlx_lm/utils.py`` MODEL_REMAPPING: model types served by another model file
REMAPPING = {"mistral": "llama", "llava": "mistral3", "phi-msft": "phixtral", "falcon_mamba": "mamba",
             "joyai_llm_flash": "deepseek_v3", "kimi_k2": "deepseek_v3", "qwen2_5_vl": "qwen2_vl",
             "minimax_m2": "minimax", "iquestcoder": "llama", "xverse": "llama", "gemma4_unified": "gemma4",
             "deepseek_v41_text": "deepseek_v41"}


def model_file(cfg: Mapping[str, Any]) -> str | None:
    """The model file mlx-lm loads for ``cfg`` (``mlx_lm/utils.py`` ``_get_classes``: MODEL_ARCHITECTURE_REMAPPING,
    then MODEL_REMAPPING), None when it has none."""
    model_type = str(cfg.get("model_type"))
    architectures = cfg.get("architectures") or ()
    if model_type == "bailing_hybrid" and "BailingMoeV3ForCausalLM" in architectures:
        return "bailing_moe_v3"
    name = REMAPPING.get(model_type, model_type)
    return name if name in MODEL_FILES else None
