"""posenc's model of MLX-LM 0.32.2 (posenc_cli/engines/mlx_lm.py) against mlx-lm's own code on mlx 0.32.4's CPU
backend (posenc_cli/engines/installed/mlx_lm.py: its _get_classes, ModelArgs.from_dict, Model and rope modules).

Tolerances: inverse frequencies rtol 1e-6 between the modelled and the installed run (both float32: measured at most
2.7e-7 on the corpus, the rounding of mlx's float32 ``base ** x`` and ``1 / freqs`` against numpy's); magnitudes and
softmax multipliers rel 1e-6 (Python floats on both sides, but SuScaledRoPE's and YarnRoPE's scale is applied as a
float32 multiply of the probe). The kernel itself: the angle it applies at position 1 equals the reported inverse
frequency within 2e-6 where the module passes a base (mlx's own float32 ``exp`` polynomial: measured up to 1.5e-6
for bases 1e4..1e8 and dims 32..256) and 3e-7 where it passes frequencies (the atan2 read-back of float32 cos/sin).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc_cli.engines import hf, mlx_lm_files
from posenc_cli.engines import mlx_lm as modelled
from posenc_cli.engines.runs import SAME_RTOL, compare
from posenc_cli.models.model_positions import describe

pytestmark = pytest.mark.numeric

mh = pytest.importorskip("mlx_harness")
if not mh.available():
    pytest.skip("mlx and mlx-lm do not import here (see tests/harness/mlx_harness.py)", allow_module_level=True)

from posenc_cli.engines.installed import mlx_lm as installed  # noqa: E402 - after the skip

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / name).read_text(encoding="utf-8"))
    return data


def _same_runs(a: Any, b: Any) -> None:
    """The modelled run ``a`` and the installed run ``b`` say the same."""
    assert (a.refusal is None) == (b.refusal is None), (a.refusal, b.refusal)
    if a.refusal:
        assert a.refusal.split(":")[0] == b.refusal.split(":")[0], (a.refusal, b.refusal)
        return
    for ga, gb in zip(a.groups, b.groups, strict=True):
        assert (ga.inv_freq is None) == (gb.inv_freq is None)
        if ga.inv_freq is not None:
            np.testing.assert_allclose(ga.inv_freq.astype(np.float64), gb.inv_freq.astype(np.float64), rtol=1e-6,
                                       atol=0)
            assert ga.attention_factor == pytest.approx(gb.attention_factor, rel=1e-6)
        assert ga.softmax_scale == pytest.approx(gb.softmax_scale, rel=1e-6)


def test_the_model_files_and_remapping_are_the_installed_ones() -> None:
    import mlx_lm
    from mlx_lm.utils import MODEL_REMAPPING

    assert mlx_lm.__version__ == modelled.VERSION == mh.MLX_LM_VERSION
    assert installed.version() == modelled.VERSION
    assert set(mlx_lm_files.MODEL_FILES) == mh.model_files()
    assert mlx_lm_files.REMAPPING == MODEL_REMAPPING


CORPUS_NAMES = sorted(p.name for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_posencs_model_is_what_mlx_lm_builds_for_the_corpus(name: str) -> None:
    """Every corpus config with RoPE: the modelled run equals the installed run (or both refuse alike) at the
    native window and, for length-dependent rope, at 4k; not modelled files only where mlx-lm has the file."""
    cfg = load(name)
    model = describe(cfg)
    if model.family != "rope" or not model.layers:
        pytest.skip("no RoPE")
    window = model.max_position_embeddings or 4096
    for seq in (window, 4096):
        a = modelled.run(model, cfg, window, seq)
        if a.refusal and a.refusal.startswith("not modelled"):
            assert modelled.model_file(cfg) in mlx_lm_files.MODEL_FILES
            return
        _same_runs(a, installed.run(model, cfg, window, seq))


def _rendered(*args: str) -> tuple[dict[str, Any], list[str]]:
    """``posenc scale ARGS --engine mlx-lm``: the config.json and its caveats. A target the model already serves
    leaves its rope as it is and answers with the serving command: mlx-lm then reads the model's own config."""
    from clihelpers import ok, run

    result = ok(run("scale", *args, "--engine", "mlx-lm"))
    caveats = [line for line in result.stderr.splitlines() if line.startswith("caveat:")]
    if result.stdout.startswith("mlx_lm.server"):
        assert "its rope stays as it is" in result.stderr
        config = args[args.index("--config") + 1]
        # the difference is stated by the verdict printed beside the command ("off by X relative")
        caveats += [line for line in result.stderr.splitlines() if line.startswith("verdict:") and "off by" in line]
        return json.loads(Path(config).read_text(encoding="utf-8")), caveats
    return json.loads(result.stdout), caveats


RENDER_CASES = [
    ("llama-3.1-8b-instruct.json", "yarn", "--target", "256k"),
    ("llama-3.1-8b-instruct.json", "llama3", "--target", "256k"),
    ("llama-3.1-8b-instruct.json", "linear", "--target", "256k"),
    ("llama-2-7b-chat-hf.json", "dynamic", "--factor", "4"),
    ("llama-2-7b-chat-hf.json", "yarn", "--factor", "4", "--attention-factor", "1.2"),
    ("mistral-7b-v0.1.json", "linear", "--factor", "2"),
    ("qwen2.5-7b-instruct.json", "yarn", "--factor", "4"),
    ("qwen2.5-7b-instruct.json", "dynamic", "--factor", "4"),
    ("qwen3-8b.json", "yarn", "--factor", "4"),
    ("gpt-oss-20b.json", "yarn", "--target", "256k", "--fine-tuned"),
    ("deepseek-v3.json", "yarn", "--target", "320k", "--fine-tuned"),
    ("gemma-3-1b-it.json", "linear", "--target", "64k"),
    ("gemma-3-27b-it.json", "linear", "--target", "256k"),
    ("olmo-3.1-32b-instruct.json", "yarn", "--target", "128k", "--fine-tuned"),
    ("phi-3-mini-128k-instruct.json", "yarn", "--target", "128k", "--fine-tuned"),
]


@pytest.mark.parametrize("case", RENDER_CASES, ids=[f"{c[0].removesuffix('.json')}-{c[1]}" for c in RENDER_CASES])
def test_rendered_config_gives_transformers_numbers_or_the_stated_difference(
        case: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The key proof: ``--engine mlx-lm`` fed to mlx-lm's own classes gives what transformers computes for the same
    file (posenc's transformers run, itself proven against transformers' rotary classes) where posenc says same,
    and the difference the caveat states where it says it differs."""
    monkeypatch.chdir(ROOT)
    name, *args = case
    cfg, caveats = _rendered(args[0], "--config", f"tests/corpus/{name}", *args[1:])
    model = describe(cfg)
    window = model.max_position_embeddings or 4096
    mine = modelled.run(model, cfg, window)
    theirs = installed.run(model, cfg, window)
    _same_runs(mine, theirs)
    reference = hf.run(model, cfg, window)
    verdict = compare(reference, theirs)
    if not caveats:
        assert verdict.verdict == "same", [g.as_dict() for g in verdict.groups]
        return
    if any("long factors" in c for c in caveats):  # LongRoPE: the difference is below the original length
        original = int(cfg["original_max_position_embeddings"])
        verdict = compare(hf.short_run(model, cfg, original), installed.run(model, cfg, window, original))
    assert verdict.verdict == "differs"
    stated = ([float(c.split("by up to ")[1].split()[0]) for c in caveats if "by up to" in c]
              or [float(c.split("off by ")[1].split()[0]) for c in caveats if "off by " in c])
    measured = max(g.inv_freq_rel_diff for g in verdict.groups)
    assert stated and stated[0] == pytest.approx(measured, rel=2e-3)  # printed with 3 digits


def test_gpt_oss_at_256k_is_off_by_0976() -> None:
    """The issue's number, measured: gpt-oss's truncate: false at 256k."""
    from posenc_cli.engines.installed.mlx_lm import run

    cfg, caveats = _rendered("yarn", "--config", str(CORPUS / "gpt-oss-20b.json"), "--target", "256k", "--fine-tuned")
    model = describe(cfg)
    verdict = compare(hf.run(model, cfg, 262144), run(model, cfg, 262144))
    assert round(max(g.inv_freq_rel_diff for g in verdict.groups), 3) == 0.976
    assert any("0.976" in c for c in caveats)


@pytest.mark.parametrize("name", ["phi-3-mini-128k-instruct.json", "phi-3.5-moe-instruct.json"])
def test_longrope_uses_the_long_factors_below_the_original_length(name: str) -> None:
    cfg = load(name)
    model = describe(cfg)
    theirs = installed.run(model, cfg, 131072, 4096)
    short = hf.short_run(model, cfg, 4096)
    diff = compare(short, theirs).groups[0].inv_freq_rel_diff
    s = cfg["rope_scaling"]
    assert diff == pytest.approx(max(abs(a / b - 1) for a, b in zip(s["short_factor"], s["long_factor"], strict=True)),
                                 rel=1e-5)
    assert any("long factors at every length" in w for w in modelled.run(model, cfg, 131072, 4096).warnings)


def test_a_transformers_5_file_runs_default_theta_without_scaling() -> None:
    """llama's ModelArgs reads only rope_theta/rope_scaling: a file with only rope_parameters runs theta 1e4, no
    llama3 scaling (measured), and posenc says so."""
    from posenc_cli.models.convert import convert

    cfg = convert(load("llama-3.1-8b-instruct.json"), "v5")
    assert "rope_scaling" not in cfg and "rope_theta" not in cfg
    model = describe(cfg)
    theirs = installed.run(model, cfg, 131072)
    from posenc_cli.rope.frequencies import default_inv_freq

    np.testing.assert_allclose(theirs.groups[0].inv_freq, default_inv_freq(1e4, 128), rtol=1e-6)
    assert compare(hf.run(model, cfg, 131072), theirs).verdict == "differs"
    assert any("theta 10000 with no scaling" in w for w in modelled.run(model, cfg, 131072).warnings)


def test_mixtral_never_reads_rope_scaling_and_the_rendering_refuses() -> None:
    from clihelpers import run

    cfg = load("mixtral-8x7b-v0.1.json")
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    model = describe(cfg)
    theirs = installed.run(model, cfg, 65536)
    np.testing.assert_allclose(theirs.groups[0].inv_freq, modelled.run(model, cfg, 65536).groups[0].inv_freq,
                               rtol=1e-6)
    assert compare(hf.run(model, cfg, 65536), theirs).verdict == "differs"
    result = run("scale", "linear", "--config", str(CORPUS / "mixtral-8x7b-v0.1.json"), "--factor", "2",
                 "--engine", "mlx-lm")
    assert result.exit_code != 0 and "never reads rope_scaling" in result.stderr


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct.json", "gpt-oss-20b.json", "deepseek-v3.json",
                                  "phi-3-mini-128k-instruct.json", "gemma-3-1b-it.json", "qwen2.5-7b-instruct.json"])
def test_the_kernel_applies_the_reported_frequencies(name: str) -> None:
    """mx.fast.rope itself, with the arguments each model's rope module passes: its angle at position 1 and its
    pairing are what the installed run reports (tolerances in the module docstring)."""
    cfg = load(name)
    net = installed._build(cfg)
    for _, (_, rope) in sorted(installed.layer_rope_modules(net).items())[:8]:
        call = installed.probe(rope, 8192)
        angles, layout = mh.kernel_angles(call)
        reported = installed.inverse_frequencies(call).astype(np.float64)
        np.testing.assert_allclose(angles, reported, rtol=2e-6 if call["freqs"] is None else 3e-7, atol=0)
        assert layout == ("interleaved" if name == "deepseek-v3.json" else "rotate-half")


def test_the_same_rtol_is_what_check_uses() -> None:
    assert SAME_RTOL == 1e-6


def test_transformers_ignores_the_mscale_written_for_mlx_lm() -> None:
    """An explicit YaRN attention_factor is written for mlx-lm as ``mscale`` (mlx-lm ignores attention_factor);
    transformers' own YaRN function, on the same file, still takes attention_factor."""
    from hf_rope import hf_messages, quiet_frequencies
    from transformers import AutoConfig

    cfg, caveats = _rendered("yarn", "--config", str(CORPUS / "llama-2-7b-chat-hf.json"), "--factor", "4",
                             "--attention-factor", "1.2")
    assert cfg["rope_scaling"]["mscale"] == pytest.approx(2 / np.log(4))  # (1.2 - 1) / (0.1 ln 4)
    assert caveats == []
    with hf_messages():
        config = AutoConfig.for_model(**cfg)
    inv, attention = quiet_frequencies(config, 16384)
    assert attention == pytest.approx(1.2, rel=1e-12)
    theirs = installed.run(describe(cfg), cfg, 16384)
    assert theirs.groups[0].attention_factor == pytest.approx(1.2, rel=1e-12)
    np.testing.assert_allclose(theirs.groups[0].inv_freq, inv, rtol=1e-6)


# --- end to end: logits of a tiny random Llama in mlx-lm and in transformers, same weights, the rendered config

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
        "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 256,
        "max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def _logits(cfg: dict[str, Any], folder: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(transformers' logits, mlx-lm's logits) for ``ids`` with the same random weights and ``cfg``."""
    import mlx.core as mx
    import torch
    from hf_rope import hf_messages
    from mlx_lm.utils import load_model
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    with hf_messages():
        net = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.float32).eval()
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    tied = cfg.get("tie_word_embeddings", True) and "lm_head.weight" in net.state_dict()
    save_file({k: v.contiguous() for k, v in net.state_dict().items() if not (tied and k == "lm_head.weight")},
              str(folder / "model.safetensors"))
    with torch.no_grad():
        theirs = net(torch.tensor([ids])).logits[0].numpy()
    mlx_net, _ = load_model(folder)
    ours = np.array(mlx_net(mx.array([ids]))[0], dtype=np.float32)
    return theirs, ours


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(a).max())


@pytest.mark.parametrize("args", [("yarn", "--factor", "8", "--attention-factor", "1.3"),
                                  ("llama3", "--factor", "8"), ("linear", "--factor", "4")],
                         ids=["yarn-attention-factor", "llama3", "linear"])
def test_a_tiny_llama_gives_transformers_logits_with_the_rendered_config(args: tuple[str, ...],
                                                                          tmp_path: Path) -> None:
    """mlx-lm's whole model (its load_model, attention, rope, fast kernels) on the config ``--engine mlx-lm`` wrote
    for a tiny random Llama: transformers' logits on the same weights, 600 tokens (past the ramp's low frequencies
    at position 0..599). Tolerance 1e-4 of the largest logit: float32 matmuls in two libraries (measured 5.2e-7 to
    5.8e-7)."""
    (tmp_path / "tiny.json").write_text(json.dumps(TINY), encoding="utf-8")
    cfg, caveats = _rendered(args[0], "--config", str(tmp_path / "tiny.json"), *args[1:], "--fine-tuned")
    assert caveats == []
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 256, 600)]
    theirs, ours = _logits(cfg, tmp_path / "m", ids)
    assert _rel(theirs, ours) < 1e-4


def test_a_tiny_llama_with_truncate_false_differs_as_posenc_says(tmp_path: Path) -> None:
    """YaRN with truncate: false: mlx-lm's logits are not transformers' for that file, but are transformers' for
    the same file with truncate: true (what posenc says mlx-lm computes)."""
    (tmp_path / "tiny.json").write_text(json.dumps(TINY), encoding="utf-8")
    cfg, caveats = _rendered("yarn", "--config", str(tmp_path / "tiny.json"), "--factor", "8", "--no-truncate",
                             "--fine-tuned")
    assert any("truncate: false ignored" in c for c in caveats)
    ids = [int(i) for i in np.random.default_rng(1).integers(0, 256, 600)]
    theirs, ours = _logits(cfg, tmp_path / "a", ids)
    rounded = {**cfg, "rope_scaling": {**cfg["rope_scaling"], "truncate": True}}
    theirs_rounded, _ = _logits(rounded, tmp_path / "b", ids)
    assert _rel(theirs, ours) > 3e-3  # measured 6.9e-3; the libraries agree to 6e-7
    assert _rel(theirs_rounded, ours) < 1e-4


TINY_COHERE = {"architectures": ["CohereForCausalLM"], "model_type": "cohere", "hidden_size": 128,
               "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
               "vocab_size": 256, "max_position_embeddings": 1024, "rope_theta": 10000.0, "layer_norm_eps": 1e-5,
               "logit_scale": 0.5, "use_qk_norm": False, "eos_token_id": 2, "bos_token_id": 1, "pad_token_id": 0}
TINY_GEMMA3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 128,
               "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 6,
               "head_dim": 64, "vocab_size": 256, "max_position_embeddings": 1024, "rope_theta": 1000000.0,
               "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
               "query_pre_attn_scalar": 64, "sliding_window": 4096, "sliding_window_pattern": 6,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "eos_token_id": 1, "bos_token_id": 2,
               "pad_token_id": 0}


@pytest.mark.parametrize(("tiny", "args"), [(TINY_COHERE, None), (TINY_GEMMA3, ("linear", "--factor", "2"))],
                         ids=["cohere-interleaved", "gemma3-local-base-linear"])
def test_tiny_models_with_their_own_layout_and_bases(tiny: dict[str, Any], args: tuple[str, ...] | None,
                                                     tmp_path: Path) -> None:
    """Cohere pairs features 2i, 2i+1 in transformers and mlx-lm (``traditional=True``): the same logits. Gemma 3:
    the local base on the sliding layers and the linear scaling of the full layers from the rendered config, the
    softmax from ``query_pre_attn_scalar``: the same logits (tolerance as above)."""
    cfg = tiny
    if args is not None:
        (tmp_path / "tiny.json").write_text(json.dumps(tiny), encoding="utf-8")
        cfg, caveats = _rendered(args[0], "--config", str(tmp_path / "tiny.json"), *args[1:], "--fine-tuned")
        assert caveats == []
    model = describe(cfg)
    assert compare(hf.run(model, cfg, 1024), modelled.run(model, cfg, 1024)).verdict == "same"
    ids = [int(i) for i in np.random.default_rng(2).integers(0, 256, 600)]
    theirs, ours = _logits(cfg, tmp_path / "m", ids)
    assert _rel(theirs, ours) < 1e-4


def test_gemma2_without_query_pre_attn_scalar_gets_mlx_lms_default() -> None:
    """gemma2.py's query_pre_attn_scalar defaults to 144, transformers' to 256: a file without the key gets a
    softmax scale sqrt(256 / 144) times transformers' in mlx-lm (measured on its attention module)."""
    cfg = {k: v for k, v in load("gemma-2-2b.json").items() if k != "query_pre_attn_scalar"}
    model = describe(cfg)
    theirs = installed.run(model, cfg, 8192)
    _same_runs(modelled.run(model, cfg, 8192), theirs)
    assert theirs.groups[0].softmax_scale == pytest.approx(np.sqrt(256 / 144), rel=1e-6)
    assert compare(hf.run(model, cfg, 8192), theirs).verdict == "differs"


def _mlx_rotated(cfg: dict[str, Any], q: np.ndarray) -> np.ndarray:
    """mlx-lm's own rope module of the model's first rope layer on ``q`` (batch, heads, positions, dims)."""
    import mlx.core as mx

    net = installed._build(cfg)
    _, rope = sorted(installed.layer_rope_modules(net).items())[0][1]
    return np.array(rope(mx.array(q)), dtype=np.float64)


@pytest.mark.parametrize("name", ["llama-4-scout-17b-16e-instruct.json", "deepseek-v3.json"])
def test_interleaved_models_pair_features_as_transformers(name: str) -> None:
    """Llama 4 (transformers: complex rotation of consecutive pairs) and DeepSeek V3 (rope_interleave): mlx-lm's
    rope module (``traditional=True``) rotates the same query vector, at positions 0..63, as transformers' own rotary
    module and apply function. Tolerance 1e-5: float32 cos/sin of the same angles in two libraries."""
    import importlib

    import torch
    from hf_rope import hf_messages, rotary_class
    from transformers import AutoConfig

    cfg = load(name)
    text = cfg.get("text_config", cfg)
    with hf_messages():
        config = AutoConfig.for_model(**text)
    module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    positions = torch.arange(64)[None]
    dims = int(text.get("qk_rope_head_dim") or text["head_dim"])
    q = torch.from_numpy(np.random.default_rng(3).standard_normal((1, 1, 64, dims)).astype(np.float32))
    rotary = rotary_class(config)(config)
    ours = _mlx_rotated(cfg, q.numpy())
    if name.startswith("llama-4"):
        freqs_cis = rotary(q, positions)
        theirs = module.apply_rotary_emb(q.transpose(1, 2), q.transpose(1, 2), freqs_cis)[0].transpose(1, 2)
    else:  # DeepSeek de-interleaves q and k the same way before rotating: q.k is unchanged, the order is
        cos, sin = rotary(q, positions)
        theirs = module.apply_rotary_pos_emb_interleave(q, q, cos, sin)[0]
        ours = ours[..., np.r_[0:dims:2, 1:dims:2]]
    np.testing.assert_allclose(ours, theirs.double().numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("seq_len", [2048, 4096, 8192, 16384])
def test_dynamic_ntk_is_transformers_base_per_sequence(seq_len: int) -> None:
    """DynamicNTKScalingRoPE computes its base from the sequence length on every call, as transformers does per
    forward: measured through the module at each length, equal to transformers' run for a sequence that long."""
    cfg = {**load("llama-2-7b-chat-hf.json"), "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    model = describe(cfg)
    theirs = installed.run(model, cfg, 16384, seq_len)
    _same_runs(modelled.run(model, cfg, 16384, seq_len), theirs)
    assert compare(hf.short_run(model, cfg, seq_len), theirs).verdict == "same"


def test_gpt_oss_with_dynamic_ntk_fails_on_its_first_call() -> None:
    """gpt_oss.py passes no max_position_embeddings to initialize_rope: a DynamicNTKScalingRoPE built so raises on
    its first call (measured), and posenc says mlx-lm will not start."""
    cfg = {**load("gpt-oss-20b.json"), "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    model = describe(cfg)
    mine, theirs = modelled.run(model, cfg, 262144), installed.run(model, cfg, 262144)
    assert mine.refusal is not None and mine.refusal.startswith("will not start")
    assert theirs.refusal is not None and "TypeError" in theirs.refusal and theirs.refusal.startswith("will not start")
