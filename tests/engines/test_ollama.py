"""Ollama (posenc_cli.engines.ollama) and LM Studio (engines.lmstudio): the Modelfile / steps naming the GGUF posenc
writes, and their runs: llama.cpp's on the GGUF's own rope (no flag), Ollama's capped at the GGUF's context_length.
That llama.cpp with no rope flag on the written GGUF computes transformers' logits is proven on converter-made GGUFs
in tests/models/test_gguf_scaled.py; this file uses a GGUF from tests/harness/gguf_files.py."""

from __future__ import annotations

import json
from pathlib import Path

from clihelpers import assert_usage_error, ok, run
from gguf_files import make_gguf

from posenc_cli.engines import llamacpp, lmstudio, ollama
from posenc_cli.engines.runs import SERVES_LESS
from posenc_cli.models.sources import describe_source, read_source


def _llama(tmp_path: Path) -> Path:
    return make_gguf(tmp_path / "llama.gguf", {"token_embd.weight": 64, "output.weight": 64},
                     extra={"llama.rope.dimension_count": 128})


def test_format_ollama_with_o_writes_the_gguf_and_a_modelfile_naming_it(tmp_path: Path) -> None:
    src = _llama(tmp_path)
    new = tmp_path / "llama-32k.gguf"
    out = ok(run("scale", "yarn", "--target", "32k", "--config", str(src), "-o", str(new), "--engine", "ollama"))
    assert f"FROM {new}" in out.stdout.splitlines() or "FROM ./llama-32k.gguf" in out.stdout
    assert "PARAMETER num_ctx 32768" in out.stdout.splitlines()
    assert "#   ollama create llama-32k -f Modelfile" in out.stdout and "#   ollama run llama-32k" in out.stdout
    assert f"wrote {new}" in out.stderr
    layer = json.loads(ok(run("inspect", str(new), "--json")).stdout)["layers"][0]
    assert layer["rope_type"] == "yarn" and layer["native_window"] == 32768
    checked = json.loads(run("check", str(new), "--engines", "ollama,lmstudio,llama.cpp", "--max-model-len",
                             "32768", "--json").stdout)
    verdicts = {e["engine"]: e["verdict"] for e in checked["engines"]}
    assert verdicts == {"ollama": "same", "lmstudio": "same", "llama.cpp": "same"}, verdicts


def test_without_o_the_modelfile_says_to_write_the_gguf_first(tmp_path: Path) -> None:
    src = _llama(tmp_path)
    out = ok(run("scale", "yarn", "--target", "32k", "--config", str(src), "--engine", "ollama"))
    assert "FROM ./NEW.gguf" in out.stdout and f"posenc scale yarn --config {src} --target 32768 -o NEW.gguf" in \
        out.stdout
    steps = ok(run("scale", "yarn", "--target", "32k", "--config", str(src), "-o", str(tmp_path / "n.gguf"),
                   "--engine", "lmstudio"))
    assert steps.stdout.splitlines()[0] == f"lms import {tmp_path / 'n.gguf'}"
    assert_usage_error(run("scale", "yarn", "--target", "32k", "--config", str(src), "-o", "-", "--engine", "ollama"),
                       "-o - streams the GGUF to stdout")


def test_runs_are_llama_cpp_on_the_ggufs_own_rope_and_ollama_caps_at_context_length(tmp_path: Path) -> None:
    src = read_source(str(_llama(tmp_path)))
    model = describe_source(src)
    base = llamacpp.run(model, src.config, 8192)
    for engine in (ollama, lmstudio):
        got = engine.run(model, src.config, 8192)
        assert [g.inv_freq.tolist() for g in got.groups] == [g.inv_freq.tolist() for g in base.groups]
    # past the GGUF's context_length Ollama serves fewer tokens than asked: not the run asked for
    capped = ollama.run(model, src.config, 65536)
    assert capped.accepts == 8192 and capped.refusal is not None and capped.refusal.startswith(SERVES_LESS)
    assert ollama.CAPPED in capped.refusal and not capped.groups
    assert lmstudio.run(model, src.config, 65536).accepts is None
