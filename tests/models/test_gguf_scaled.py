"""``posenc scale METHOD --config MODEL.gguf --target N -o NEW.gguf`` on GGUFs made by llama.cpp's OWN converter.

Each twin (converted_harness.py: a corpus config's rope and head dims, tiny everything else) is converted by
``convert_hf_to_gguf.py`` of the llama-cpp-python 0.3.36 sdist (``POSENC_LLAMA_CONVERTER``; skipped without it).
For each request, posenc writes NEW.gguf from the converted GGUF, and posenc patches the twin's config.json for the
same request (``-o DIR/config.json``), which the converter converts too. Then:

* llama.cpp (llama-cpp-python) on NEW.gguf with NO rope flag (only the context size) gives the logits transformers
  gives for the patched config, within ``TOL`` = 2e-3 relative (the largest per-position
  ``|llama.cpp - transformers| / |transformers|``, L2 over the vocabulary, from position 1; the same tolerance and
  reasons as test_llamacpp_converted.py: float32 angles and summation orders under attention made sharp on purpose;
  the measured values are printed with ``-s``; a wrong rope moves them by more than ``MISMATCH`` = 0.05);
* every ``{arch}.`` key of NEW.gguf equals the converted patched config's (read by the vendored gguf-py's own
  ``GGUFReader``, float32 values compared exactly), and so do its tensor names; the rope tensors' values agree to
  float32 rounding (``rope_freqs``: the converter's own float32 loop against transformers' llama3 arithmetic,
  ``RTOL_TABLE`` = 1e-6) or exactly (LongRoPE's lists);
* every other tensor of NEW.gguf is byte-identical to the input's (sha256), and the input is unchanged;
* ``posenc inspect NEW.gguf`` reads back the rope ``posenc inspect`` reads from the patched config.json.

Measured (one weight seed, 512 tokens): 8e-7 to 3.1e-4 over 14 twins (Llama 3.1 and 4, Mistral 7B, Qwen2.5, Qwen3,
Qwen3-MoE, GLM-4 and 4.5, Gemma 3 1B and 27B, DeepSeek V3 and V2-Lite, Ministral 3, gpt-oss, Phi-3). Where the
converter's own keys are wrong (:data:`DIFFERS`), the keys that differ are named and the converter's GGUF is shown
off by more than MISMATCH (0.69-1.3 measured) where posenc's is within TOL. gpt-oss's YaRN has its own test
(truncate=false is held by no GGUF). The refusals on GGUFs built here (tests/harness/gguf_files.py) need neither
the converter nor llama.cpp.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, ok, run
from converted_harness import convert, converter_dir, hf_logits, relative_diff, save_twin, tiny_twin
from gguf_files import file_hash, make_gguf
from llamacpp_harness import llamacpp_logits

CONVERTER = converter_dir()
MISSING = [m for m in ("llama_cpp", "transformers", "torch") if find_spec(m) is None]
#: the marks of every test on converted twins (the refusals of GGUFs built here need neither)
CONVERTED = [pytest.mark.numeric,
             pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (the engines extra)"),
             pytest.mark.skipif(CONVERTER is None, reason="POSENC_LLAMA_CONVERTER does not name llama.cpp's "
                                "convert_hf_to_gguf.py folder (.ci/run sets it after pip download)")]


def converted(test: Any) -> Any:
    for mark in CONVERTED:
        test = mark(test)
    return test

ROOT = Path(__file__).resolve().parents[2]
TOL = 2e-3
MISMATCH = 0.05
RTOL_TABLE = 1e-6
N_TOKENS = 512
TOKENS = np.random.default_rng(2).integers(0, 128, size=N_TOKENS)
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def _json(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / path).read_text())
    return data


def _deepseek_v2_lite() -> dict[str, Any]:
    """DeepSeek-V2-Lite's rope (mscale = mscale_all_dim = 0.707, factor 40 over 4096) on the V3 corpus config."""
    cfg = _json("tests/corpus/deepseek-v3.json")
    return {**cfg, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
            "rope_scaling": {**cfg["rope_scaling"], "mscale": 0.707, "mscale_all_dim": 0.707}}


#: a few experts, every layer sparse: the MoE twin stays tiny
_SMALL_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1,
              "mlp_only_layers": []}

TWINS = {
    "llama-3.1": lambda: tiny_twin(_json("tests/corpus/llama-3.1-8b-instruct.json")),
    "mistral-7b": lambda: tiny_twin(_json("tests/corpus/mistral-7b-v0.1.json")),  # the converter's llama arch
    "qwen2.5-yarn": lambda: tiny_twin(_json("docs/examples/qwen2.5-7b-instruct-yarn.json")),
    "qwen3-yarn": lambda: tiny_twin(_json("docs/examples/qwen3-8b-yarn.json")),
    "qwen3-moe": lambda: tiny_twin(_json("tests/corpus/qwen3-235b-a22b.json"), **_SMALL_MOE),
    "gemma-3": lambda: tiny_twin(_json("tests/corpus/gemma-3-1b-it.json")),
    "gemma-3-27b-linear": lambda: tiny_twin(_json("tests/corpus/gemma-3-27b-it.json")),  # linear x8, as shipped
    "deepseek-v3": lambda: tiny_twin(_json("tests/corpus/deepseek-v3.json")),
    "deepseek-v2-lite": lambda: tiny_twin(_deepseek_v2_lite()),
    "phi-3": lambda: tiny_twin(_json("tests/fixtures/phi-3-mini-128k.json")),
    "glm-4.5": lambda: tiny_twin(_json("tests/corpus/glm-4.5.json"), n_routed_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, first_k_dense_replace=1, n_shared_experts=1, n_group=1,
                                 topk_group=1),
    # 4 layers: llama.cpp's llama4 makes every 4th layer full attention (the others chunked); with 2 there is none,
    # and llama.cpp aborts (GGML_ASSERT "tensor buffer not set")
    "llama-4": lambda: tiny_twin(_json("tests/corpus/llama-4-scout-17b-16e-instruct.json"), num_hidden_layers=4,
                                 num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=64),
    # GLM-4 (dense): GLM-4.5's rope and heads without its MoE keys (llama.cpp's glm4 asserts no expert groups)
    "glm-4": lambda: tiny_twin({**{k: v for k, v in _json("tests/corpus/glm-4.5.json").items() if k not in (
        "n_group", "topk_group", "n_shared_experts", "first_k_dense_replace", "routed_scaling_factor", "norm_topk_prob",
        "use_qk_norm")}, "model_type": "glm4", "architectures": ["Glm4ForCausalLM"]}),
    "ministral-3": lambda: tiny_twin(_json("tests/corpus/devstral-small-2-24b-instruct.json")),  # mistral3 arch
    "gpt-oss": lambda: tiny_twin(_json("tests/corpus/gpt-oss-20b.json"), num_local_experts=4, num_experts_per_tok=2,
                                 experts_per_token=2),
}


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (HF folder, converted GGUF)."""
    assert CONVERTER is not None
    out = {}
    for name, make in TWINS.items():
        folder = save_twin(make(), tmp_path_factory.mktemp(name) / "hf")
        out[name] = folder, convert(CONVERTER, folder, folder.parent / "model.gguf")
    return out


def _reader(path: Path) -> Any:
    assert CONVERTER is not None
    sys.path.insert(0, str(CONVERTER / "gguf-py"))
    try:
        from gguf import GGUFReader
    finally:
        sys.path.remove(str(CONVERTER / "gguf-py"))
    return GGUFReader(str(path))


def _contents(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(every key's value, every tensor's data) as gguf-py reads them."""
    reader = _reader(path)
    fields = {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    tensors = {t.name: np.asarray(t.data).tobytes() for t in reader.tensors}
    return fields, tensors


def _longrope_request(folder: Path) -> tuple[str, ...]:
    """LongRoPE to 256k with new factor lists (the shipped ones scaled: posenc never invents factors)."""
    rope = json.loads((folder / "config.json").read_text())["rope_parameters"]
    long = json.dumps([round(2 * v, 4) for v in rope["long_factor"]])
    short = json.dumps([round(v, 4) for v in rope["short_factor"]])
    return ("longrope", "--target", "256k", "--long-factor", long, "--short-factor", short)


CASES = [
    ("llama-3.1", ("yarn", "--target", "256k")),
    ("llama-3.1", ("linear", "--target", "256k")),
    ("llama-3.1", ("ntk", "--target", "256k")),
    ("llama-3.1", ("llama3", "--target", "256k")),
    ("qwen2.5-yarn", ("yarn", "--target", "256k")),
    ("qwen2.5-yarn", ("linear", "--target", "256k")),
    ("qwen2.5-yarn", ("ntk", "--target", "256k")),
    ("phi-3", ("longrope",)),
    ("mistral-7b", ("yarn", "--target", "128k")),
    ("qwen3-yarn", ("yarn", "--target", "256k")),
    ("qwen3-yarn", ("linear", "--target", "256k")),
    ("qwen3-yarn", ("ntk", "--target", "256k")),
    ("qwen3-moe", ("yarn", "--target", "160k")),
    ("gemma-3", ("yarn", "--target", "128k")),
    ("gemma-3", ("linear", "--target", "256k")),
    ("gemma-3", ("ntk", "--target", "256k")),
    ("gemma-3-27b-linear", ("yarn", "--target", "256k")),
    ("deepseek-v3", ("yarn", "--target", "320k")),
    ("deepseek-v3", ("ntk", "--target", "320k")),
    ("deepseek-v2-lite", ("yarn", "--target", "320k")),
    ("glm-4.5", ("yarn", "--target", "512k")),
    ("glm-4.5", ("linear", "--target", "512k")),
    ("glm-4.5", ("ntk", "--target", "512k")),
    ("ministral-3", ("yarn", "--target", "768k")),
    ("llama-4", ("llama3", "--target", "20m")),
    ("llama-4", ("yarn", "--target", "20m")),
    ("llama-4", ("ntk", "--target", "20m")),
    ("glm-4", ("yarn", "--target", "512k")),
    ("glm-4", ("linear", "--target", "512k")),
    ("gpt-oss", ("linear", "--target", "256k")),
    ("gpt-oss", ("ntk", "--target", "256k")),
]


def _both(folder: Path, gguf: Path, tmp: Path, request: tuple[str, ...]) -> tuple[Path, Path, dict[str, Any]]:
    """NEW.gguf written by posenc from ``gguf``; the converter's GGUF of the config posenc patches for the same
    request; that patched config."""
    new = tmp / "new.gguf"
    ok(run("scale", *request, "--config", str(gguf), "-o", str(new)))
    patched_dir = tmp / "patched"
    shutil.copytree(folder, patched_dir)
    ok(run("scale", *request, "--config", str(folder / "config.json"), "-o", str(patched_dir / "config.json")))
    assert CONVERTER is not None
    converted = convert(CONVERTER, patched_dir, tmp / "converted.gguf")
    return new, converted, json.loads((patched_dir / "config.json").read_text())


def _rope_overrides(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: cfg.get(k) for k in ("rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings")}


@converted
@pytest.mark.parametrize(("name", "request_args"), CASES, ids=[f"{n}-{r[0]}" for n, r in CASES])
def test_the_written_gguf_is_the_converters_and_llama_cpp_computes_transformers(
        twins: Any, tmp_path: Path, name: str, request_args: tuple[str, ...]) -> None:
    folder, gguf = twins[name]
    request = _longrope_request(folder) if request_args == ("longrope",) else request_args
    before = file_hash(gguf)
    new, converted, patched = _both(folder, gguf, tmp_path, request)
    assert file_hash(gguf) == before
    ours, ours_tensors = _contents(new)
    theirs, theirs_tensors = _contents(converted)
    arch = ours["general.architecture"]
    assert {k: v for k, v in ours.items() if k.startswith(arch + ".")} == \
        {k: v for k, v in theirs.items() if k.startswith(arch + ".")}
    assert list(ours_tensors) == list(theirs_tensors)
    _, inputs = _contents(gguf)
    for tensor, data in ours_tensors.items():
        if tensor in ROPE_TENSORS:
            a, b = np.frombuffer(data, np.float32), np.frombuffer(theirs_tensors[tensor], np.float32)
            rtol = RTOL_TABLE if tensor == "rope_freqs.weight" else 0.0
            assert np.allclose(a, b, rtol=rtol, atol=0.0), (tensor, float(np.max(np.abs(a / b - 1))))
        else:
            assert hashlib.sha256(data).digest() == hashlib.sha256(inputs[tensor]).digest(), tensor
    diff = relative_diff(llamacpp_logits(new, TOKENS, n_ctx=N_TOKENS), hf_logits(folder, TOKENS,
                                                                                  _rope_overrides(patched)))
    print(f"{name} {request[0]}: llama.cpp on NEW.gguf (no rope flag) vs transformers: {diff:.2e}")
    assert diff <= TOL, diff
    from_config = json.loads(ok(run("inspect", str(tmp_path / "patched" / "config.json"), "--json")).stdout)
    from_gguf = json.loads(ok(run("inspect", str(new), "--json")).stdout)
    for a, b in zip(from_config["layers"], from_gguf["layers"], strict=True):
        assert a["rope_type"] == b["rope_type"] or {a["rope_type"], b["rope_type"]} == {"default"}
        assert np.allclose(a["inv_freq"], b["inv_freq"], rtol=1e-6)
        assert a["attention_factor"] == pytest.approx(b["attention_factor"], rel=1e-6)


#: where posenc's keys differ from the converter's on purpose, so that llama.cpp computes what transformers does
DIFFERS = [
    # the converter writes YaRN's attention_factor as rope.scaling.yarn_attn_factor, which llama.cpp does not read (it
    # uses attn_factor x (0.1 ln s + 1)): posenc adds rope.scaling.attn_factor = wanted / (0.1 ln s + 1)
    ("qwen2.5-yarn", ("yarn", "--target", "256k", "--attention-factor", "1.0"), {"qwen2.rope.scaling.attn_factor"}),
    # deepseek2 scales the softmax by ((0.1 ln s + 1)(1 + yarn_log_multiplier ln s))^2 under linear scaling too; the
    # converter writes no yarn_log_multiplier for a linear rope, posenc the (negative) one that gives transformers' 1
    ("deepseek-v3", ("linear", "--target", "320k"), {"deepseek2.rope.scaling.yarn_log_multiplier"}),
    # deepseek2's magnitude is rope.scaling.attn_factor and its softmax follows yarn_log_multiplier: both set for
    # another attention factor (the converter's yarn_attn_factor is not read)
    ("deepseek-v2-lite", ("yarn", "--target", "320k", "--attention-factor", "1.1"),
     {"deepseek2.rope.scaling.attn_factor", "deepseek2.rope.scaling.yarn_log_multiplier"}),
]


@converted
@pytest.mark.parametrize(("name", "request_args", "keys"), DIFFERS, ids=[f"{n}-{r[0]}" for n, r, _ in DIFFERS])
def test_where_the_converters_keys_are_wrong_posenc_writes_what_llama_cpp_reads(
        twins: Any, tmp_path: Path, name: str, request_args: tuple[str, ...], keys: set[str]) -> None:
    """The keys that differ from the converter's GGUF of the patched config are exactly ``keys``; that GGUF is far
    from transformers in llama.cpp (more than MISMATCH), posenc's within TOL."""
    folder, gguf = twins[name]
    new, converted, patched = _both(folder, gguf, tmp_path, request_args)
    ours, theirs = _contents(new)[0], _contents(converted)[0]
    arch = ours["general.architecture"]
    differ = {k for k in ours.keys() | theirs.keys() if k.startswith(arch + ".") and ours.get(k) != theirs.get(k)}
    assert differ == keys, {k: (ours.get(k), theirs.get(k)) for k in differ}
    reference = hf_logits(folder, TOKENS, _rope_overrides(patched))
    good = relative_diff(llamacpp_logits(new, TOKENS, n_ctx=N_TOKENS), reference)
    bad = relative_diff(llamacpp_logits(converted, TOKENS, n_ctx=N_TOKENS), reference)
    print(f"{name} {' '.join(request_args)}: posenc's GGUF {good:.2e}, the converter's {bad:.2e}")
    assert good <= TOL < MISMATCH < bad


@converted
def test_gpt_oss_yarn_is_the_converters_and_runs_yarn_as_every_gpt_oss_gguf_does(twins: Any, tmp_path: Path) -> None:
    """gpt-oss ships YaRN with truncate=false, which no GGUF holds (llama.cpp always rounds the correction range;
    a GGUF read back is truncate=true, and scale on a config.json says so): the written keys are the converter's,
    and llama.cpp on the file computes transformers' YaRN with truncate=true within TOL; against the patched
    truncate=false config it is off by more than MISMATCH, as the converted GGUF of the shipped model is."""
    folder, gguf = twins["gpt-oss"]
    request = ("yarn", "--target", "256k")
    new, converted, patched = _both(folder, gguf, tmp_path, request)
    ours, theirs = _contents(new)[0], _contents(converted)[0]
    assert {k: v for k, v in ours.items() if k.startswith("gpt-oss.")} == \
        {k: v for k, v in theirs.items() if k.startswith("gpt-oss.")}
    rope = _rope_overrides(patched)
    assert rope["rope_parameters"]["truncate"] is False
    truncated = {**rope, "rope_parameters": {**rope["rope_parameters"], "truncate": True}}
    cpp = llamacpp_logits(new, TOKENS, n_ctx=N_TOKENS)
    held = relative_diff(cpp, hf_logits(folder, TOKENS, truncated))
    not_held = relative_diff(cpp, hf_logits(folder, TOKENS, rope))
    shipped = relative_diff(llamacpp_logits(gguf, TOKENS, n_ctx=N_TOKENS), hf_logits(folder, TOKENS))
    print(f"gpt-oss yarn: vs truncate=true {held:.2e}, vs truncate=false {not_held:.2e}; shipped GGUF {shipped:.2e}")
    assert held <= TOL and not_held > MISMATCH and shipped > MISMATCH


@converted
def test_refusals_name_why(twins: Any, tmp_path: Path) -> None:
    _, llama = twins["llama-3.1"]
    _, qwen = twins["qwen2.5-yarn"]
    _, phi = twins["phi-3"]
    out = str(tmp_path / "new.gguf")
    assert_usage_error(run("scale", "dynamic", "--target", "256k", "--config", str(llama), "-o", out),
                       "dynamic NTK cannot be written into a GGUF")
    assert_usage_error(run("scale", "llama3", "--target", "256k", "--config", str(qwen), "-o", out),
                       "llama3 cannot be written into a qwen2 GGUF")
    assert_usage_error(run("scale", "ntk", "--target", "256k", "--config", str(phi), "-o", out),
                       "ntk (a new base) cannot be written into a phi3 GGUF")
    assert_usage_error(run("scale", "yarn", "--target", "256k", "--config", str(llama), "--in-place"),
                       "never writes over a GGUF")
    assert_usage_error(run("scale", "yarn", "--target", "256k", "--config", str(llama), "-o", out, "--engine",
                           "vllm"), "writes a new GGUF")
    assert not (tmp_path / "new.gguf").exists()


@converted
def test_a_converted_gguf_reports_its_own_original_length(tmp_path: Path) -> None:
    """A GGUF's rope.scaling.original_context_length is the model's original length: a Phi-3 twin whose original is
    8192 (not Phi-3's 4096) reads back as 8192, from the converter's file and from one posenc wrote."""
    assert CONVERTER is not None
    cfg = _json("tests/fixtures/phi-3-mini-128k.json")
    cfg["original_max_position_embeddings"] = 8192
    folder = save_twin(tiny_twin(cfg), tmp_path / "hf")
    gguf = convert(CONVERTER, folder, tmp_path / "model.gguf")
    for path in (gguf, folder / "config.json"):
        layer = json.loads(ok(run("inspect", str(path), "--json")).stdout)["layers"][0]
        assert layer["original_length"] == 8192, (path, layer["original_length"])


def _built(tmp_path: Path, arch: str, keys: dict[str, Any]) -> Path:
    """A small GGUF of ``arch`` (tests/harness/gguf_files.py): its head keys, then ``keys`` under ``{arch}.``."""
    extra = {"general.architecture": arch, f"{arch}.context_length": 4096, f"{arch}.embedding_length": 256,
             f"{arch}.block_count": 6, f"{arch}.attention.head_count": 2, f"{arch}.attention.key_length": 128,
             f"{arch}.rope.freq_base": 10000.0, **{f"{arch}.{k}": v for k, v in keys.items()}}
    return make_gguf(tmp_path / f"{arch}.gguf", {"token_embd.weight": 64}, extra=extra)


@pytest.mark.parametrize(("arch", "keys", "request_args", "why"), [
    ("falcon", {}, ("yarn", "--target", "16k"), "proven on GGUFs made by llama.cpp's converter; this one is falcon"),
    ("mistral3", {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                  "rope.scaling.original_context_length": 1024, "rope.scaling.yarn_log_multiplier": 1.0},
     ("linear", "--target", "16k"), "linear cannot be written into a mistral3 GGUF of Ministral 3"),
    ("mistral3", {}, ("yarn", "--target", "16k"), "this one has none, so it comes from another Mistral 3 config"),
    ("gemma3", {"attention.sliding_window": 512, "rope.freq_base_swa": 10000.0},
     ("yarn", "--target", "16k", "--attention-factor", "1.3"), "llama.cpp applies rope.scaling.attn_factor to the "
     "sliding-window layers too"),
    ("deepseek2", {"rope.dimension_count": 64},
     ("yarn", "--target", "16k", "--attention-factor", "1.2"), "llama.cpp ties its softmax scale to the cos/sin"),
], ids=["falcon", "ministral3-linear", "mistral-small-3", "gemma3-attention-factor", "deepseek2-attention-factor"])
def test_what_is_not_written_is_refused_with_why(tmp_path: Path, arch: str, keys: dict[str, Any],
                                                 request_args: tuple[str, ...], why: str) -> None:
    gguf = _built(tmp_path, arch, keys)
    out = tmp_path / "new.gguf"
    assert_usage_error(run("scale", *request_args, "--config", str(gguf), "-o", str(out)), why)
    assert not out.exists()
