"""The first transformers release that reads each config feature (stdlib data, for ``inspect --lint``).

Read off the released wheels on PyPI (4.0 .. 5.24, first non-yanked release of each minor version; both sides of
every boundary inspected). Where a feature first parsed in one release but the model code only ran it in the next
patch, the later one is given: a config is "read" when a model built from it uses the value.
"""

from __future__ import annotations

#: ``rope_type`` -> first release whose Llama-style model computes it.
ROPE_TYPE_SINCE = {"linear": "4.31.0", "dynamic": "4.31.0", "yarn": "4.43.0", "longrope": "4.43.0",
                   "llama3": "4.43.0", "proportional": "5.5.0"}

#: Config keys: ``rope_type`` inside ``rope_scaling`` (4.43.0 parses it, but the Llama model still read ``type``
#: until 4.43.1); ``rope_parameters`` (4.57 ignores it silently and runs default RoPE).
KEY_SINCE = {"rope_type": "4.43.1", "rope_parameters": "5.0.0"}

#: ``model_type`` -> first installable release with its config class (4.57.0 is yanked: 4.57.1).
MODEL_TYPE_SINCE = {
    "llama": "4.28.0", "mistral": "4.34.0", "mixtral": "4.36.0", "qwen2": "4.37.0", "qwen2_moe": "4.40.0",
    "qwen3": "4.51.0", "qwen3_moe": "4.51.0", "qwen3_next": "4.57.1", "qwen3_vl": "4.57.1", "qwen3_5": "5.2.0",
    "qwen3_5_moe": "5.2.0", "qwen2_5_vl": "4.49.0", "gemma": "4.38.0", "gemma2": "4.42.0", "gemma3": "4.50.0",
    "gemma3_text": "4.50.0", "gemma4": "5.5.0", "phi": "4.36.0", "phi3": "4.41.0", "olmo2": "4.47.0",
    "olmo3": "4.57.1", "deepseek_v2": "4.54.0", "deepseek_v3": "4.51.0", "deepseek_v32": "5.11.0",
    "deepseek_v4": "5.8.0", "gpt_oss": "4.55.0", "llama4": "4.51.0", "smollm3": "4.53.0", "exaone4": "4.54.0",
    "glm4_moe": "4.54.0", "nemotron_h": "5.3.0", "minicpm3": "5.13.0", "kimi_k25": "5.13.0", "mistral3": "4.50.0",
    "ministral3": "5.0.0", "cohere": "4.39.0", "cohere2": "4.48.0", "gpt_neox": "4.20.0", "stablelm": "4.38.0",
    "falcon_h1": "4.53.0", "granite": "4.45.0", "lfm2": "4.54.0", "mllama": "4.45.0",
}

#: Model types whose modeling code ignored ``rope_scaling`` before this release (the config loaded, the scaling
#: did not apply).
SCALING_READ_SINCE = {"mistral": "4.48.0", "mixtral": "4.48.0", "gemma": "4.48.0", "gemma2": "4.48.0",
                      "qwen2": "4.45.0", "qwen2_moe": "4.45.0", "cohere": "4.45.0", "lfm2": "4.54.0"}
