"""Ollama (posenc_cli.engines.ollama) and LM Studio (engines.lmstudio): the Modelfile / steps naming the GGUF posenc
writes, and their runs: llama.cpp's on the GGUF's own rope (no flag), Ollama's capped at the GGUF's context_length.
That llama.cpp with no rope flag on the written GGUF computes transformers' logits is proven on converter-made GGUFs
in tests/models/test_gguf_scaled.py; this file uses a GGUF from tests/harness/gguf_files.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
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


def _expand_path(path: str, relative_dir: str, home: str) -> str:
    """Ollama's parser.expandPathImpl, as its source states the rule: an absolute path (or one starting with a
    backslash) stands; ``~`` or ``~/`` is the home folder; anything else is joined to the Modelfile's folder."""
    if os.path.isabs(path) or path.startswith(("\\", "/")):
        return os.path.abspath(path)
    if path == "~" or path.startswith("~/"):
        return os.path.abspath(os.path.join(home, path.removeprefix("~").lstrip("/")))
    return os.path.abspath(os.path.join(relative_dir, path))


def _modelfile_commands(text: str) -> list[tuple[str, str]]:
    """The commands of a Modelfile as Ollama's parser reads them (comment lines skipped; a quoted value unquoted)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, value = line.partition(" ")
        assert name.lower() in ("from", "parameter"), line  # nothing else is written
        out.append((name.upper(), value.strip().strip('"')))
    return out


@pytest.mark.parametrize("output", ["out/x.gguf", "x.gguf", "./deep/er/x.gguf", "ABS", "with space/x y.gguf"])
def test_from_resolves_to_the_written_gguf_from_the_modelfile_beside_it(output: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src = _llama(tmp_path)
    monkeypatch.chdir(tmp_path)
    target = str(tmp_path / "abs" / "x.gguf") if output == "ABS" else output
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    out = ok(run("scale", "yarn", "--target", "32k", "--config", str(src), "-o", target, "--engine", "ollama"))
    assert "# save as Modelfile beside the GGUF, then:" in out.stdout
    commands = _modelfile_commands(out.stdout)
    assert commands == [("FROM", commands[0][1]), ("PARAMETER", "num_ctx 32768")]
    modelfile_dir = os.path.dirname(os.path.abspath(target))
    assert _expand_path(commands[0][1], modelfile_dir, str(tmp_path)) == os.path.abspath(target)


def test_expand_path_rule_is_ollamas() -> None:
    """The rule the test above resolves with, on the cases of Ollama's own parser tests (parser_test.go)."""
    assert _expand_path("/abs/path/file.txt", "/rel", "/home/u") == "/abs/path/file.txt"
    assert _expand_path("~/file.txt", "/rel", "/home/u") == "/home/u/file.txt"
    assert _expand_path("file.txt", "/rel", "/home/u") == "/rel/file.txt"
    assert _expand_path("./sub/file.txt", "/rel", "/home/u") == "/rel/sub/file.txt"


def test_ollama_inside_the_window_is_a_modelfile_setting_num_ctx(tmp_path: Path) -> None:
    """Llama 3.1 at 64k: no refusal, no vLLM hint; the Modelfile FROM the model's name, or its GGUF beside it."""
    cfg = Path(__file__).parents[1] / "corpus" / "llama-3.1-8b-instruct.json"
    out = ok(run("scale", "llama3", "--config", str(cfg), "--target", "64k", "--engine", "ollama"))
    assert "--max-model-len" not in out.stdout + out.stderr
    assert _modelfile_commands(out.stdout) == [("FROM", "NAME"), ("PARAMETER", "num_ctx 65536")]
    assert "# (or every model's default context, server-wide: OLLAMA_CONTEXT_LENGTH=65536 ollama serve)" in \
        out.stdout.splitlines()
    assert "`ollama show --modelfile NAME`" in out.stdout
    named = ok(run("scale", "llama3", "--config", str(cfg), "--target", "64k", "--engine", "ollama", "--model",
                   "llama3.1:8b"))
    assert _modelfile_commands(named.stdout)[0] == ("FROM", "llama3.1:8b")
    gguf = _llama(tmp_path)  # its window is 8k
    small = ok(run("scale", "yarn", "--config", str(gguf), "--target", "4k", "--engine", "ollama"))
    (_, path), ctx = _modelfile_commands(small.stdout)
    assert ctx == ("PARAMETER", "num_ctx 4096") and _expand_path(path, str(tmp_path), "/home") == str(gguf)
    assert "ollama show" not in small.stdout  # the GGUF is given: nothing to find


def test_check_runs_ollama_with_num_ctx_and_gives_the_modelfile(tmp_path: Path) -> None:
    gguf = _llama(tmp_path)
    out = ok(run("check", str(gguf), "--engine", "ollama", "--ctx", "4k"))
    line = next(x for x in out.stdout.splitlines() if x.startswith("  run: "))
    assert "PARAMETER num_ctx 4096" in line and "ollama create" in line and line != "  run: ollama run NAME"
    row = json.loads(ok(run("check", str(gguf), "--engine", "ollama", "--ctx", "4k", "--json")).stdout)["engines"][0]
    (_, path), ctx = _modelfile_commands(row["modelfile"])
    assert ctx == ("PARAMETER", "num_ctx 4096") and _expand_path(path, str(tmp_path), "/home") == str(gguf)
    past = run("check", str(gguf), "--engine", "ollama", "--ctx", "64k", "--json")
    assert past.exit_code == 1
    row = json.loads(past.stdout)["engines"][0]
    assert row["verdict"] == SERVES_LESS and "serves only the GGUF's window (8,192 tokens)" in row["refusal"]


def test_lint_names_ollamas_converter_for_a_config_never_for_a_gguf(tmp_path: Path) -> None:
    """A GGUF posenc wrote is the file Ollama serves: no converter made it, so no converter warning."""
    cfg = Path(__file__).parents[2] / "docs" / "examples" / "qwen2.5-7b-instruct-yarn.json"
    codes = [p["code"] for p in json.loads(run("inspect", str(cfg), "--lint", "--json").stdout)["lint"]]
    assert "ollama-converter-drops" in codes
    new = tmp_path / "y.gguf"
    ok(run("scale", "yarn", "--target", "32k", "--config", str(_llama(tmp_path)), "-o", str(new)))
    codes = [p["code"] for p in json.loads(run("inspect", str(new), "--lint", "--json").stdout)["lint"]]
    assert "ollama-converter-drops" not in codes
    checked = json.loads(run("check", str(new), "--engine", "ollama", "--ctx", "32k", "--json").stdout)
    assert not any("ollama create" in w for w in checked["engines"][0]["warnings"])


def test_llama_cpp_with_o_writes_the_gguf_and_serves_it(tmp_path: Path) -> None:
    new = tmp_path / "l.gguf"
    out = ok(run("scale", "yarn", "--target", "32k", "--config", str(_llama(tmp_path)), "-o", str(new), "--engine",
                 "llama.cpp"))
    assert new.exists() and f"wrote {new}" in out.stderr
    assert out.stdout.startswith(f"llama-server -m {new} ") and out.stdout.rstrip().endswith("--ctx-size 32768")
