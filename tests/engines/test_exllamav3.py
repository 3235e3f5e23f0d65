"""posenc's model of ExLlamaV3 1.6.5 against its own rope code (tests/harness/exllamav3_harness.py): its config
reader and ``RoPE`` class run on the CPU from the installed wheel, on the corpus configs x the rope types it reads.

Tolerance: inverse frequencies rtol 1e-6 (posenc's SAME_RTOL: float32 both sides; torch's pow on this CPU and posenc's
float32 power differ by one ulp, 8.6e-8, for base 1e6), attention factors exact.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rope_variants import variants, with_rope

from posenc_cli.engines import exllamav3 as model_of
from posenc_cli.engines import hf
from posenc_cli.engines.installed import exllamav3 as installed
from posenc_cli.engines.runs import SAME_RTOL, compare, relative_difference
from posenc_cli.models.model_positions import describe

pytestmark = pytest.mark.numeric

xh = pytest.importorskip("exllamav3_harness")
if not xh.available():
    pytest.skip(f"exllamav3 {xh.EXLLAMAV3_VERSION} is not installed (pip install --no-deps "
                f"exllamav3=={xh.EXLLAMAV3_VERSION})", allow_module_level=True)
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((ROOT / name).read_text(encoding="utf-8"))
    return cfg


def _corpus() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((ROOT / "tests" / "corpus").glob("*.json")):
        if path.name == "SOURCES.json":
            continue
        cfg = load(str(path.relative_to(ROOT)))
        if model_of.refusal(cfg) is None and describe(cfg).layers:
            out[path.stem] = cfg
    return out


def _describable(cfg: dict[str, Any]) -> bool:
    """posenc reads the variant (transformers' Phi3Config keeps LongRoPE's type whatever rope_scaling says, so a yarn
    dict without LongRoPE's factor lists is no config transformers loads)."""
    from posenc_cli.errors import PosencError

    try:
        describe(cfg)
    except PosencError:
        return False
    return True


CORPUS = _corpus()
CASES = [(name, variant, c) for name, cfg in CORPUS.items() for variant, c in variants(cfg).items()
         if _describable(c)]


def test_the_pin_is_exllamav3s() -> None:
    assert xh.EXLLAMAV3_VERSION == model_of.VERSION == installed.version()


def test_the_modelled_architectures_read_their_rope_the_plain_way() -> None:
    """Every architecture posenc models reads its rope with read_rope_settings_default(RopeStyle.NEOX) and nothing
    else, in the installed source (a class deriving from LlamaConfig inherits its call)."""
    readers = xh.rope_readers()
    for arch in model_of.PLAIN_ARCHS:
        assert readers[arch] == "self.read_rope_settings_default(RopeStyle.NEOX)", arch
    others = {a for a, call in readers.items() if call == "self.read_rope_settings_default(RopeStyle.NEOX)"}
    assert set(model_of.PLAIN_ARCHS) <= others


def test_the_corpus_has_each_kind_of_model() -> None:
    assert {"llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gpt-oss-20b", "phi-3-mini-128k-instruct",
            "devstral-2-123b-instruct", "mixtral-8x7b-v0.1"} <= set(CORPUS)


@pytest.mark.parametrize(("name", "variant", "cfg"), CASES, ids=[f"{n}-{v}" for n, v, _ in CASES])
def test_exllamav3_computes_what_posenc_says(name: str, variant: str, cfg: dict[str, Any]) -> None:
    """Its reader fills the settings posenc reads; its RoPE builds posenc's frequencies and attention factor (or
    raises where posenc's run says it will not start); modelled run == installed run."""
    head_dim = model_of.head_dim_of(cfg)
    assert xh.their_settings(cfg, head_dim) == model_of.settings(cfg, head_dim)
    model = describe(cfg)
    window = model.max_position_embeddings or 0
    modelled, run = model_of.run(model, cfg, window), installed.run(model, cfg, window)
    assert modelled.refusal == run.refusal
    if run.refusal is not None:
        assert run.refusal.startswith("will not start: ExLlamaV3 raises Unknown rope_type")
        with pytest.raises(ValueError, match="Unknown rope_type"):
            xh.their_rope(cfg, head_dim)
        return
    for a, b in zip(modelled.groups, run.groups, strict=True):
        assert a.inv_freq is not None and b.inv_freq is not None
        np.testing.assert_allclose(a.inv_freq.astype(np.float64), b.inv_freq.astype(np.float64), rtol=SAME_RTOL,
                                   atol=0)
        assert a.attention_factor == b.attention_factor


def test_dynamic_ntk_does_not_start() -> None:
    cfg = with_rope(load("tests/corpus/llama-3.1-8b-instruct.json"), {"rope_type": "dynamic", "factor": 4.0})
    with pytest.raises(ValueError, match="Unknown rope_type: dynamic"):
        xh.their_rope(cfg, 128)


def test_yarn_factor_is_the_window_over_the_original() -> None:
    """The issue's claim on its own code: the Qwen card patch (yarn x4 from 32k, window left at 32k) is factor 1 and
    attention factor 1 (unlike TurboMind, the attention factor follows the derived factor); with the window at 128k
    it is transformers' yarn x4 exactly."""
    qwen = load("tests/corpus/qwen2.5-7b-instruct.json")
    card = with_rope(qwen, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    rope, plain = xh.their_rope(card, 128), xh.their_rope(qwen, 128)
    np.testing.assert_array_equal(rope.inv_freq.numpy(), plain.inv_freq.numpy())
    assert rope.attn_factor == 1.0
    verdict = compare(hf.run(describe(card), card, 131072), model_of.run(describe(card), card, 131072))
    assert verdict.verdict == "differs"
    served = with_rope(qwen, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                       max_position_embeddings=131072)
    assert compare(hf.run(describe(served), served, 131072),
                   installed.run(describe(served), served, 131072)).verdict == "same"


def test_truncate_attention_factor_and_llama4_beta_are_read() -> None:
    """gpt-oss's truncate: false gives transformers' unrounded range; an explicit attention_factor is used; with
    llama_4_scaling_beta (Ministral 3 / Devstral 2) the static factor is 1 and the beta is kept for its kernel."""
    oss = load("tests/corpus/gpt-oss-20b.json")
    run = installed.run(describe(oss), oss, 131072)
    assert compare(hf.run(describe(oss), oss, 131072), run).verdict == "same"
    rounded = with_rope(oss, {**oss["rope_scaling"], "truncate": True})
    ours, theirs = xh.their_rope(oss, 64).inv_freq.numpy(), xh.their_rope(rounded, 64).inv_freq.numpy()
    assert float(relative_difference(theirs, ours).max()) > 1e-3
    explicit = with_rope(oss, {**oss["rope_scaling"], "attention_factor": 1.1})
    assert xh.their_rope(explicit, 64).attn_factor == 1.1
    devstral = load("tests/corpus/devstral-2-123b-instruct.json")  # ships llama_4_scaling_beta 0: yarn's factor
    head_dim = model_of.head_dim_of(devstral)
    assert xh.their_rope(devstral, head_dim).attn_factor == pytest.approx(0.1 * math.log(64) + 1, rel=1e-12)
    scaled = with_rope(devstral, {**devstral["rope_parameters"], "llama_4_scaling_beta": 0.1})
    rope = xh.their_rope(scaled, head_dim)
    assert rope.llama_4_scaling_beta == 0.1 and rope.attn_factor == 1.0
    run = model_of.run(describe(scaled), scaled, 262144)
    assert run.groups[0].attention_factor == 1.0 and any("llama_4_scaling_beta" in w for w in run.warnings)


def test_longrope_uses_the_factors_of_the_window() -> None:
    """Phi-3 128k: the long factors for every sequence (the window passes the original), magnitude from the window."""
    phi = load("tests/corpus/phi-3-mini-128k-instruct.json")
    rope = xh.their_rope(phi, 96)
    long = np.asarray(phi["rope_scaling"]["long_factor"], dtype=np.float32)
    base = 1.0 / (10000.0 ** (np.arange(0, 96, 2, dtype=np.float64) / 96))
    np.testing.assert_allclose(rope.inv_freq.numpy(), base / long, rtol=1e-6)
    assert rope.attn_factor == pytest.approx(math.sqrt(1 + math.log(131072 / 4096) / math.log(4096)), rel=1e-12)
    verdict = compare(hf.run(describe(phi), phi, 4096), installed.run(describe(phi), phi, 4096))
    assert verdict.verdict == "differs"  # transformers keeps the short factors for 4k tokens


# --- posenc scale --engine exllamav3, read back by ExLlamaV3's own reader and RoPE -----------------------------------

RENDERED = [
    ("yarn", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("yarn", "--config", "tests/corpus/gpt-oss-20b.json", "--target", "256k", "--fine-tuned"),
    ("linear", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("llama3", "--config", "tests/corpus/llama-3.1-8b-instruct.json", "--target", "256k"),
]


@pytest.mark.parametrize("args", RENDERED, ids=[" ".join(a[:1] + a[3:]) for a in RENDERED])
def test_the_rendered_keys_give_transformers_numbers(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys posenc prints, merged into the model's config.json (its rope_parameters replaced), read by
    ExLlamaV3's own reader and RoPE: transformers' numbers for the config posenc writes for the same request."""
    from clihelpers import ok, run

    monkeypatch.chdir(ROOT)
    keys = json.loads(ok(run("scale", *args, "--engine", "exllamav3")).stdout)
    patched = json.loads(ok(run("scale", *args, "--engine", "hf-v5")).stdout)
    cfg = load(args[2])
    served = {k: v for k, v in cfg.items() if k != "rope_parameters"} | keys
    reference = {k: v for k, v in cfg.items() if k not in ("rope_scaling", "rope_theta")} | patched
    (ref,) = hf.run(describe(reference), reference, keys["max_position_embeddings"]).groups
    rope = xh.their_rope(served, model_of.head_dim_of(served))
    assert ref.inv_freq is not None
    assert float(relative_difference(ref.inv_freq, rope.inv_freq.numpy()).max()) <= SAME_RTOL
    assert rope.attn_factor == pytest.approx(ref.attention_factor, rel=1e-12)


def test_dynamic_is_refused_by_the_format() -> None:
    from clihelpers import assert_usage_error, run

    assert_usage_error(run("scale", "dynamic", "--original-max", "4k", "--target", "16k", "--theta", "1e4",
                           "--head-dim", "128", "--engine", "exllamav3"), "ExLlamaV3 has no dynamic rope")
