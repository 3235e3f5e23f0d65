"""posenc scale's core (posenc_cli.scale.scaled): the request rendered, the verdict and the notes, without the CLI
(tests/cli/test_scale.py has the command)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from trained_variants import CORPUS, card_patched, trained_length, unscaled_models, written_on_the_way

from posenc_cli.errors import PosencError
from posenc_cli.frameworks.check import judge
from posenc_cli.frameworks.registry import format_owner, formats
from posenc_cli.models.convert import convert
from posenc_cli.models.model_positions import describe
from posenc_cli.models.sources import describe_source, read_source
from posenc_cli.rope import scaling
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.scale.scaled import ScaleAsk, scale


def test_a_bare_request_renders_with_its_notes_in_order() -> None:
    scaled = scale("yarn", ScaleOptions(original_max="32k", target="128k"), ScaleAsk(engine="vllm"), theta=1e6)
    assert scaled.text.startswith("vllm serve MODEL --hf-overrides ")
    assert scaled.destination is None
    assert scaled.notes == ["note: --head-dim not given; using 128"]
    assert scaled.request.factor == 4.0 and scaled.request.theta == 1e6


def test_the_default_format_is_hf_and_seq_len_needs_a_training_format() -> None:
    scaled = scale("linear", ScaleOptions(original_max="4k", factor=2), ScaleAsk(), theta=1e4, head_dim=64)
    assert json.loads(scaled.text)["rope_scaling"]["factor"] == 2.0
    with pytest.raises(PosencError, match="seq_len sets the length"):
        scale("linear", ScaleOptions(original_max="4k", factor=2), ScaleAsk(engine="vllm", seq_len="6k"))


@pytest.mark.parametrize(("ask", "needle"), [
    (ScaleAsk(engine="nope"), "engine 'nope' is not known"),
    (ScaleAsk(output="x.json"), "pass config FILE"),
    (ScaleAsk(config="c.json", output="x.json", in_place=True), "not both"),
])
def test_a_bad_ask_fails_before_anything_is_read(ask: ScaleAsk, needle: str) -> None:
    with pytest.raises(PosencError, match=needle):
        scale("yarn", ScaleOptions(original_max="4k", factor=2), ask)


# --- the jump a warning measures runs from the trained length ------------------------------------------------------

_METHODS = ("yarn", "linear", "llama3", "dynamic", "ntk")


def _scaled_on(path: Path, method: str, target: int) -> tuple[Any, list[str]] | str:
    """(the final rope and window, the warning lines) of ``posenc scale METHOD --target TARGET --config PATH``, or
    the error (its text without the file's name)."""
    try:
        got = scale(method, ScaleOptions(target=str(target)), ScaleAsk(config=str(path)))
    except PosencError as exc:
        return str(exc).replace(str(path), "FILE")
    rope = scaling.rope_parameters(got.request)
    return (rope, scaling.max_position_embeddings(got.request)), [n for n in got.notes if n.startswith("warning:")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(unscaled_models()), st.sampled_from((2, 4)), st.sampled_from(_METHODS),
       st.sampled_from(_METHODS), st.sampled_from((1.5, 2, 4, 8, 16)))
def test_a_file_patched_on_the_way_scales_and_warns_as_the_file_it_came_from(
        tmp_path: Path, name: str, reach: int, way: str, method: str, past: float) -> None:
    """The unpatched corpus file, its card-patched twin (a yarn block, max_position_embeddings as shipped) and the
    file ``posenc scale WAY --target W -o`` wrote (W = reach x the trained length) give the same final rope and the
    same ``warning:`` lines for one target past W (or the same refusal)."""
    trained = trained_length(name)
    window, target = trained * reach, int(trained * reach * past)
    assume(target <= 1 << 24)
    direct = _scaled_on(CORPUS / name, method, target)
    assume(not isinstance(direct, str))  # the model's class rejects the method: nothing to compare
    try:
        on_the_way = written_on_the_way(name, way, window, tmp_path)
    except PosencError:
        assume(False)  # the model's class rejects the way there
        raise
    for variant in (card_patched(name, reach, tmp_path), on_the_way):
        assert _scaled_on(variant, method, target) == direct, variant.name


def test_a_gguf_posenc_wrote_carries_its_record_and_warns_from_the_trained_length(tmp_path: Path) -> None:
    """``-o NEW.gguf`` writes ``posenc.*`` keys (outside llama's namespace); read back, the new GGUF is trained at
    the twin's 128k (Llama 3.1's llama3 x8 is trained), so a further x2 warns as x8 from 128k would."""
    from posenc_cli.models.gguf.metadata import read_gguf

    twin = CORPUS.parents[1] / "docs" / "examples" / "llama-3.1-twin.gguf"
    first = tmp_path / "x4.gguf"
    scale("yarn", ScaleOptions(target="512k"), ScaleAsk(config=str(twin), output=str(first)))
    keys = read_gguf(first).keys
    assert (keys["posenc.trained_ctx"], keys["posenc.window"], keys["posenc.training_free"]) == (131072, 524288, True)
    again = scale("yarn", ScaleOptions(target="1M"), ScaleAsk(config=str(first)))
    assert [n for n in again.notes if n.startswith("warning:")] == [
        "warning: 128k -> 1M: a x8 jump is past the x4 that shipped models serve without training (Qwen2.5/Qwen3 "
        "YaRN); expect weaker long-range retrieval, or add a fine-tuning stage at the target length (pass "
        "--fine-tuned if the model is fine-tuned at this scale)"]


# --- a verdict judges exactly what is printed or written ------------------------------------------------------------
#
# For every engine: what `scale --engine E` prints (or writes) is fed back to that engine's model (its module's
# `run`, on the config the printed text makes the engine read), and the verdict computed there must be the verdict
# printed beside it.

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
_ROPE_KEYS = ("rope_scaling", "rope_parameters", "rope_theta")


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _overridden(cfg: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """The config an engine reads after a JSON override of its rope: the rope keys replaced whole (vLLM, SGLang
    and LMDeploy set the dict-valued key whole; SGLang's rope_scaling is transformers 5's rope_parameters)."""
    merged = json.loads(json.dumps(cfg))
    inner = merged.setdefault("text_config", {}) if "text_config" in over else merged
    body = over.get("text_config", over)
    for key in _ROPE_KEYS:
        inner.pop(key, None)
    inner.update(body)
    return merged


def _read_by_engine(fmt: str, text: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """(the config the engine reads, the length it serves) from what `scale --engine fmt` printed for a model whose
    config is ``cfg``."""
    if fmt in ("mlx-lm", "exllamav3"):  # config.json keys: a whole config, or keys set in the model's
        keys = json.loads(text)
        read = keys if "model_type" in keys else _overridden(cfg, keys)
        return read, int(read.get("max_position_embeddings") or 0)
    argv = shlex.split(text)
    if fmt == "vllm":
        over = json.loads(_option(argv, "--hf-overrides")) if "--hf-overrides" in argv else {}
        return _overridden(cfg, over) if over else cfg, int(_option(argv, "--max-model-len"))
    if fmt == "sglang":
        flag = "--json-model-override-args"
        over = json.loads(_option(argv, flag)) if flag in argv else {}
        return _overridden(cfg, over) if over else cfg, int(_option(argv, "--context-length"))
    if fmt == "lmdeploy":
        over = json.loads(_option(argv, "--hf-overrides")) if "--hf-overrides" in argv else {}
        return _overridden(cfg, over) if over else cfg, int(_option(argv, "--session-len"))
    raise AssertionError(fmt)


def _verdict_of(cfg: dict[str, Any], fmt: str, length: int) -> str:
    return judge(describe(cfg), cfg, format_owner(fmt), length).line()


def _printed_verdict(verdict: str | None) -> str:
    assert verdict is not None
    return verdict.split(", ", 1)[1]


MODELS = {
    "llama-3.1 (llama3)": (CORPUS / "llama-3.1-8b-instruct.json", "llama3", "256k"),
    "qwen2.5 (yarn)": (CORPUS / "qwen2.5-7b-instruct.json", "yarn", "128k"),
}


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "lmdeploy", "mlx-lm", "exllamav3"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_what_an_engine_prints_computes_the_verdict_printed_beside_it(fmt: str, name: str) -> None:
    path, method, target = MODELS[name]
    cfg = json.loads(path.read_text())
    scaled = scale(method, ScaleOptions(target=target), ScaleAsk(config=str(path), engine=fmt))
    read, length = _read_by_engine(fmt, scaled.text, cfg)
    assert length == scaled.request.target
    assert _verdict_of(read, fmt, length) == _printed_verdict(scaled.verdict)


@pytest.mark.parametrize("fmt", ["mlx-lm", "exllamav3", "vllm", "lmdeploy"])
def test_a_transformers_5_input_is_judged_as_printed(fmt: str, tmp_path: Path) -> None:
    """mlx-lm prints v4 keys for a v5 file: they compute what transformers computes, and the verdict says so (it
    judged the input, rope_parameters mlx-lm does not read, before)."""
    v5 = tmp_path / "config.json"
    v5.write_text(json.dumps(convert(json.loads((CORPUS / "qwen2.5-7b-instruct.json").read_text()), "v5")))
    scaled = scale("yarn", ScaleOptions(target="128k"), ScaleAsk(config=str(v5), engine=fmt))
    read, length = _read_by_engine(fmt, scaled.text, json.loads(v5.read_text()))
    assert _verdict_of(read, fmt, length) == _printed_verdict(scaled.verdict)
    if fmt == "mlx-lm":
        assert "same as transformers" in scaled.verdict and scaled.verdict.startswith("on the config printed")


@pytest.mark.parametrize("fmt", [f for f in formats("engine") if f not in ("hf", "hf-v5")])
def test_a_target_inside_the_window_is_served_as_the_verdict_judged(fmt: str) -> None:
    """Inside the model's window the rope stays as it is: the printed command is the engine's run of the model at
    that length, and the verdict is that run's."""
    path = CORPUS / "llama-3.1-8b-instruct.json"
    scaled = scale("yarn", ScaleOptions(target="64k"), ScaleAsk(config=str(path), engine=fmt))
    assert scaled.request.unchanged and scaled.destination is None
    assert any("64k is inside that window: its rope stays as it is" in n for n in scaled.notes)
    cfg = json.loads(path.read_text())
    assert _printed_verdict(scaled.verdict) == _verdict_of(cfg, fmt, 65536)
    if fmt in ("vllm", "sglang", "lmdeploy"):
        read, length = _read_by_engine(fmt, scaled.text, cfg)
        assert read == cfg and length == 65536  # no rope override: only the length
    sets_length = {"vllm": "--max-model-len 65536", "llama.cpp": "--ctx-size 65536",
                   "ollama": "PARAMETER num_ctx 65536", "lmstudio": "context length 65536",
                   "llama-cpp-python": "--n_ctx 65536",
                   "sglang": "--context-length 65536", "lmdeploy": "--session-len 65536",
                   "exllamav3": "--cache_size 65536"}
    if fmt in sets_length:
        assert sets_length[fmt] in scaled.text
    else:  # mlx-lm takes no context length: it serves what the prompt holds
        assert scaled.text == "mlx_lm.server --model MODEL"


@pytest.mark.parametrize("fmt", ["ollama", "lmstudio", "llama.cpp", "llama-cpp-python"])
def test_a_gguf_written_for_an_engine_computes_the_verdict_printed(fmt: str, tmp_path: Path) -> None:
    """-o NEW.gguf: the engine's run of the file as written, read back, is the verdict printed (which judged the
    patched config); llama.cpp's command names the written file and sets only the length beyond its rope."""
    src = tmp_path / "llama.gguf"
    shutil.copy(EXAMPLES / "llama-3.1-twin.gguf", src)
    new = tmp_path / "out" / "new.gguf"
    new.parent.mkdir()
    scaled = scale("llama3", ScaleOptions(target="256k"), ScaleAsk(config=str(src), engine=fmt, output=str(new)))
    assert scaled.written == str(new) and new.exists()
    written = read_source(str(new))
    got = judge(describe_source(written), written.config, format_owner(fmt), 262144).line()
    assert got == _printed_verdict(scaled.verdict)
    if fmt == "llama.cpp":
        assert scaled.text == f"llama-server -m {new} --ctx-size 262144"
    if fmt == "llama-cpp-python":
        assert scaled.text == f"python -m llama_cpp.server --model {new} --n_ctx 262144"


def test_llama_cpp_flags_printed_are_the_flags_the_verdict_ran() -> None:
    """llama.cpp takes the scaling as flags: the flags printed for a config.json model are the ones its run (on the
    patched config) serves with, so the verdict printed is theirs."""
    from posenc_cli.engines import hf

    path = CORPUS / "qwen2.5-7b-instruct.json"
    scaled = scale("yarn", ScaleOptions(target="128k"), ScaleAsk(config=str(path), engine="llama.cpp"))
    patched = hf.patch_config(json.loads(path.read_text()), scaled.request, "hf")
    judged = judge(describe(patched), patched, "llama.cpp", 131072)
    assert judged.verdict is not None
    pairs = shlex.split(scaled.text)  # the flags alone (the model is the GGUF converted from the patched config)
    ran = judged.verdict.run.invocation[3:]
    assert dict(zip(pairs[::2], pairs[1::2], strict=True)) == dict(zip(ran[::2], ran[1::2], strict=True))
    assert judged.line() == _printed_verdict(scaled.verdict)


def test_mlx_lm_writes_the_config_it_reads_keeping_its_own_keys(tmp_path: Path) -> None:
    """-o and --in-place with --engine mlx-lm: the v4 config mlx-lm reads, quantization (an mlx-lm folder's own key)
    kept, and the verdict on what was written."""
    cfg = convert(json.loads((CORPUS / "qwen2.5-7b-instruct.json").read_text()), "v5")
    cfg["quantization"] = {"group_size": 64, "bits": 4}
    folder = tmp_path / "mlx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "new.json"
    scaled = scale("yarn", ScaleOptions(target="128k"), ScaleAsk(config=str(folder), engine="mlx-lm",
                                                               output=str(out)))
    assert scaled.destination == str(out)
    written = json.loads(scaled.text)
    assert written["quantization"] == {"group_size": 64, "bits": 4}
    assert written["rope_scaling"]["factor"] == 4.0 and "rope_parameters" not in written
    assert scaled.verdict is not None and scaled.verdict.startswith("on the config written, mlx-lm")
    assert _verdict_of(written, "mlx-lm", 131072) == _printed_verdict(scaled.verdict)
    assert "same as transformers" in scaled.verdict
    in_place = scale("yarn", ScaleOptions(target="128k"), ScaleAsk(config=str(folder), engine="mlx-lm",
                                                                  in_place=True))
    assert in_place.destination == str(folder / "config.json") and in_place.text == scaled.text
