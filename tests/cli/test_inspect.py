"""`posenc inspect` through the real CLI on config.json shapes seen in the wild (written into tmp_path).

Expected numbers come from the published formulas (float64 here; posenc computes in float32 like transformers,
hence the 2e-6 relative tolerance).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json

pytestmark = pytest.mark.numeric

RTOL = 2e-6
TWO_PI = 2 * math.pi


def inspect_json(path: str, *extra: str) -> dict[str, Any]:
    return json.loads(ok(run("inspect", path, "--json", *extra)).stdout)


def default_inv(theta: float, d: int) -> list[float]:
    return [theta ** (-(2 * i) / d) for i in range(d // 2)]


def assert_close(actual: list[float], expected: list[float], rtol: float = RTOL) -> None:
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a == pytest.approx(e, rel=rtol), (i, a, e)


LLAMA31: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "vocab_size": 128256,
}


def llama3_expected(theta: float, d: int, s: float, lf: float, hf: float, original: int) -> list[float]:
    out = []
    for f in default_inv(theta, d):
        wl = TWO_PI / f
        if wl < original / hf:
            out.append(f)
        elif wl > original / lf:
            out.append(f / s)
        else:
            smooth = (original / wl - lf) / (hf - lf)
            out.append((1 - smooth) * f / s + smooth * f)
    return out


# ---------------------------------------------------------------- shapes of config.json

def test_legacy_rope_scaling_llama31_json(tmp_path: Path) -> None:
    r = inspect_json(write_json(tmp_path, LLAMA31))
    assert r["family"] == "rope"
    assert r["rope_type"] == "llama3"
    assert r["rope_theta"] == 500000.0
    assert r["rotary_dim"] == 128 and r["head_dim"] == 128
    assert r["attention_factor"] == 1.0
    assert len(r["inv_freq"]) == 64
    assert_close(r["inv_freq"], llama3_expected(500000.0, 128, 8.0, 1.0, 4.0, 8192))
    # the window the checkpoint serves, and the length its llama3 scaling refers to, kept apart
    assert r["native_window"] == 131072
    assert r["original_length"] == 8192
    assert r["bands"] == {"kept": 29, "blended": 6, "divided": 29}
    assert len(r["layers"]) == 1


def test_llama31_human_output(tmp_path: Path) -> None:
    result = ok(run("inspect", write_json(tmp_path, LLAMA31)))
    out = result.stdout
    assert "llama3" in out
    assert "500000" in out
    assert "29 kept" in out and "6 blended" in out and "29 divided" in out
    assert "native window: 131,072" in out and "original length: 8,192" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_v5_rope_parameters_theta_inside(tmp_path: Path) -> None:
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 131072,
           "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                               "rope_theta": 1000000.0}}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rope_type"] == "yarn"
    assert r["rope_theta"] == 1e6
    assert r["rotary_dim"] == 128
    assert r["attention_factor"] == pytest.approx(0.1 * math.log(4.0) + 1, rel=1e-12)
    assert r["logit_multiplier"] == pytest.approx(r["attention_factor"] ** 2, rel=1e-12)
    # YaRN: high-frequency pairs untouched, low-frequency pairs divided by the factor
    base = default_inv(1e6, 128)
    assert r["inv_freq"][0] == pytest.approx(base[0], rel=RTOL)
    assert r["inv_freq"][-1] == pytest.approx(base[-1] / 4.0, rel=RTOL)
    assert r["original_length"] == 32768 and r["native_window"] == 131072


def test_v5_theta_inside_wins_over_top_level(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 8192,
           "rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rope_theta"] == 250000.0
    assert_close(r["inv_freq"], default_inv(250000.0, 128))


def test_legacy_rope_scaling_wins_over_rope_parameters(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 8192,
           "rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rope_type"] == "linear"


def test_type_instead_of_rope_type(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192,
           "rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rope_type"] == "linear"
    assert_close(r["inv_freq"], [f / 2.0 for f in default_inv(10000.0, 128)])
    # linear scaling names no original length; the window is the length the file names (posenc_cli.rope.windows)
    assert r["native_window"] == 8192 and r["original_length"] is None


def _phi3(rope_scaling: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
            "rope_theta": 10000.0, "rope_scaling": rope_scaling, **top}


SHORT = [1.0 + 0.01 * i for i in range(48)]
LONG = [1.0 + 0.5 * i for i in range(48)]


def test_legacy_su_is_longrope(tmp_path: Path) -> None:
    cfg = _phi3({"type": "su", "short_factor": SHORT, "long_factor": LONG}, original_max_position_embeddings=4096)
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rope_type"] == "longrope"
    assert r["rotary_dim"] == 96 and len(r["inv_freq"]) == 48
    assert r["original_length"] == 4096
    assert_close(r["inv_freq"], [f / s for f, s in zip(default_inv(10000.0, 96), SHORT, strict=True)])
    # no factor in the dict: transformers uses max_position_embeddings / original
    assert r["attention_factor"] == pytest.approx(math.sqrt(1 + math.log(131072 / 4096) / math.log(4096)), rel=1e-12)


def test_phi3_top_level_original_wins(tmp_path: Path) -> None:
    cfg = _phi3({"type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                 "original_max_position_embeddings": 2048}, original_max_position_embeddings=4096)
    path = write_json(tmp_path, cfg)
    r = inspect_json(path)
    assert r["original_length"] == 4096
    # 3000 is above the dict's 2048 but not above the top-level 4096: still the short factors
    at3000 = inspect_json(path, "--seq-len", "3000")
    assert_close(at3000["inv_freq"], [f / s for f, s in zip(default_inv(10000.0, 96), SHORT, strict=True)])
    at5000 = inspect_json(path, "--seq-len", "5000")
    assert_close(at5000["inv_freq"], [f / s for f, s in zip(default_inv(10000.0, 96), LONG, strict=True)])


def test_longrope_switches_to_long_factors_above_original(tmp_path: Path) -> None:
    cfg = _phi3({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG},
                original_max_position_embeddings=4096)
    path = write_json(tmp_path, cfg)
    at_start = inspect_json(path)
    at_original = inspect_json(path, "--seq-len", "4096")
    above = inspect_json(path, "--seq-len", "4097")
    assert at_original["inv_freq"] == at_start["inv_freq"]  # L = L0 still short
    assert above["inv_freq"] != at_start["inv_freq"]
    assert_close(above["inv_freq"], [f / s for f, s in zip(default_inv(10000.0, 96), LONG, strict=True)])
    assert above["attention_factor"] == at_start["attention_factor"]  # fixed at init in transformers
    human = ok(run("inspect", path, "--seq-len", "128k")).stdout
    assert "long factors" in human


def test_head_dim_present_vs_derived(tmp_path: Path) -> None:
    base = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "max_position_embeddings": 40960,
            "rope_theta": 1000000.0, "rope_scaling": None}
    derived = inspect_json(write_json(tmp_path, base, "derived.json"))
    assert derived["head_dim"] == 64 and derived["rotary_dim"] == 64
    assert_close(derived["inv_freq"], default_inv(1e6, 64))
    # Qwen3Config has a class default head_dim of 128: a file without one gets it, not hidden_size // heads
    qwen3 = inspect_json(write_json(tmp_path, {**base, "model_type": "qwen3"}, "qwen3.json"))
    assert qwen3["head_dim"] == 128 and qwen3["rotary_dim"] == 128
    explicit = inspect_json(write_json(tmp_path, {**base, "head_dim": 128}, "explicit.json"))
    assert explicit["head_dim"] == 128 and explicit["rotary_dim"] == 128
    assert_close(explicit["inv_freq"], default_inv(1e6, 128))


@pytest.mark.parametrize("where", ["top", "inside"])
def test_partial_rotary_factor(tmp_path: Path, where: str) -> None:
    cfg: dict[str, Any] = {"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32,
                           "max_position_embeddings": 2048}
    if where == "top":
        cfg.update(rope_theta=10000.0, partial_rotary_factor=0.4)
    else:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["head_dim"] == 80
    assert r["rotary_dim"] == 32
    assert len(r["inv_freq"]) == 16
    assert_close(r["inv_freq"], default_inv(10000.0, 32))  # exponent over the rotary dim, not head_dim


def test_gpt_neox_rotary_pct(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 2048,
           "rotary_pct": 0.25, "rotary_emb_base": 10000}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["rotary_dim"] == 32
    assert r["rope_theta"] == 10000.0


def test_nested_per_layer_types(tmp_path: Path) -> None:
    cfg = {"model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256,
           "max_position_embeddings": 131072,
           "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    path = write_json(tmp_path, cfg)
    r = inspect_json(path)
    layers = {layer["layer"]: layer for layer in r["layers"]}
    assert set(layers) == {"full_attention", "sliding_attention"}
    full, sliding = layers["full_attention"], layers["sliding_attention"]
    assert full["rope_type"] == "linear" and full["rope_theta"] == 1e6
    assert sliding["rope_type"] == "default" and sliding["rope_theta"] == 1e4
    assert_close(full["inv_freq"], [f / 8.0 for f in default_inv(1e6, 256)])
    assert_close(sliding["inv_freq"], default_inv(1e4, 256))
    human = ok(run("inspect", path)).stdout
    assert "full_attention" in human and "sliding_attention" in human


def test_json_required_fields(tmp_path: Path) -> None:
    r = inspect_json(write_json(tmp_path, LLAMA31))
    for key in ("rope_type", "rope_theta", "rotary_dim", "inv_freq", "attention_factor"):
        assert key in r
    assert all(isinstance(v, float) for v in r["inv_freq"])
    assert isinstance(r["rope_theta"], float) and isinstance(r["attention_factor"], float)
    assert isinstance(r["rotary_dim"], int)


def test_yarn_mscale_pair_and_explicit_attention_factor(tmp_path: Path) -> None:
    ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64,
          "max_position_embeddings": 163840, "rope_theta": 10000,
          "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                           "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}
    r = inspect_json(write_json(tmp_path, ds, "ds.json"))
    assert r["rope_type"] == "yarn" and r["rotary_dim"] == 64
    assert r["attention_factor"] == pytest.approx(1.0, rel=1e-12)  # mscale / mscale_all_dim cancel
    explicit = {**ds, "rope_scaling": {**ds["rope_scaling"], "attention_factor": 1.25}}
    assert inspect_json(write_json(tmp_path, explicit, "explicit.json"))["attention_factor"] == 1.25


# ---------------------------------------------------------------- length-dependent methods

def _dynamic_cfg() -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "max_position_embeddings": 4096,
            "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}


@pytest.mark.parametrize("seq_len", [8192, 16384, 100000])
def test_dynamic_grows_theta_above_max(tmp_path: Path, seq_len: int) -> None:
    path = write_json(tmp_path, _dynamic_cfg())
    theta, s, lmax, d = 10000.0, 2.0, 4096, 64
    expected_theta = theta * ((s * seq_len / lmax) - (s - 1)) ** (d / (d - 2))
    r = inspect_json(path, "--seq-len", str(seq_len))
    assert r["details"]["effective_theta"] == pytest.approx(expected_theta, rel=1e-12)
    assert expected_theta > theta
    assert_close(r["inv_freq"], default_inv(expected_theta, d))
    assert r["inv_freq"][-1] < default_inv(theta, d)[-1]  # lower frequencies than the trained base


def test_dynamic_below_max_is_unchanged(tmp_path: Path) -> None:
    path = write_json(tmp_path, _dynamic_cfg())
    at_init = inspect_json(path)
    below = inspect_json(path, "--seq-len", "2k")
    assert below["inv_freq"] == at_init["inv_freq"]
    assert_close(below["inv_freq"], default_inv(10000.0, 64))
    assert below["details"]["effective_theta"] == 10000.0


def test_dynamic_human_output_mentions_effective_theta(tmp_path: Path) -> None:
    out = ok(run("inspect", write_json(tmp_path, _dynamic_cfg()), "--seq-len", "16k")).stdout
    assert "effective theta" in out
    expected = 10000.0 * ((2.0 * 16384 / 4096) - 1.0) ** (64 / 62)
    assert f"{expected:,.1f}" in out


# ---------------------------------------------------------------- stdin

def test_stdin(tmp_path: Path) -> None:
    from_file = inspect_json(write_json(tmp_path, LLAMA31))
    result = ok(run("inspect", "-", "--json", input=json.dumps(LLAMA31)))
    from_stdin = json.loads(result.stdout)
    assert from_stdin.pop("source") == {"kind": "stdin", "label": "<stdin>", "path": None}
    assert from_file.pop("source")["kind"] == "file"
    assert from_stdin == from_file


def test_stdin_malformed() -> None:
    assert_usage_error(run("inspect", "-", input="{not json"), "stdin", "JSON")


# ---------------------------------------------------------------- models without RoPE

def alibi_slopes_pow2(n: int) -> list[float]:
    return [2 ** (-8 * (h + 1) / n) for h in range(n)]


@pytest.mark.parametrize(
    ("cfg", "heads"),
    [
        ({"model_type": "bloom", "n_head": 16, "hidden_size": 1024, "n_layer": 24}, 16),
        ({"model_type": "mpt", "n_heads": 32, "d_model": 4096, "max_seq_len": 2048,
          "attn_config": {"alibi": True, "alibi_bias_max": 8}}, 32),
    ],
    ids=["bloom", "mpt"],
)
def test_alibi_models(tmp_path: Path, cfg: dict[str, Any], heads: int) -> None:
    path = write_json(tmp_path, cfg)
    r = inspect_json(path)
    assert r["family"] == "alibi"
    assert r["num_heads"] == heads
    assert_close(r["alibi_slopes"], alibi_slopes_pow2(heads), rtol=1e-12)
    assert "inv_freq" not in r
    human = ok(run("inspect", path))
    assert "alibi" in human.stdout.lower()
    assert "slope" in human.stdout.lower()


def test_alibi_non_power_of_two_heads(tmp_path: Path) -> None:
    r = inspect_json(write_json(tmp_path, {"model_type": "bloom", "n_head": 6, "hidden_size": 768}))
    assert_close(r["alibi_slopes"], [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125], rtol=1e-12)


def test_mpt_without_alibi_is_not_alibi(tmp_path: Path) -> None:
    cfg = {"model_type": "mpt", "n_heads": 32, "d_model": 4096, "max_seq_len": 2048, "attn_config": {"alibi": False}}
    r = inspect_json(write_json(tmp_path, cfg))
    assert r["family"] != "alibi"


def test_learned_gpt2(tmp_path: Path) -> None:
    path = write_json(tmp_path, {"model_type": "gpt2", "n_head": 12, "n_embd": 768, "n_positions": 1024, "n_layer": 12})
    r = inspect_json(path)
    assert r["family"] == "learned"
    assert r["max_position_embeddings"] == 1024
    human = ok(run("inspect", path)).stdout
    assert "learned" in human
    assert "1024" in human


# ---------------------------------------------------------------- bad input

def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert_usage_error(run("inspect", str(missing)), str(missing))


def test_directory(tmp_path: Path) -> None:
    assert_usage_error(run("inspect", str(tmp_path)), str(tmp_path), "directory")


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n "rope_theta": }')
    assert_usage_error(run("inspect", str(path)), str(path), "JSON", "line 2")


def test_json_array(tmp_path: Path) -> None:
    path = write_json(tmp_path, [LLAMA31])
    assert_usage_error(run("inspect", path), path, "object")


def test_bad_seq_len(tmp_path: Path) -> None:
    assert_usage_error(run("inspect", write_json(tmp_path, LLAMA31), "--seq-len", "abc"), "--seq-len", "abc")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00{")
    assert_usage_error(run("inspect", str(path)), str(path))


_LLAMA_BASE: dict[str, Any] = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                               "max_position_embeddings": 8192, "rope_theta": 10000.0}


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        ({"rope_scaling": {"rope_type": "linear"}}, ["linear", "factor"]),
        ({"rope_scaling": {"rope_type": "dynamic"}}, ["dynamic", "factor"]),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ["llama3", "low_freq_factor"]),
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 64}}, ["longrope", "long_factor"]),
        ({"rope_scaling": {"rope_type": "yarn", "factor": "x"}}, ["factor", "'x'"]),
        ({"rope_theta": "abc"}, ["rope_theta", "'abc'"]),
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1, "a"], "long_factor": [1]}},
         ["short_factor"]),
        ({"head_dim": "abc"}, ["head_dim", "'abc'"]),
        ({"partial_rotary_factor": "half"}, ["partial_rotary_factor", "'half'"]),
        ({"rope_parameters": {"full_attention": {"rope_type": "linear"}, "sliding_attention": {}}},
         ["full_attention", "factor"]),
        ({"rope_scaling": {"rope_type": "ntk", "factor": 2.0}}, ["ntk"]),
    ],
    ids=["linear-no-factor", "dynamic-no-factor", "llama3-incomplete", "longrope-no-long", "factor-string",
         "theta-string", "factor-list-string", "head-dim-string", "prf-string", "nested-incomplete",
         "unknown-rope-type"],
)
def test_malformed_rope_parameters_are_one_line_errors(tmp_path: Path, extra: dict[str, Any],
                                                       needles: list[str]) -> None:
    assert_usage_error(run("inspect", write_json(tmp_path, {**_LLAMA_BASE, **extra}), "--json"), *needles)


# ---------------------------------------------------------------- sources: folders, GGUF, Hub ids


def test_model_folder_reads_its_config(tmp_path: Path) -> None:
    write_json(tmp_path, LLAMA31)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert inspect_json(str(tmp_path))["rope_type"] == "llama3"


def test_gguf_file_is_read_with_llama_cpp_meaning() -> None:
    r = inspect_json(str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "llama-3.1-8b.gguf"))
    assert r["source"]["kind"] == "gguf" and r["gguf"]["has_rope_freqs"] is True
    assert r["rope_theta"] == 500000.0 and r["rotary_dim"] == 128 and r["native_window"] == 131072
    assert any("rope_freqs" in n for n in r["notes"])


SOURCE_ERRORS = [
    ("folder without config.json", lambda p: str(p), "no config.json"),
    ("truncated GGUF", lambda p: _truncated_gguf(p), "not a readable GGUF"),
    ("not a GGUF", lambda p: _write(p / "x.gguf", b"not a gguf at all"), "not a readable GGUF"),
    ("text_config not an object", lambda p: write_json(p, {"model_type": "llava", "text_config": [1]}),
     "text_config must be a JSON object"),
]


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _truncated_gguf(folder: Path) -> str:
    whole = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "llama-3.1-8b.gguf").read_bytes()
    return _write(folder / "cut.gguf", whole[: len(whole) // 2])


@pytest.mark.parametrize(("name", "make", "needle"), SOURCE_ERRORS, ids=[c[0] for c in SOURCE_ERRORS])
def test_bad_sources_are_one_line(tmp_path: Path, name: str, make: Any, needle: str) -> None:
    assert_usage_error(run("inspect", make(tmp_path)), needle)


def test_hub_id_offline_and_uncached_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    proc = subprocess.run([sys.executable, "-m", "posenc_cli", "inspect", "someone/not-cached"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "someone/not-cached" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr


def test_hub_cache_in_the_repository_reads_offline() -> None:
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(root / "docs" / "hub-cache"))
    proc = subprocess.run([sys.executable, "-m", "posenc_cli", "inspect", "Qwen/Qwen2.5-7B-Instruct", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["source"]["kind"] == "hub" and r["rope_theta"] == 1e6
    assert r == {**inspect_json(str(root / "tests" / "corpus" / "qwen2.5-7b-instruct.json")), "source": r["source"]}


def test_nemotron_nas_blocks_without_attention_have_no_rope() -> None:
    """DeciLM / Nemotron-NAS removes attention from some blocks (block_configs[i].attention.no_op)."""
    path = Path(__file__).resolve().parents[1] / "corpus" / "llama-3.3-nemotron-super-49b-v1.json"
    cfg = json.loads(path.read_text())
    r = inspect_json(str(path))
    removed = [i for i, b in enumerate(cfg["block_configs"]) if b["attention"]["no_op"]]
    assert [g["layers"] for g in r["no_rope"]] == [removed] and len(removed) == 31
    assert sorted(r["layers"][0]["layers"]) == sorted(set(range(80)) - set(removed))


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "corpus").glob("*.json")),
                         ids=lambda p: p.stem)
def test_the_text_report_never_prints_none(path: Path) -> None:
    """Python's None is not an answer: a value a config does not give is said in words (Phi-3's length-dependent
    rope without --seq-len printed 'at seq_len None'; MiniCPM3's missing model_type 'model_type: None')."""
    result = run("inspect", str(path))
    assert result.exit_code in (0, 2), result.stdout
    assert "None" not in result.stdout


def test_inspect_says_the_trained_length_beside_a_training_free_window() -> None:
    """A card-patched Qwen serves 128k and was trained at 32k: the text says both, the JSON has trained_length; the
    file as shipped is trained at its window and says nothing more."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    corpus = Path(__file__).resolve().parents[1] / "corpus"
    card = str(examples / "qwen2.5-7b-instruct-card-yarn.json")
    assert "   trained length: 32,768; serves 128k with yarn x4 (training-free)" in ok(run("inspect", card)).stdout
    patched = json.loads(ok(run("inspect", card, "--json")).stdout)
    assert (patched["trained_length"], patched["layers"][0]["native_window"]) == (32768, 131072)
    shipped = json.loads(ok(run("inspect", str(corpus / "qwen2.5-7b-instruct.json"), "--json")).stdout)
    assert (shipped["trained_length"], shipped["serving"]) == (32768, None)
    assert "trained length" not in ok(run("inspect", str(corpus / "qwen2.5-7b-instruct.json"))).stdout
