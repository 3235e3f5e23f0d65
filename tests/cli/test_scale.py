"""`posenc scale` through the real CLI: output shapes per format, derivations, explain table, config patching,
atomic writes and strict validation (one `error:` line, exit 2).

Expected numbers are computed here from the published formulas, never by calling posenc's own math.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_could_not_run, assert_usage_error, ok, run, write_json
from typer.testing import Result

pytestmark = pytest.mark.numeric

TWO_PI = 2 * math.pi


def scale_json(*args: str) -> tuple[dict[str, Any], Result]:
    result = ok(run("scale", *args))
    return json.loads(result.stdout), result  # stdout must be the JSON and nothing else


# ---------------------------------------------------------------- per-method output, hf / hf-v5 / vllm

D_LONG = 64  # head dim for longrope cases: 32 factors per list
SHORT = [1.0 + i / 64 for i in range(D_LONG // 2)]
LONG = [1.0 + i / 8 for i in range(D_LONG // 2)]

LENGTHS = ("--original-max", "32k", "--target", "128k", "--theta", "1e6")
METHOD_ARGS: dict[str, list[str]] = {
    "linear": [*LENGTHS, "--head-dim", "128"],
    "ntk": [*LENGTHS, "--head-dim", "128"],
    "dynamic": [*LENGTHS, "--head-dim", "128"],
    "yarn": [*LENGTHS, "--head-dim", "128"],
    "longrope": [*LENGTHS, "--head-dim", str(D_LONG), "--short-factor", json.dumps(SHORT),
                 "--long-factor", json.dumps(LONG)],
    "llama3": [*LENGTHS, "--head-dim", "128"],
}
# what rope_scaling must hold (beside rope_type) for 32k -> 128k
EXPECTED_SCALING: dict[str, dict[str, Any] | None] = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "ntk": None,
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "longrope": {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 32768,
                 "short_factor": SHORT, "long_factor": LONG},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32768},
}


def _expected_max(method: str) -> int:
    return 32768 if method == "dynamic" else 131072


def _assert_floats(obj: Any, path: str = "") -> None:
    """Every factor-like and theta value is a JSON float (4.0, never 4); lengths stay ints."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("factor", "rope_theta", "low_freq_factor", "high_freq_factor", "attention_factor",
                     "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "partial_rotary_factor"):
                assert type(v) is float, (path + k, v)
            elif k in ("original_max_position_embeddings", "max_position_embeddings"):
                assert type(v) is int, (path + k, v)
            elif k in ("short_factor", "long_factor"):
                assert all(type(x) is float for x in v), (path + k, v)
            else:
                _assert_floats(v, path + k + ".")


@pytest.mark.parametrize("method", list(METHOD_ARGS))
def test_hf_format_per_method(method: str) -> None:
    out, result = scale_json(method, *METHOD_ARGS[method])
    assert set(out) == {"rope_theta", "rope_scaling", "max_position_embeddings"}
    assert out["max_position_embeddings"] == _expected_max(method)
    assert out["rope_scaling"] == EXPECTED_SCALING[method]
    if method == "ntk":
        assert out["rope_theta"] == pytest.approx(1e6 * 4 ** (128 / 126), rel=1e-12)
    else:
        assert out["rope_theta"] == 1e6
        assert '"factor": 4.0' in result.stdout  # written as a float, not 4
    _assert_floats(out)
    assert result.stdout.startswith("{") and result.stdout.rstrip().endswith("}")


@pytest.mark.parametrize("method", list(METHOD_ARGS))
def test_hf_v5_format_per_method(method: str) -> None:
    v5, _ = scale_json(method, *METHOD_ARGS[method], "--engine", "hf-v5")
    legacy, _ = scale_json(method, *METHOD_ARGS[method], "--engine", "hf")
    assert set(v5) == {"rope_parameters", "max_position_embeddings"}  # no top-level rope_theta / rope_scaling
    rp = v5["rope_parameters"]
    assert rp["rope_theta"] == legacy["rope_theta"]
    assert v5["max_position_embeddings"] == legacy["max_position_embeddings"]
    rest = {k: v for k, v in rp.items() if k != "rope_theta"}
    if method == "ntk":
        assert rest == {"rope_type": "default"}
    else:
        assert rest == legacy["rope_scaling"]
    _assert_floats(v5)


@pytest.mark.parametrize("method", list(METHOD_ARGS))
def test_vllm_format_per_method(method: str) -> None:
    result = ok(run("scale", method, *METHOD_ARGS[method], "--engine", "vllm"))
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    argv = shlex.split(lines[0])
    assert argv[:3] == ["vllm", "serve", "MODEL"]
    overrides = json.loads(argv[argv.index("--hf-overrides") + 1])
    rp = overrides["rope_parameters"]
    assert "rope_theta" in rp  # vLLM replaces the whole dict: theta must travel inside it
    legacy, _ = scale_json(method, *METHOD_ARGS[method])
    assert rp["rope_theta"] == legacy["rope_theta"]
    assert rp["rope_type"] == ("default" if method == "ntk" else method)
    assert int(argv[argv.index("--max-model-len") + 1]) == 131072


def test_vllm_model_name_is_used() -> None:
    result = ok(run("scale", "yarn", *METHOD_ARGS["yarn"], "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct"))
    argv = shlex.split(result.stdout)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]


def test_notes_go_to_stderr_not_stdout() -> None:
    # neither --theta nor --head-dim: the defaults are announced, on stderr only
    out, result = scale_json("yarn", "--original-max", "4k", "--factor", "2")
    assert "not given" in result.stderr
    assert out["rope_theta"] == 10000.0
    assert "note" not in result.stdout


def test_partial_rotary_factor_is_reported() -> None:
    out, _ = scale_json("linear", "--original-max", "4k", "--factor", "2", "--head-dim", "128",
                        "--partial-rotary-factor", "0.5", "--theta", "1e4")
    assert out["partial_rotary_factor"] == 0.5
    v5, _ = scale_json("linear", "--original-max", "4k", "--factor", "2", "--head-dim", "128",
                       "--partial-rotary-factor", "0.5", "--theta", "1e4", "--engine", "hf-v5")
    assert v5["rope_parameters"]["partial_rotary_factor"] == 0.5


def test_yarn_options_are_written() -> None:
    out, _ = scale_json("yarn", *METHOD_ARGS["yarn"], "--beta-fast", "16", "--beta-slow", "2", "--no-truncate",
                        "--mscale", "1", "--mscale-all-dim", "1")
    rs = out["rope_scaling"]
    assert rs["beta_fast"] == 16.0 and rs["beta_slow"] == 2.0
    assert rs["truncate"] is False
    assert rs["mscale"] == 1.0 and rs["mscale_all_dim"] == 1.0
    _assert_floats(out)


def test_longrope_factor_list_from_file(tmp_path: Path) -> None:
    f = tmp_path / "long.json"
    f.write_text(json.dumps(LONG))
    out, _ = scale_json("longrope", *LENGTHS, "--head-dim", str(D_LONG), "--short-factor", json.dumps(SHORT),
                        "--long-factor", f"@{f}")
    assert out["rope_scaling"]["long_factor"] == LONG


# ---------------------------------------------------------------- scale derivation

def test_factor_derived_from_lengths() -> None:
    out, _ = scale_json("linear", "--original-max", "32k", "--target", "128k", "--theta", "1e4", "--head-dim", "64")
    assert out["rope_scaling"]["factor"] == 4.0
    assert out["max_position_embeddings"] == 131072


def test_target_derived_from_factor() -> None:
    out, _ = scale_json("yarn", "--factor", "4", "--original-max", "32k", "--theta", "1e4", "--head-dim", "64")
    assert out["max_position_embeddings"] == 131072
    assert out["rope_scaling"]["factor"] == 4.0
    assert out["rope_scaling"]["original_max_position_embeddings"] == 32768


def test_length_shorthand_k_is_1024_and_M_is_1024_squared() -> None:
    out, _ = scale_json("yarn", "--original-max", "256k", "--target", "1M", "--theta", "1e4", "--head-dim", "64")
    assert out["rope_scaling"]["original_max_position_embeddings"] == 262144
    assert out["max_position_embeddings"] == 1048576
    assert out["rope_scaling"]["factor"] == 4.0


def test_non_integer_factor() -> None:
    out, _ = scale_json("linear", "--original-max", "4096", "--target", "10240", "--theta", "1e4", "--head-dim", "64")
    assert out["rope_scaling"]["factor"] == 2.5


def test_factor_and_target_disagree() -> None:
    assert_usage_error(run("scale", "yarn", "--factor", "3", "--original-max", "32k", "--target", "128k",
                           "--theta", "1e4", "--head-dim", "64"), "--factor 3")


def test_factor_and_target_agreeing_is_fine() -> None:
    out, _ = scale_json("yarn", "--factor", "4", "--original-max", "32k", "--target", "128k", "--theta", "1e4",
                        "--head-dim", "64")
    assert out["max_position_embeddings"] == 131072


# ---------------------------------------------------------------- static NTK

@pytest.mark.parametrize(
    ("head_dim", "prf", "theta", "factor"),
    [(128, None, 1e4, 4.0), (128, 0.5, 5e5, 8.0), (80, 0.4, 1e4, 2.5), (64, None, 1e6, 16.0)],
)
def test_ntk_theta_formula(head_dim: int, prf: float | None, theta: float, factor: float) -> None:
    args = ["ntk", "--original-max", "4096", "--factor", repr(factor), "--theta", repr(theta),
            "--head-dim", str(head_dim), "--fine-tuned"]
    if prf is not None:
        args += ["--partial-rotary-factor", repr(prf)]
    out, _ = scale_json(*args)
    d = int(head_dim * (prf or 1.0))
    assert out["rope_theta"] == pytest.approx(theta * factor ** (d / (d - 2)), rel=1e-12)
    assert out["rope_theta"] > theta
    assert out["rope_scaling"] is None
    assert out["max_position_embeddings"] == int(4096 * factor)


# ---------------------------------------------------------------- llama.cpp

def _llama_cpp(*args: str) -> list[str]:
    result = ok(run("scale", *args, "--engine", "llama.cpp"))
    assert len(result.stdout.splitlines()) == 1
    return shlex.split(result.stdout)


def test_llama_cpp_yarn_flags() -> None:
    # the betas are always written: llama.cpp's defaults differ per architecture (grok 8)
    assert _llama_cpp("yarn", *METHOD_ARGS["yarn"]) == [
        "--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32768", "--rope-freq-base", "1000000",
        "--yarn-beta-fast", "32", "--yarn-beta-slow", "1", "--ctx-size", "131072"]


def test_llama_cpp_custom_attention_factor_is_an_override_kv() -> None:
    argv = _llama_cpp("yarn", *METHOD_ARGS["yarn"], "--attention-factor", "1.0")
    key, value = argv[argv.index("--override-kv") + 1].split("=")
    assert key == "ARCH.rope.scaling.attn_factor"
    # llama.cpp multiplies the GGUF value by 0.1 ln s + 1 in yarn mode
    assert float(value.split(":")[1]) == pytest.approx(1.0 / (0.1 * math.log(4) + 1), rel=1e-15)


def test_llama_cpp_yarn_betas() -> None:
    argv = _llama_cpp("yarn", *METHOD_ARGS["yarn"], "--beta-fast", "16", "--beta-slow", "2")
    assert argv[argv.index("--yarn-beta-fast") + 1] == "16"
    assert argv[argv.index("--yarn-beta-slow") + 1] == "2"


def test_llama_cpp_linear_flags() -> None:
    # llama-server caps a slot at the GGUF's context_length (the original 32k here) unless told otherwise
    assert _llama_cpp("linear", *METHOD_ARGS["linear"]) == [
        "--rope-scaling", "linear", "--rope-scale", "4", "--rope-freq-base", "1000000", "--ctx-size", "131072",
        "--override-kv", "ARCH.context_length=int:131072"]


def test_llama_cpp_linear_fractional_scale() -> None:
    argv = _llama_cpp("linear", "--original-max", "4096", "--target", "10240", "--theta", "1e4", "--head-dim", "64")
    assert argv[argv.index("--rope-scale") + 1] == "2.5"


def test_llama_cpp_ntk_flags() -> None:
    argv = _llama_cpp("ntk", *METHOD_ARGS["ntk"])
    assert argv[:2] == ["--rope-scaling", "none"]
    assert argv[-4:] == ["--ctx-size", "131072", "--override-kv", "ARCH.context_length=int:131072"]
    assert "--rope-scale" not in argv
    base = float(argv[argv.index("--rope-freq-base") + 1])
    assert base == pytest.approx(1e6 * 4 ** (128 / 126), rel=1e-15)


@pytest.mark.parametrize("method", ["dynamic", "longrope", "llama3"])
def test_llama_cpp_has_no_equivalent(method: str) -> None:
    line = assert_usage_error(run("scale", method, *METHOD_ARGS[method], "--engine", "llama.cpp"))
    assert "no llama.cpp" in line
    assert method in line


# ---------------------------------------------------------------- --explain

def _table_rows(stderr: str, bands: set[str]) -> list[list[str]]:
    rows = []
    for line in stderr.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line) if c.strip()]
        if len(cells) == 5 and cells[0].isdigit() and cells[-1] in bands:
            rows.append(cells)
    return rows


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _attention_line(stderr: str) -> tuple[float, float]:
    m = re.search(r"attention factor[^:]*:\s*([\d.]+).*logit multiplier[^:]*:\s*([\d.]+)", stderr)
    assert m, stderr
    return float(m[1]), float(m[2])


def test_explain_yarn_bands_and_attention() -> None:
    theta, d, s, original = 1e6, 128, 4.0, 32768
    result = ok(run("scale", "yarn", *METHOD_ARGS["yarn"], "--explain"))
    out = json.loads(result.stdout)  # stdout stays pure JSON
    assert out["rope_scaling"]["rope_type"] == "yarn"
    assert "attention factor" not in result.stdout
    rows = _table_rows(result.stderr, {"kept", "ramped", "interpolated"})
    assert [int(r[0]) for r in rows] == list(range(d // 2))
    # YaRN correction range (truncated): pairs <= low kept, >= high interpolated, ramp between
    def corr(rot: float) -> float:
        return d * math.log(original / (rot * TWO_PI)) / (2 * math.log(theta))
    low, high = math.floor(corr(32)), math.ceil(corr(1))
    for i, (_, orig_wl, new_wl, eff, band) in enumerate(rows):
        assert _num(orig_wl) == pytest.approx(TWO_PI * theta ** (2 * i / d), rel=1e-3)
        expected_band = "kept" if i <= low else "interpolated" if i >= high else "ramped"
        assert band == expected_band, (i, band)
        if band == "kept":
            assert _num(eff) == pytest.approx(1.0, abs=1e-4)
        elif band == "interpolated":
            assert _num(eff) == pytest.approx(s, abs=1e-4)
            assert _num(new_wl) == pytest.approx(s * _num(orig_wl), rel=1e-3)
        else:
            assert 1.0 < _num(eff) < s
    att, logit = _attention_line(result.stderr)
    assert att == pytest.approx(0.1 * math.log(s) + 1, abs=1e-6)
    assert logit == pytest.approx(att**2, abs=1e-5)
    assert "logit multiplier" in result.stderr


def test_explain_llama3_bands() -> None:
    theta, d, s, original = 500000.0, 128, 8.0, 8192
    result = ok(run("scale", "llama3", "--original-max", "8k", "--target", "64k", "--theta", "5e5", "--head-dim", "128",
                    "--explain"))
    assert json.loads(result.stdout)["rope_scaling"]["rope_type"] == "llama3"
    rows = _table_rows(result.stderr, {"kept", "blended", "divided"})
    assert [int(r[0]) for r in rows] == list(range(d // 2))
    counts = {"kept": 0, "blended": 0, "divided": 0}
    for i, (_, _, _, eff, band) in enumerate(rows):
        wavelength = TWO_PI * theta ** (2 * i / d)
        expected = "kept" if wavelength < original / 4 else "divided" if wavelength > original / 1 else "blended"
        assert band == expected, (i, band, wavelength)
        counts[band] += 1
        if band == "kept":
            assert _num(eff) == pytest.approx(1.0, abs=1e-4)
        elif band == "divided":
            assert _num(eff) == pytest.approx(s, abs=1e-4)
        else:
            assert 1.0 < _num(eff) < s
    assert counts == {"kept": 29, "blended": 6, "divided": 29}  # Llama 3.1's well-known split
    att, logit = _attention_line(result.stderr)
    assert att == 1.0 and logit == 1.0


def test_explain_linear_divides_everything() -> None:
    result = ok(run("scale", "linear", *METHOD_ARGS["linear"], "--explain"))
    json.loads(result.stdout)
    rows = _table_rows(result.stderr, {"divided"})
    assert len(rows) == 64
    assert all(_num(r[3]) == pytest.approx(4.0, abs=1e-4) for r in rows)


# ---------------------------------------------------------------- --config, --output, --in-place

QWEN_LIKE: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "hidden_size": 3584,
    "max_position_embeddings": 32768,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}
ROPE_KEYS = {"rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings"}


def _assert_kept(original: dict[str, Any], patched: dict[str, Any], dropped: frozenset[str] = frozenset()) -> None:
    for key, value in original.items():
        if key in dropped:
            assert key not in patched
        elif key not in ROPE_KEYS:
            assert patched[key] == value, key
    common_in_orig = [k for k in original if k in patched]
    common_in_new = [k for k in patched if k in original]
    assert common_in_new == common_in_orig  # order of the surviving keys unchanged


def test_config_supplies_facts(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    out, result = scale_json("yarn", "--config", str(cfg), "--target", "128k")
    assert out == {"rope_theta": 1e6, "max_position_embeddings": 131072,
                   "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert "not given" not in result.stderr  # theta and head dim came from the file
    # head dim derived from hidden_size / heads = 128 -> ntk exponent 128/126
    ntk, _ = scale_json("ntk", "--config", str(cfg), "--factor", "4")
    assert ntk["rope_theta"] == pytest.approx(1e6 * 4 ** (128 / 126), rel=1e-12)


def test_config_output_hf(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    raw = cfg.read_bytes()
    dest = tmp_path / "new.json"
    result = ok(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--output", str(dest)))
    assert result.stdout == ""
    assert cfg.read_bytes() == raw
    patched = json.loads(dest.read_text())
    # same keys, same order (all rope keys already existed), and posenc's record of what it wrote at the end
    assert list(patched) == [*QWEN_LIKE, "posenc"]
    assert patched["posenc"] == {"trained_ctx": 32768, "window": 131072, "training_free": True, "rope_theta": 1e6}
    _assert_kept(QWEN_LIKE, patched)
    assert patched["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert patched["rope_theta"] == 1e6
    assert patched["max_position_embeddings"] == 131072
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "new.json"]  # no temp file left


def test_config_output_adds_missing_keys_at_the_end(tmp_path: Path) -> None:
    base = {k: v for k, v in QWEN_LIKE.items() if k != "rope_scaling"}
    cfg = Path(write_json(tmp_path, base))
    dest = tmp_path / "new.json"
    ok(run("scale", "linear", "--config", str(cfg), "--factor", "2", "-o", str(dest)))
    patched = json.loads(dest.read_text())
    assert list(patched)[: len(base)] == list(base)
    assert patched["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    assert patched["max_position_embeddings"] == 65536
    _assert_kept(base, patched)


def test_config_output_hf_v5(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    dest = tmp_path / "new.json"
    ok(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--engine", "hf-v5", "--output", str(dest)))
    patched = json.loads(dest.read_text())
    assert patched["rope_parameters"] == {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    _assert_kept(QWEN_LIKE, patched, dropped=frozenset({"rope_theta", "rope_scaling"}))
    assert patched["max_position_embeddings"] == 131072


def test_in_place(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    before = cfg.stat().st_mode
    result = ok(run("scale", "llama3", "--config", str(cfg), "--target", "128k", "--in-place"))
    assert result.stdout == ""
    patched = json.loads(cfg.read_text())
    _assert_kept(QWEN_LIKE, patched)
    assert list(patched) == [*QWEN_LIKE, "posenc"]
    assert patched["rope_scaling"]["rope_type"] == "llama3"
    assert patched["rope_scaling"]["original_max_position_embeddings"] == 32768
    assert patched["max_position_embeddings"] == 131072
    assert cfg.stat().st_mode == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_phi3_top_level_original_is_updated(tmp_path: Path) -> None:
    phi = {"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 4096,
           "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": None,
           "vocab_size": 32064}
    cfg = Path(write_json(tmp_path, phi))
    factors = json.dumps([1.0] * 48)  # head_dim 96: 48 pairs
    ok(run("scale", "longrope", "--config", str(cfg), "--factor", "4", "--short-factor", factors, "--long-factor",
           factors, "--in-place"))
    patched = json.loads(cfg.read_text())
    assert patched["original_max_position_embeddings"] == 4096
    assert patched["max_position_embeddings"] == 16384
    assert list(patched) == [*phi, "posenc"]


def test_a_written_config_records_the_trained_length_and_reads_it_back(tmp_path: Path) -> None:
    """``-o`` records what the file alone cannot say (a llama3 block looks trained at its window): asked for more,
    the written file warns as the file it came from; ``--fine-tuned`` records the target as trained."""
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    first, second = tmp_path / "x4.json", tmp_path / "x4-tuned.json"
    ok(run("scale", "llama3", "--config", str(cfg), "--target", "128k", "-o", str(first)))
    ok(run("scale", "llama3", "--config", str(cfg), "--target", "128k", "--fine-tuned", "-o", str(second)))
    assert json.loads(second.read_text())["posenc"] == {"trained_ctx": 131072, "window": 131072,
                                                        "training_free": False, "rope_theta": 1e6}
    direct = ok(run("scale", "llama3", "--config", str(cfg), "--target", "256k"))
    again = ok(run("scale", "llama3", "--config", str(first), "--target", "256k"))
    tuned = ok(run("scale", "llama3", "--config", str(second), "--target", "256k"))
    warning = "warning: 32k -> 256k: a x8 jump"
    assert warning in direct.stderr and warning in again.stderr and "warning" not in tuned.stderr
    assert json.loads(again.stdout) == json.loads(direct.stdout)
    assert "trained at 32k and reaches 128k training-free (posenc wrote its scaling" in again.stderr
    # a record that no longer describes the file (its window edited by hand) is ignored, and said so
    edited = json.loads(first.read_text()) | {"max_position_embeddings": 65536}
    stale = ok(run("scale", "llama3", "--config", write_json(tmp_path, edited, "edited.json"), "--target", "256k"))
    assert "record says posenc wrote it to serve 128k; it now serves 64k, so the record is ignored" in stale.stderr


def test_output_into_missing_folder_fails_cleanly(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    raw = cfg.read_bytes()
    missing = tmp_path / "nope" / "new.json"
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--output", str(missing)),
                       "nope")
    assert cfg.read_bytes() == raw
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_output_onto_a_directory_fails_cleanly(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    raw = cfg.read_bytes()
    (tmp_path / "sub").mkdir()
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--output",
                           str(tmp_path / "sub")), "sub")
    assert cfg.read_bytes() == raw
    assert list((tmp_path / "sub").iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores directory permissions")
def test_in_place_in_read_only_folder_fails_cleanly(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    cfg = Path(write_json(folder, QWEN_LIKE))
    raw = cfg.read_bytes()
    folder.chmod(0o555)
    try:
        assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--in-place"),
                           "config.json")
        assert cfg.read_bytes() == raw
        assert [p.name for p in folder.iterdir()] == ["config.json"]
    finally:
        folder.chmod(0o755)


def test_in_place_failing_rename_leaves_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Works as root too: the final rename fails after the temp file was written."""
    import posenc_cli.files as config_module

    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    raw = cfg.read_bytes()

    def boom(src: Any, dst: Any) -> None:
        assert Path(src).exists()  # the temp file was fully written before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_module.os, "replace", boom)
    # a full device is no fault of the input: exit 3 (could not run), as config.write_error says
    assert_could_not_run(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--in-place"),
                         "config.json", "No space left on device")
    assert cfg.read_bytes() == raw
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_output_without_config() -> None:
    assert_usage_error(run("scale", "yarn", "--original-max", "32k", "--target", "128k", "--output", "x.json"),
                       "--config")


def test_in_place_without_config() -> None:
    assert_usage_error(run("scale", "yarn", "--original-max", "32k", "--target", "128k", "--in-place"), "--config")


def test_output_with_non_hf_format(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, QWEN_LIKE))
    raw = cfg.read_bytes()
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--target", "128k", "--engine", "vllm",
                           "--output", str(tmp_path / "n.json")), "vllm")
    assert cfg.read_bytes() == raw
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


LLAMA31: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "max_position_embeddings": 131072,
    "model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "vocab_size": 128256,
}


def test_another_method_on_a_scaled_config_scales_from_its_original_length(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, LLAMA31))
    out, result = scale_json("yarn", "--config", str(cfg), "--target", "256k")
    assert out["rope_scaling"]["original_max_position_embeddings"] == 8192
    assert out["rope_scaling"]["factor"] == 32.0  # 256k / 8k: yarn replaces llama3 and scales from the original
    assert out["rope_theta"] == 500000.0
    assert "replaces" in result.stderr and "llama3" in result.stderr


def test_a_target_shorter_than_the_native_window_is_refused(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, LLAMA31))
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--target", "64k"), "64k", "128k")


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "bloom", "n_head": 32, "hidden_size": 4096},
        {"model_type": "mpt", "n_heads": 32, "d_model": 4096, "max_seq_len": 2048, "attn_config": {"alibi": True}},
        {"model_type": "gpt2", "n_head": 12, "n_embd": 768, "n_positions": 1024},
    ],
    ids=["bloom", "mpt", "gpt2"],
)
def test_no_rope_config_has_nothing_to_scale(tmp_path: Path, cfg: dict[str, Any]) -> None:
    path = write_json(tmp_path, cfg)
    assert_usage_error(run("scale", "yarn", "--config", str(path), "--factor", "2"), "nothing to scale")


# ---------------------------------------------------------------- strict validation

BASE = ["--theta", "1e4", "--head-dim", "128"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["linear", "--original-max", "4k", "--factor", "0.5", *BASE], ["0.5"]),
        (["linear", "--original-max", "4k", "--factor", "nan", *BASE], ["nan"]),
        (["linear", "--original-max", "4k", "--factor", "inf", *BASE], ["inf"]),
        (["ntk2", "--original-max", "4k", "--factor", "2", *BASE], ["ntk2"]),
        (["llama3", "--original-max", "4k", "--factor", "2", "--low-freq-factor", "5", "--high-freq-factor", "4",
          *BASE], ["--low-freq-factor", "5"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--beta-fast", "1", "--beta-slow", "32", *BASE],
         ["--beta-fast", "32"]),
        (["yarn", "--original-max", "128k", "--target", "32k", *BASE], ["32k", "128k"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--theta", "1e4", "--head-dim", "127"], ["127"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--theta", "1e4", "--head-dim", "100",
          "--partial-rotary-factor", "0.33"], ["33"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--theta", "nan", "--head-dim", "128"], ["--theta", "nan"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--engine", "xml", *BASE], ["xml"]),
        (["yarn", "--original-max", "abc", "--factor", "2", *BASE], ["abc"]),
        (["yarn", "--factor", "2", *BASE], ["--original-max"]),
        (["yarn", "--original-max", "4k", *BASE], ["--factor"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--head-dim", "abc"], ["--head-dim"]),
        (["yarn", "--original-max", "4k", "--factor", "2", "--partial-rotary-factor", "1.5", *BASE], ["1.5"]),
    ],
    ids=["factor-0.5", "factor-nan", "factor-inf", "unknown-method", "llama3-lff>=hff", "beta_fast<beta_slow",
         "target<original", "odd-head-dim", "odd-partial-rotary", "theta-nan", "format-xml", "original-abc",
         "no-original", "no-scale", "head-dim-abc", "prf>1"],
)
def test_bad_input(args: list[str], needles: list[str]) -> None:
    assert_usage_error(run("scale", *args), *needles)


LR = ["longrope", "--original-max", "4k", "--factor", "2", "--theta", "1e4", "--head-dim", "8"]
GOOD4 = "[1.0, 1.0, 1.0, 1.0]"


@pytest.mark.parametrize(
    ("short", "long", "needles"),
    [
        ("[1, 1, 1]", GOOD4, ["--short-factor", "3", "4"]),
        (GOOD4, "[1, 1, 1, 1, 1]", ["--long-factor", "5", "4"]),
        ("[1, 1, 0, 1]", GOOD4, ["--short-factor[2]", "0"]),
        (GOOD4, "[1, -1, 1, 1]", ["--long-factor[1]", "-1"]),
        ("abc", GOOD4, ["--short-factor", "JSON"]),
        ('{"a": 1}', GOOD4, ["--short-factor", "list"]),
        ('[1, "x", 1, 1]', GOOD4, ["--short-factor[1]", "x"]),
        ("@/definitely/missing/factors.json", GOOD4, ["/definitely/missing/factors.json"]),
    ],
    ids=["short-too-short", "long-too-long", "zero", "negative", "not-json", "not-a-list", "not-a-number",
         "missing-file"],
)
def test_bad_longrope_lists(short: str, long: str, needles: list[str]) -> None:
    assert_usage_error(run("scale", *LR, "--short-factor", short, "--long-factor", long), *needles)


def test_longrope_needs_both_lists() -> None:
    assert_usage_error(run("scale", *LR, "--short-factor", GOOD4), "--long-factor")


def test_config_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert_usage_error(run("scale", "yarn", "--config", str(missing), "--factor", "2"), str(missing))


def test_config_is_a_directory(tmp_path: Path) -> None:
    assert_usage_error(run("scale", "yarn", "--config", str(tmp_path), "--factor", "2"), str(tmp_path), "directory")


def test_config_malformed_json(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"rope_theta": 10000.0,')
    assert_usage_error(run("scale", "yarn", "--config", str(bad), "--factor", "2"), str(bad), "JSON")


def test_config_json_array(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("[1, 2]")
    assert_usage_error(run("scale", "yarn", "--config", str(bad), "--factor", "2"), str(bad), "object")


# ---------------------------------------------------------------- the >8x warning

def test_large_factor_warns_on_stderr() -> None:
    out, result = scale_json("yarn", "--original-max", "4k", "--factor", "16", *BASE)
    assert out["rope_scaling"]["factor"] == 16.0
    assert "fine-tuning" in result.stderr
    assert "16" in result.stderr


def test_large_factor_fine_tuned_has_no_warning() -> None:
    out, result = scale_json("yarn", "--original-max", "4k", "--factor", "16", "--fine-tuned", *BASE)
    assert out["rope_scaling"]["factor"] == 16.0
    assert "fine-tuning" not in result.stderr
    assert "warning" not in result.stderr


def test_factor_4_is_not_warned_and_8_is_past_the_training_free_cap() -> None:
    _, result = scale_json("yarn", "--original-max", "4k", "--factor", "4", *BASE)
    assert "warning" not in result.stderr
    _, result = scale_json("yarn", "--original-max", "4k", "--factor", "8", *BASE)
    assert "past the x4" in result.stderr and "fine-tuning" in result.stderr


def test_error_is_the_only_stderr_line_even_when_defaults_would_be_noted() -> None:
    # no --theta / --head-dim: the "not given" notes must not precede the error
    assert_usage_error(run("scale", "linear", "--original-max", "4k", "--factor", "0.5"), "0.5")
    # a >8x factor would warn, but the format is impossible: only the error remains
    line = assert_usage_error(run("scale", "llama3", "--original-max", "8k", "--factor", "16", "--engine", "llama.cpp"))
    assert "no llama.cpp" in line


def test_error_after_reading_an_already_scaled_config_is_one_line(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, LLAMA31))
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--factor", "0.5"), "0.5")


def test_config_with_malformed_rope_parameters(tmp_path: Path) -> None:
    cfg = Path(write_json(tmp_path, {**QWEN_LIKE, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}))
    raw = cfg.read_bytes()
    assert_usage_error(run("scale", "yarn", "--config", str(cfg), "--factor", "2", "--in-place"),
                       "low_freq_factor")
    assert cfg.read_bytes() == raw


# ---------------------------------------------------------------- --config keeps the model's own rope keys

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _v5(*args: str) -> dict[str, Any]:
    printed = json.loads(ok(run("scale", *args, "--engine", "hf-v5")).stdout)
    out: dict[str, Any] = printed.get("text_config", printed)["rope_parameters"]
    return out


def test_gpt_oss_keeps_beta_and_truncate() -> None:
    p = _v5("yarn", "--config", str(CORPUS / "gpt-oss-20b.json"), "--target", "256k", "--fine-tuned")
    assert (p["beta_fast"], p["beta_slow"], p["truncate"]) == (32.0, 1.0, False)
    assert p["factor"] == 64.0 and p["original_max_position_embeddings"] == 4096


def test_deepseek_keeps_its_mscale_pair_and_an_option_still_wins() -> None:
    p = _v5("yarn", "--config", str(CORPUS / "deepseek-v3.json"), "--target", "320k", "--fine-tuned")
    assert (p["mscale"], p["mscale_all_dim"]) == (1.0, 1.0)
    p = _v5("yarn", "--config", str(CORPUS / "deepseek-v3.json"), "--target", "320k", "--fine-tuned",
            "--beta-fast", "16")
    assert p["beta_fast"] == 16.0 and p["mscale"] == 1.0


def test_model_specific_keys_survive_and_other_types_keys_do_not() -> None:
    p = _v5("yarn", "--config", str(CORPUS / "qwen3-vl-32b-instruct.json"), "--factor", "4")
    assert p["mrope_section"] == [24, 20, 20] and p["mrope_interleaved"] is True
    # llama3's band factors are llama3's: a yarn request on Llama 3.1 does not carry them
    p = _v5("yarn", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"), "--factor", "2")
    assert "low_freq_factor" not in p and "high_freq_factor" not in p


def test_llama3_keeps_its_band_factors() -> None:
    p = _v5("llama3", "--config", str(CORPUS / "llama-4-scout-17b-16e-instruct.json"), "--factor", "32",
            "--fine-tuned", "--original-max", "8k")
    assert (p["low_freq_factor"], p["high_freq_factor"]) == (1.0, 1.0)


def test_a_zero_mscale_is_not_carried_over() -> None:
    """Devstral 2 ships mscale_all_dim 0, which transformers reads as unset: it is not an option to validate."""
    own = json.loads((CORPUS / "devstral-2-123b-instruct.json").read_text())
    own_factor = own.get("text_config", own)["rope_parameters"]["factor"]
    p = _v5("yarn", "--config", str(CORPUS / "devstral-2-123b-instruct.json"), "--factor", "2")
    assert "mscale_all_dim" not in p and p["factor"] == 2.0 * own_factor  # its own factor times the jump


def _sglang_overrides(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(argv[argv.index("--json-model-override-args") + 1])
    return out


def test_sglang_format_carries_the_whole_dict_and_the_window() -> None:
    argv = shlex.split(ok(run("scale", "yarn", "--config", str(CORPUS / "gpt-oss-20b.json"), "--target", "256k",
                              "--fine-tuned", "--engine", "sglang")).stdout)
    over = _sglang_overrides(argv)
    assert over["rope_scaling"]["truncate"] is False and over["rope_scaling"]["rope_theta"] == 150000.0
    assert over["max_position_embeddings"] == 262144 and argv[-2:] == ["--context-length", "262144"]
    assert argv[0] != "env"


def test_sglang_dynamic_keeps_the_trained_window_and_needs_the_variable() -> None:
    result = ok(run("scale", "dynamic", "--original-max", "32k", "--target", "128k", "--theta", "1e6",
                    "--head-dim", "128", "--engine", "sglang"))
    argv = shlex.split(result.stdout)
    assert argv[:2] == ["env", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]
    assert _sglang_overrides(argv)["max_position_embeddings"] == 32768  # SGLang's base is for 32768 x 4 tokens
    assert "static base" in result.stderr


def test_sglang_multimodal_nests_under_text_config() -> None:
    argv = shlex.split(ok(run("scale", "yarn", "--config", str(CORPUS / "qwen3-vl-32b-instruct.json"), "--factor",
                              "2", "--engine", "sglang")).stdout)
    assert set(_sglang_overrides(argv)) == {"text_config"}


def test_sglang_yarn_attention_factor_is_a_caveat() -> None:
    result = ok(run("scale", "yarn", "--original-max", "32k", "--factor", "4", "--theta", "1e6", "--head-dim", "128",
                    "--attention-factor", "1", "--engine", "sglang"))
    assert "ignores attention_factor" in result.stderr


def test_the_native_window_with_a_new_theta_applies_it() -> None:
    """The native window alone returns the model as it is; a parameter given with it is applied, never ignored."""
    out, result = scale_json("llama3", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"), "--target", "128k")
    assert out["rope_scaling"]["factor"] == 8.0 and "unchanged" in result.stderr
    out, result = scale_json("llama3", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"), "--target", "128k",
                             "--theta", "1e6")
    assert out["rope_theta"] == 1e6 and out["rope_scaling"]["factor"] == 8.0
    assert "unchanged" not in result.stderr and "replaces" in result.stderr


def test_longrope_is_not_extended_with_the_lists_searched_for_another_window() -> None:
    phi3 = str(Path(__file__).resolve().parents[1] / "fixtures" / "phi-3-mini-128k.json")
    assert_usage_error(run("scale", "longrope", "--config", phi3, "--target", "256k"), "256k", "--long-factor")


def test_longrope_without_a_factor_is_extended_from_the_factor_transformers_derives(tmp_path: Path) -> None:
    """Phi-3 ships longrope with no factor: transformers scales by the window over the original length (131,072 /
    4,096 = 32, attention factor 1.19). Extended to 256k with new lists the factor is 64, so the attention factor is
    sqrt(1 + ln 64 / ln 4096) = 1.2247; reading the absent factor as 1 wrote 2 (1.0408)."""
    phi3 = str(Path(__file__).resolve().parents[1] / "fixtures" / "phi-3-mini-128k.json")
    shipped = json.loads(Path(phi3).read_text())
    half = shipped["hidden_size"] // shipped["num_attention_heads"] // 2
    lists = ["--long-factor", json.dumps([1.0 + i / 4 for i in range(half)]),
             "--short-factor", json.dumps([1.0] * half)]
    out = tmp_path / "config.json"
    result = ok(run("scale", "longrope", "--config", phi3, "--target", "256k", *lists, "-o", str(out)))
    assert "factor 32 x 2 = 64" in result.stderr
    written = json.loads(out.read_text())["rope_scaling"]
    assert written["factor"] == 64.0 and written["original_max_position_embeddings"] == 4096
    report = json.loads(ok(run("inspect", str(out), "--json")).stdout)
    factor = report["layers"][0]["attention_factor"] if "layers" in report else report["attention_factor"]
    assert math.isclose(factor, math.sqrt(1 + math.log(64) / math.log(4096)), rel_tol=1e-6)


# ---------------------------------------------------------------- llama.cpp on the model's own GGUF (issue 18)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_deepseek_gets_no_attn_factor_override_and_check_prints_the_same_flags(tmp_path: Path) -> None:
    """llama.cpp's deepseek2 derives the magnitude from yarn_log_multiplier: the override posenc printed before
    (``attn_factor = 1 / (0.1 ln s + 1)``) is gone, and check of the patched config prints what scale prints
    (tests/engines/test_llamacpp_converted.py runs both in the real llama.cpp)."""
    config = str(CORPUS / "deepseek-v3.json")
    result = ok(run("scale", "yarn", "--target", "320k", "--config", config, "--engine", "llama.cpp"))
    flags = shlex.split(result.stdout)
    assert not any("attn_factor" in a for a in flags)
    assert "deepseek2.rope.scaling.yarn_log_multiplier=float:0.1" in flags
    patched = tmp_path / "config.json"
    ok(run("scale", "yarn", "--target", "320k", "--config", config, "--engine", "hf", "-o", str(patched)))
    report = json.loads(run("check", str(patched), "--engines", "llama.cpp", "--max-model-len", "327680",
                            "--json").stdout)
    (cpp,) = report["engines"]
    assert cpp["invocation"][3:] == flags and cpp["verdict"] == "same"


def test_without_config_the_override_says_it_is_not_for_deepseek() -> None:
    result = ok(run("scale", "yarn", *METHOD_ARGS["yarn"], "--attention-factor", "1.0", "--engine", "llama.cpp"))
    assert "deepseek2" in result.stderr and "--config" in result.stderr


def test_llama3_model_yarn_flags_warn_that_rope_freqs_stacks_and_its_gguf_is_refused() -> None:
    result = ok(run("scale", "yarn", "--target", "256k", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"),
                    "--engine", "llama.cpp"))
    assert "--rope-scaling" in result.stdout
    assert "rope_freqs tensor" in result.stderr and "convert a config patched" in result.stderr
    line = assert_usage_error(run("scale", "yarn", "--target", "256k", "--config",
                                  str(EXAMPLES / "llama-3.1-twin.gguf"), "--engine", "llama.cpp"))
    assert "this GGUF has a rope_freqs tensor" in line
    # llama3 itself, on its own GGUF, is what the file already does: no refusal
    native = ok(run("scale", "llama3", "--target", "256k", "--config", str(EXAMPLES / "llama-3.1-twin.gguf"),
                    "--engine", "hf"))
    assert native.stdout


def test_llama_cpp_python_gets_every_override_after_one_flag() -> None:
    """llama-cpp-python's server reads --kv_overrides as one nargs="*" option: a repeated flag would keep only the
    last override (checked here with the server's own argument parser when it is installed)."""
    result = ok(run("scale", "yarn", "--target", "320k", "--attention-factor", "1.1", "--config",
                    str(EXAMPLES / "deepseek-v2-lite-twin.gguf"), "--engine", "llama-cpp-python"))
    argv = shlex.split(result.stdout)
    assert argv.count("--kv_overrides") == 1
    cli = pytest.importorskip("llama_cpp.server.cli")
    settings = pytest.importorskip("llama_cpp.server.settings")
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_args_from_model(parser, settings.ModelSettings)
    parsed = parser.parse_args(argv[3:])
    assert [o.split("=")[0] for o in parsed.kv_overrides] == [
        "deepseek2.rope.scaling.yarn_log_multiplier", "deepseek2.rope.scaling.attn_factor"]


def test_format_is_a_hidden_alias_of_engine() -> None:
    """``--engine`` was ``--format``: the old name is still read, as the same option, and no longer listed."""
    args = ("yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128")
    assert ok(run("scale", *args, "--format", "vllm")).stdout == ok(run("scale", *args, "--engine", "vllm")).stdout
    ok(run("scale", *args, "--format", "vllm", "--engine", "vllm"))
    line = assert_usage_error(run("scale", *args, "--format", "vllm", "--engine", "sglang"))
    assert "--format is the old name of --engine" in line
    helped = ok(run("scale", "--help")).stdout
    assert "--engine" in helped and "--format" not in helped


def test_writing_a_config_for_an_engine_that_serves_flags_names_the_writers(tmp_path: Path) -> None:
    config = str(Path(__file__).resolve().parents[1] / "corpus" / "llama-3.2-1b-instruct.json")
    line = assert_usage_error(run("scale", "linear", "--config", config, "--factor", "2", "--engine", "llama.cpp",
                                  "-o", str(tmp_path / "x.gguf")), "--engine llama.cpp serves flags")
    assert "hf, hf-v5, mlx-lm, exllamav3" in line and "--config MODEL.gguf -o NEW.gguf" in line
    assert not (tmp_path / "x.gguf").exists()
