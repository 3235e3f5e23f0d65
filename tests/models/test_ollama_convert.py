"""What Ollama's own converter drops (posenc_cli.models.ollama_convert), and ``posenc inspect --lint`` saying so.

The fact is read from github.com/ollama/ollama convert/convert_qwen2.go: a struct with rope_scaling's ``type``,
``factor``, ``original_max_position_embeddings``; YaRN written as type and factor only."""

from __future__ import annotations

import json
from pathlib import Path

from clihelpers import run, write_json

from posenc_cli.models.ollama_convert import ollama_converter_drops

ROOT = Path(__file__).resolve().parents[2]
QWEN = json.loads((ROOT / "docs" / "examples" / "qwen2.5-7b-instruct-yarn.json").read_text())


def test_what_is_dropped() -> None:
    yarn = {"factor": 4.0, "original_max_position_embeddings": 32768}
    (line,) = ollama_converter_drops({"rope_scaling": {"type": "yarn", **yarn}, "max_position_embeddings": 131072},
                                     "qwen2")
    assert "never writes rope.scaling.original_context_length" in line and "instead of 32768" in line
    (line,) = ollama_converter_drops({"rope_scaling": {"rope_type": "yarn", **yarn}}, "qwen2")
    assert "the scaling is dropped" in line
    (line,) = ollama_converter_drops({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, **yarn}}, "llama")
    assert "does not read rope_parameters" in line
    assert ollama_converter_drops({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "qwen2") == []
    assert ollama_converter_drops({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama") == []
    assert ollama_converter_drops({"rope_scaling": {"type": "yarn", **yarn}}, "gpt_oss") == []  # its own converter


def test_lint_warns_and_exits_0(tmp_path: Path) -> None:
    out = run("inspect", write_json(tmp_path, QWEN), "--lint", "--json")
    assert out.exit_code == 0, out.stderr
    (found,) = [p for p in json.loads(out.stdout)["lint"] if p["code"] == "ollama-converter-drops"]
    assert found["severity"] == "warning" and "convert_hf_to_gguf.py" in found["fix"] and "-o NEW.gguf" in found["fix"]
