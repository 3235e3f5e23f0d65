"""posenc's llama.cpp output on GGUFs made by llama.cpp's OWN converter, run in the real llama.cpp against transformers.

Each twin (see converted_harness.py) is a corpus config with its exact rope settings and head dims and tiny
everything else, saved by transformers, converted by ``convert_hf_to_gguf.py`` of the llama-cpp-python 0.3.36 sdist
(found at run time through ``POSENC_LLAMA_CONVERTER``; the tests skip without it) and evaluated on the same 512
token ids by llama.cpp (llama-cpp-python, float32 KV cache) and transformers (float32, eager). What is compared:

* the shipped config: the GGUF with the invocation ``posenc check`` prints for it, against transformers on the
  shipped config;
* every flag set ``posenc scale --config TWIN --engine llama.cpp`` prints for a YaRN extension, on the GGUF
  converted from the shipped config, against transformers on the config ``posenc scale --engine hf`` patches; and
  ``posenc check`` of that patched config prints the same flags.

Tolerance: ``TOL`` = 2e-3, relative (per position, ``|llama.cpp - transformers| / |transformers|`` in L2 over the
vocabulary; the largest from position 1). Measured on two weight seeds per twin: 0.8e-4 to 2.5e-4 for the shipped
configs, 0.8e-4 to 7.3e-4 for the scale flags (the largest: DeepSeek V3 at factor 80); float32 rounding of the
angles and different summation orders, amplified by attention made sharp on purpose. 2e-3 is 2.7x the largest.
A wrong rope setting moves them by far more: ``MISMATCH`` = 0.05 relative (25 x TOL); the two bugs of issue 18
measured 0.35-0.55 (YaRN flags stacked on a Llama 3.1 GGUF's rope_freqs) and 1.5-1.6 (the attn_factor override
posenc printed for DeepSeek V2-Lite/V3).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import ok, run

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from converted_harness import convert, converter_dir, hf_logits, relative_diff, save_twin, tiny_twin  # noqa: E402
from llamacpp_harness import ROPE_SCALING_YARN, SCALING, llamacpp_logits, server_flags_as_kwargs  # noqa: E402

CONVERTER = converter_dir()
pytestmark = [pytest.mark.numeric,
              pytest.mark.skipif(CONVERTER is None, reason="POSENC_LLAMA_CONVERTER does not name llama.cpp's "
                                 "convert_hf_to_gguf.py folder (.ci/run sets it after pip download)")]

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
TOL = 2e-3
MISMATCH = 0.05
N_TOKENS = 512
MAX_CTX = 32768  # a larger --ctx-size only sizes the KV cache for YaRN/linear/none (see llama_kwargs)


def corpus(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return data


def deepseek_v2_lite() -> dict[str, Any]:
    """DeepSeek-V2-Lite's rope (mscale = mscale_all_dim = 0.707, factor 40 over 4096) on the V3 corpus config."""
    cfg = corpus("deepseek-v3")
    return {**cfg, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
            "rope_scaling": {**cfg["rope_scaling"], "mscale": 0.707, "mscale_all_dim": 0.707}}


TWINS = {
    "llama-3.1": lambda: tiny_twin(corpus("llama-3.1-8b-instruct")),
    "llama-3.2": lambda: tiny_twin(corpus("llama-3.2-1b-instruct")),
    "deepseek-v3": lambda: tiny_twin(corpus("deepseek-v3")),
    "deepseek-v2-lite": lambda: tiny_twin(deepseek_v2_lite()),
    "qwen2.5-yarn": lambda: tiny_twin(json.loads((ROOT / "docs" / "examples" /
                                                  "qwen2.5-7b-instruct-yarn.json").read_text())),
    "phi-3-longrope": lambda: tiny_twin(json.loads((ROOT / "tests" / "fixtures" /
                                                    "phi-3-mini-128k.json").read_text())),
    "gemma-3": lambda: tiny_twin(corpus("gemma-3-1b-it")),
    "gemma-3-27b-linear": lambda: tiny_twin(corpus("gemma-3-27b-it")),  # linear x8 on the global layers, as shipped
}
MODELLED = list(TWINS)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (HF folder, converted GGUF), made once per module."""
    assert CONVERTER is not None
    out = {}
    for name, make in TWINS.items():
        folder = save_twin(make(), tmp_path_factory.mktemp(name) / "hf")
        out[name] = folder, convert(CONVERTER, folder, folder.parent / "model.gguf")
    return out


TOKENS = np.random.default_rng(1).integers(0, 128, size=N_TOKENS)


def llama_kwargs(argv: list[str], arch: str) -> dict[str, Any]:
    """llama-server's flags as llama.cpp context parameters (common/arg.cpp), no RoPE arithmetic; ``--ctx-size``
    above MAX_CTX becomes MAX_CTX: with YaRN, linear or no scaling llama.cpp reads n_ctx for nothing but the KV
    cache (its YaRN length is --yarn-orig-ctx or the GGUF's), and the test evaluates 512 tokens."""
    out = server_flags_as_kwargs(argv, arch)
    if out.get("rope_scaling_type", ROPE_SCALING_YARN) in SCALING.values():
        out["n_ctx"] = min(out.get("n_ctx", N_TOKENS), MAX_CTX)
    if not out["kv_overrides"]:
        del out["kv_overrides"]
    return out


def cpp(gguf: Path, argv: list[str], arch: str) -> np.ndarray:
    kwargs = llama_kwargs(argv, arch)
    return llamacpp_logits(gguf, TOKENS, **{"n_ctx": N_TOKENS, **kwargs})


def check_invocation(config: str, max_len: int, tmp: Path) -> list[str]:
    result = run("check", config, "--engines", "llama.cpp", "--max-model-len", str(max_len), "--json")
    (engine,) = json.loads(result.stdout)["engines"]
    assert engine["verdict"] == "same", engine
    invocation: list[str] = engine["invocation"]
    return invocation


def scaled(folder: Path, tmp: Path, *request: str) -> tuple[list[str], dict[str, Any], str, list[str]]:
    """posenc scale on the twin's config.json: its llama.cpp flags, the patched config, that config's path and the
    caveats (stderr lines)."""
    config = str(folder / "config.json")
    out = ok(run("scale", *request, "--config", config, "--engine", "llama.cpp"))
    flags = shlex.split(out.stdout)
    patched_path = tmp / "patched" / "config.json"
    patched_path.parent.mkdir(exist_ok=True)
    ok(run("scale", *request, "--config", config, "--engine", "hf", "-o", str(patched_path)))
    patched = json.loads(patched_path.read_text())
    return flags, patched, str(patched_path), out.stderr.splitlines()


def rope_keys(cfg: dict[str, Any]) -> dict[str, Any]:
    """The rope keys of a patched config, as overrides for the saved one: a key the patch dropped (static NTK drops
    rope_scaling) is None, so the shipped value does not stay."""
    keys = ("rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings")
    return {k: cfg.get(k) for k in keys}


# ------------------------------------------------------------------------------------------------ shipped configs


@pytest.mark.parametrize("name", MODELLED)
def test_the_shipped_config_check_invocation_on_the_converted_gguf(twins: Any, name: str, tmp_path: Path) -> None:
    folder, gguf = twins[name]
    argv = check_invocation(str(folder / "config.json"), 4096, tmp_path)
    # the GGUF itself, read by posenc, gives the same invocation (but for the model's name)
    from_gguf = check_invocation(str(gguf), 4096, tmp_path)
    assert from_gguf[3:] == argv[3:]
    arch = json.loads(ok(run("inspect", str(gguf), "--json")).stdout)["gguf"]["architecture"]
    diff = relative_diff(cpp(gguf, argv, arch), hf_logits(folder, TOKENS))
    assert diff <= TOL, diff


def test_inspect_of_the_converted_gguf_agrees_with_the_config(twins: Any) -> None:
    """Where llama.cpp computes what transformers does, inspect of the GGUF says what inspect of config.json says."""
    for name in TWINS:
        folder, gguf = twins[name]
        from_config = json.loads(ok(run("inspect", str(folder / "config.json"), "--json")).stdout)
        from_gguf = json.loads(ok(run("inspect", str(gguf), "--json")).stdout)
        for a, b in zip(from_config["layers"], from_gguf["layers"], strict=True):
            assert a["rope_type"] == b["rope_type"], name
            assert np.allclose(a["inv_freq"], b["inv_freq"], rtol=1e-6), name
            assert a["attention_factor"] == pytest.approx(b["attention_factor"], rel=1e-6), name
            assert a["logit_multiplier"] == pytest.approx(b["logit_multiplier"], rel=1e-6), name


def test_gemma3_sliding_layers_keep_their_base_unscaled(twins: Any, tmp_path: Path) -> None:
    """Gemma 3 in llama.cpp: the flags turn the global layer (layer 5 of the twin's 6); the sliding layers keep
    rope.freq_base_swa (the converter's, from the config's 10000) unscaled. Flags that scaled every layer would be
    far from transformers: shown by giving the sliding layers' base to the global one too."""
    folder, gguf = twins["gemma-3"]
    meta = json.loads(ok(run("inspect", str(gguf), "--json")).stdout)["gguf"]
    assert meta["architecture"] == "gemma3"
    theirs = hf_logits(folder, TOKENS)
    argv = check_invocation(str(gguf), 4096, tmp_path)
    assert relative_diff(cpp(gguf, argv[3:], "gemma3"), theirs) <= TOL
    one_base = [a if a != "1000000" else "10000" for a in argv[3:]]
    # measured 0.046: one global layer of six, 512 tokens; over 20 times the tolerance
    assert relative_diff(cpp(gguf, one_base, "gemma3"), theirs) > 10 * TOL


def test_a_yarn_attention_factor_reaches_gemma3s_sliding_layers_and_check_says_so(twins: Any, tmp_path: Path) -> None:
    """What the flags cannot express: llama.cpp's attn_factor override multiplies every layer's cos/sin, the sliding
    ones included (YaRN mode, models/gemma3.cpp passes one attn_factor), where transformers scales the global layers
    only. check says differs, with the sliding group's magnitude; the real engine differs from transformers."""
    folder, gguf = twins["gemma-3"]
    request = ("yarn", "--target", "128k", "--attention-factor", "1.3")
    flags, patched, patched_path, _ = scaled(folder, tmp_path, *request)
    result = run("check", patched_path, "--engines", "llama.cpp", "--max-model-len", "131072", "--json")
    (engine,) = json.loads(result.stdout)["engines"]
    assert result.exit_code == 1 and engine["verdict"] == "differs"
    by_group = {g["group"]: g for g in engine["groups"]}
    assert by_group["full_attention"]["same"]
    sliding = by_group["sliding_attention"]
    assert sliding["inv_freq_rel_diff"] == 0 and sliding["attention_factor"][0] == 1.0
    assert sliding["attention_factor"][1] == pytest.approx(1.3 / (0.1 * np.log(4.0) + 1), rel=1e-9)
    diff = relative_diff(cpp(gguf, flags, "gemma3"), hf_logits(folder, TOKENS, rope_keys(patched)))
    assert diff > 10 * TOL, diff  # measured 0.032 (the sliding layers' cos/sin x1.142 where transformers has x1)


# --------------------------------------------------------------------------------------------- scaled: YaRN flags


@pytest.mark.parametrize(("name", "request_args"), [
    ("deepseek-v3", ("yarn", "--target", "320k")),
    ("deepseek-v2-lite", ("yarn", "--target", "320k")),
    ("deepseek-v2-lite", ("yarn", "--target", "320k", "--attention-factor", "1.1")),
    ("qwen2.5-yarn", ("yarn", "--target", "256k")),
    ("qwen2.5-yarn", ("yarn", "--target", "256k", "--attention-factor", "1.0")),
    ("qwen2.5-yarn", ("linear", "--target", "256k")),
    ("qwen2.5-yarn", ("ntk", "--target", "256k")),
    ("deepseek-v3", ("linear", "--target", "320k")),
    ("deepseek-v2-lite", ("ntk", "--target", "320k")),
    ("gemma-3", ("yarn", "--target", "128k")),
    ("gemma-3", ("linear", "--target", "256k")),
    ("gemma-3-27b-linear", ("yarn", "--target", "256k")),
], ids=["deepseek-v3", "deepseek-v2-lite", "deepseek-v2-lite-attention-factor", "qwen2.5", "qwen2.5-attention-1",
        "qwen2.5-linear", "qwen2.5-ntk", "deepseek-v3-linear", "deepseek-v2-lite-ntk", "gemma-3-yarn",
        "gemma-3-linear", "gemma-3-27b-yarn"])
def test_scale_flags_on_the_converted_gguf_compute_what_transformers_does(twins: Any, tmp_path: Path, name: str,
                                                                         request_args: tuple[str, ...]) -> None:
    folder, gguf = twins[name]
    flags, patched, patched_path, _ = scaled(folder, tmp_path, *request_args)
    arch = json.loads(ok(run("inspect", str(gguf), "--json")).stdout)["gguf"]["architecture"]
    theirs = hf_logits(folder, TOKENS, rope_keys(patched))
    diff = relative_diff(cpp(gguf, flags, arch), theirs)
    assert diff <= TOL, (flags, diff)
    # check on the patched config prints the same rope flags, and says same only because they are; scale's add
    # llama-server's context_length override where the shipped model's GGUF would cap the slot, which a GGUF
    # converted from the patched config (context_length = the new window) does not need
    ctx = flags[flags.index("--ctx-size") + 1]
    argv = check_invocation(patched_path, int(ctx), tmp_path)
    override = ["--override-kv", f"{arch}.context_length=int:{ctx}"]
    rope_flags = flags[:-2] if flags[-2:] == override else flags
    assert argv[3:] == rope_flags, (argv, flags)


def test_the_old_deepseek2_override_was_wrong_and_is_gone(twins: Any, tmp_path: Path) -> None:
    """Before: posenc added ``--override-kv deepseek2.rope.scaling.attn_factor=1/(0.1 ln 80 + 1)`` for DeepSeek.
    That override, on the converted GGUF, moves llama.cpp far from transformers."""
    folder, gguf = twins["deepseek-v2-lite"]
    flags, patched, _, _ = scaled(folder, tmp_path, "yarn", "--target", "320k")
    assert not any(a.startswith("deepseek2.rope.scaling.attn_factor") for a in flags)
    old = [*flags, "--override-kv", f"deepseek2.rope.scaling.attn_factor=float:{1 / (0.1 * float(np.log(80)) + 1)!r}"]
    theirs = hf_logits(folder, TOKENS, rope_keys(patched))
    assert relative_diff(cpp(gguf, old, "deepseek2"), theirs) > MISMATCH


# ------------------------------------------------------------------------------ Llama 3.x: the rope_freqs tensor


def test_yarn_flags_on_a_llama3_gguf_stack_and_scale_says_so(twins: Any, tmp_path: Path) -> None:
    folder, gguf = twins["llama-3.1"]
    flags, patched, patched_path, caveats = scaled(folder, tmp_path, "yarn", "--target", "256k")
    theirs = hf_logits(folder, TOKENS, rope_keys(patched))
    # on the GGUF converted from the shipped config the flags stack on rope_freqs: far from transformers ...
    stacked = relative_diff(cpp(gguf, flags, "llama"), theirs)
    assert stacked > MISMATCH, stacked
    assert any("rope_freqs tensor" in c and "convert a config patched" in c for c in caveats), caveats
    # ... and the GGUF itself is refused, with the same reason
    refused = run("scale", "yarn", "--target", "256k", "--config", str(gguf), "--engine", "llama.cpp")
    assert refused.exit_code == 2 and "rope_freqs tensor" in refused.stderr
    # on the GGUF converted from the patched config (no rope_freqs) the same flags are right
    assert CONVERTER is not None
    reconverted_dir = save_twin(json.loads(Path(patched_path).read_text()), tmp_path / "re", seed=0)
    # the same weights: save_twin draws them from the seed, and the patched config changes only the rope
    reconverted = convert(CONVERTER, reconverted_dir, tmp_path / "re.gguf")
    assert not json.loads(ok(run("inspect", str(reconverted), "--json")).stdout)["gguf"]["has_rope_freqs"]
    assert relative_diff(cpp(reconverted, flags, "llama"), theirs) <= TOL
    argv = check_invocation(patched_path, 262144, tmp_path)
    assert argv[3:] == flags
