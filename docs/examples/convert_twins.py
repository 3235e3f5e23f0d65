"""Write docs/examples/llama-3.1-twin.gguf and deepseek-v2-lite-twin.gguf: tiny random twins of Llama 3.1 8B Instruct
and DeepSeek-V2-Lite (their exact rope settings and rotary dims, one layer, float16 weights), converted by llama.cpp's
own convert_hf_to_gguf.py, the way tests/engines/test_llamacpp_converted.py makes its GGUFs (tests/harness/converted_harness.py).

    POSENC_LLAMA_CONVERTER=.../llama_cpp_python-0.3.36/vendor/llama.cpp python docs/examples/convert_twins.py

The converter is not part of this repository: POSENC_LLAMA_CONVERTER names the vendor/llama.cpp folder of the
llama-cpp-python 0.3.36 sdist (pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from converted_harness import convert, converter_dir, save_twin, tiny_twin  # noqa: E402

converter = converter_dir()
if converter is None:
    sys.exit("set POSENC_LLAMA_CONVERTER to the vendor/llama.cpp folder of the llama-cpp-python 0.3.36 sdist")
llama = json.loads((ROOT / "tests" / "corpus" / "llama-3.1-8b-instruct.json").read_text())
deepseek = json.loads((ROOT / "tests" / "corpus" / "deepseek-v3.json").read_text())
v2_lite = {**deepseek, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
           "rope_scaling": {**deepseek["rope_scaling"], "mscale": 0.707, "mscale_all_dim": 0.707}}
with tempfile.TemporaryDirectory() as tmp:
    for name, config in (("llama-3.1-twin", llama), ("deepseek-v2-lite-twin", v2_lite)):
        folder = save_twin(tiny_twin(config, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                                     **({} if name.startswith("deepseek") else {"hidden_size": 128})),
                           Path(tmp) / name)
        print(convert(converter, folder, HERE / f"{name}.gguf", "f16"))
