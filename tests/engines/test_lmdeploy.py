"""posenc's model of LMDeploy 0.18.0 TurboMind against lmdeploy's own rope parser (tests/harness/lmdeploy_harness.py).

What runs: lmdeploy's ``parse_rope_param`` / ``copy_rope_config`` and ``override_hf_config`` from the installed wheel,
on transformers' config objects of the corpus configs x the rope types TurboMind reads. What is modelled: the CUDA
kernel (:func:`posenc_cli.engines.lmdeploy.frequencies`), fed here with lmdeploy's own parse. Tolerance: inverse
frequencies within posenc's SAME_RTOL (1e-6, float32 operation order), attention factors exact.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rope_variants import variants, with_rope

from posenc_cli.engines import hf
from posenc_cli.engines import lmdeploy as model_of
from posenc_cli.engines.installed import lmdeploy as installed
from posenc_cli.engines.runs import compare, relative_difference
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import rope_groups

pytestmark = pytest.mark.numeric

lh = pytest.importorskip("lmdeploy_harness")
if not lh.available():
    pytest.skip(f"lmdeploy {lh.LMDEPLOY_VERSION} is not installed (pip install --no-deps "
                f"lmdeploy=={lh.LMDEPLOY_VERSION})", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((ROOT / name).read_text(encoding="utf-8"))
    return cfg


def _corpus() -> dict[str, dict[str, Any]]:
    """The corpus configs TurboMind runs (its architectures) whose config transformers builds without remote code."""
    out = {}
    for path in sorted((ROOT / "tests" / "corpus").glob("*.json")):
        if path.name == "SOURCES.json":
            continue
        cfg = load(str(path.relative_to(ROOT)))
        model = describe(cfg)
        if model_of.refusal(cfg) is None and not (model.engine and model.engine.remote_code) and model.layers:
            out[path.stem] = cfg
    return out


CORPUS = _corpus()


def float32_bound(rope: model_of.TurboMindRope, prompt: int) -> float:
    """How far TurboMind's float32 frequencies may sit from transformers' (relative), from its arithmetic:
    ``exp2f(x)`` of a float32 exponent ``x = 2j * -log2(base) / dim`` (|x| <= log2(base): x's rounding moves the
    result by |x| 2^-24 ln 2), a few ulps of exp2f / torch's pow / the division by the factor on either side, and for
    YaRN the blend ``freq - freq * alpha * (1 - 1/factor)``, which cancels down to ``freq / factor``: up to ``factor``
    ulps on the interpolated pairs. Measured: 7.7e-7 at base 1e6, 1.8e-6 for gpt-oss's yarn x32, 2.4e-6 at x64."""
    base = float(model_of._dynamic_base(rope, prompt)) if rope.type == "dynamic" else rope.base
    cancelled = rope.factor if rope.type == "yarn" else 0.0
    return (math.log2(base) + 4 + cancelled) * 2.0**-24


CASES = [(name, variant, c) for name, cfg in CORPUS.items() for variant, c in variants(cfg).items()]


def test_the_pin_and_the_architectures_are_lmdeploys() -> None:
    assert lh.LMDEPLOY_VERSION == model_of.VERSION == installed.version()
    assert lh.supported_archs() == model_of.SUPPORTED_ARCHS


def test_the_corpus_has_each_kind_of_turbomind_model() -> None:
    assert {"llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gpt-oss-20b", "qwen3.5-9b", "mixtral-8x7b-v0.1",
            "qwen2.5-vl-7b-instruct"} <= set(CORPUS)


@pytest.mark.parametrize(("name", "variant", "cfg"), CASES, ids=[f"{n}-{v}" for n, v, _ in CASES])
def test_turbomind_parses_what_posenc_says(name: str, variant: str, cfg: dict[str, Any]) -> None:
    """lmdeploy's own parser and posenc's copy fill the same RopeConfig, and the modelled run equals the installed
    run (the installed one parses with lmdeploy's code)."""
    theirs = lh.their_rope(cfg)
    model = describe(cfg)
    window = model.max_position_embeddings or 0
    for g in rope_groups(model):
        p = g.spec.params
        ours = model_of.parse(dict(p), float(p.get("rope_theta", 10000.0)), g.spec.head_dim, window)
        assert ours == theirs
    for length in (window, 4 * window):
        modelled = model_of.run(model, cfg, length)
        run = installed.run(model, cfg, length)
        assert modelled.refusal == run.refusal is None
        for a, b in zip(modelled.groups, run.groups, strict=True):
            assert a.inv_freq is not None and b.inv_freq is not None
            np.testing.assert_array_equal(a.inv_freq, b.inv_freq)
            assert a.attention_factor == b.attention_factor


def test_longrope_does_not_start() -> None:
    """TurboMind's parser raises on LongRoPE: lmdeploy's own, and posenc's run says so."""
    cfg = load("tests/corpus/llama-3.1-8b-instruct.json")
    half = 64
    rope = {"rope_type": "longrope", "short_factor": [1.0] * half, "long_factor": [4.0] * half,
            "original_max_position_embeddings": 32768}
    cfg = with_rope(cfg, rope, max_position_embeddings=131072)
    with pytest.raises(RuntimeError, match="Unsupported rope type: longrope"):
        lh.their_rope(cfg)
    modelled = model_of.run(describe(cfg), cfg, 131072)
    assert modelled.refusal == installed.run(describe(cfg), cfg, 131072).refusal
    assert modelled.refusal is not None and modelled.refusal.startswith("will not start")


def test_the_qwen_card_patch_gets_factor_1_and_the_attention_factor_of_4() -> None:
    """The issue's claim, on lmdeploy's own parser: yarn x4 from 32k with max_position_embeddings left at 32k is
    factor 32768/32768 = 1 (frequencies unscaled) with the attention factor of factor 4 (x1.1386 on cos/sin, the
    logits x1.296); transformers scales by 4."""
    qwen = load("tests/corpus/qwen2.5-7b-instruct.json")
    card = with_rope(qwen, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    theirs = lh.their_rope(card)
    assert theirs.factor == 1.0 and theirs.max_position_embeddings == 32768
    assert theirs.yarn_attention_factor == pytest.approx(0.1 * math.log(4) + 1, rel=1e-12)
    inv, attention = model_of.frequencies(theirs, 32768)
    plain, _ = model_of.frequencies(lh.their_rope(qwen), 32768)
    np.testing.assert_array_equal(inv, plain)
    assert attention**2 == pytest.approx(1.2965, abs=1e-4)
    reference = hf.run(describe(card), card, 131072)
    (ref,) = reference.groups
    assert ref.inv_freq is not None
    # against transformers: the interpolated pairs turn 4x faster (relative difference 3, to float32 rounding)
    assert float(relative_difference(ref.inv_freq, inv).max()) == pytest.approx(3.0, abs=1e-5)
    # the override posenc's run carries makes lmdeploy's own parser give transformers' yarn x4
    run = model_of.run(describe(card), card, 131072)
    over = json.loads(run.invocation[run.invocation.index("--hf-overrides") + 1])
    fixed = lh.their_rope(card, over)
    assert (fixed.factor, fixed.max_position_embeddings) == (4.0, 32768)
    assert compare(reference, run).verdict == "same"


def test_gpt_oss_gets_the_range_from_the_window_and_always_rounded() -> None:
    """gpt-oss (yarn x32 from 4k, window 128k, truncate false): TurboMind computes the correction range from 131072,
    not 4096, and floors/ceils it; its numbers are transformers' for a yarn whose original is the window, rounded."""
    cfg = load("tests/corpus/gpt-oss-20b.json")
    theirs = lh.their_rope(cfg)
    assert (theirs.factor, theirs.max_position_embeddings) == (32.0, 131072)
    inv, attention = model_of.frequencies(theirs, 131072)
    from posenc_cli.rope.frequencies import RopeSpec, compute

    p = describe(cfg).layers[0].params
    as_if = compute(RopeSpec({**p, "original_max_position_embeddings": 131072, "truncate": True}, 64, 131072))
    assert float(relative_difference(as_if.inv_freq, inv).max()) <= float32_bound(theirs, 131072)
    assert attention == pytest.approx(0.1 * math.log(32) + 1, rel=1e-12)


def test_dynamic_is_transformers_base_at_the_prompt_length() -> None:
    """TurboMind fixes the dynamic base per request at its prompt length: for a prompt of 4x the window it is
    transformers' base for that sequence; shorter prompts keep theta."""
    cfg = with_rope(load("tests/corpus/llama-3.1-8b-instruct.json"), {"rope_type": "dynamic", "factor": 4.0},
                    max_position_embeddings=8192)
    model = describe(cfg)
    rope = lh.their_rope(cfg)
    for prompt in (8192, 20000, 32768):
        ours = model_of.run(model, cfg, 32768, prompt)
        ref = hf.run(model, cfg, prompt)
        (a,), (b,) = ours.groups, ref.groups
        assert a.inv_freq is not None and b.inv_freq is not None
        assert float(relative_difference(b.inv_freq, a.inv_freq).max()) <= float32_bound(rope, prompt)
    base = float(model_of._dynamic_base(rope, 32768))
    assert base == pytest.approx(500000.0 * 13 ** (128 / 126), rel=1e-6)  # 4 * 32768/8192 - 3 = 13


# --- posenc scale --engine lmdeploy, fed back through lmdeploy's own override merge and parser -------------------

def _scale(*args: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    from clihelpers import ok, run

    patched = json.loads(ok(run("scale", *args, "--engine", "hf-v5")).stdout)
    argv = shlex.split(ok(run("scale", *args, "--engine", "lmdeploy")).stdout)
    over = json.loads(argv[argv.index("--hf-overrides") + 1])
    return patched, over, int(argv[argv.index("--session-len") + 1])


RENDERED = [
    ("yarn", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("yarn", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--target", "128k", "--attention-factor", "1.2"),
    ("linear", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("dynamic", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("llama3", "--config", "tests/corpus/llama-3.1-8b-instruct.json", "--target", "256k"),
    ("yarn", "--config", "tests/corpus/llama-3.1-8b-instruct.json", "--target", "256k"),
]


@pytest.mark.parametrize("args", RENDERED, ids=[" ".join(a[:1] + a[3:]) for a in RENDERED])
def test_the_rendered_override_makes_turbomind_compute_transformers_numbers(
        args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``--hf-overrides`` posenc prints, merged into the model's config by lmdeploy's own override_hf_config and
    parsed by its own parser, gives transformers' numbers for the config.json posenc writes for the same request."""
    monkeypatch.chdir(ROOT)
    patched_keys, over, session = _scale(*args)
    cfg = load(args[2])
    patched = {**cfg, **patched_keys}
    patched.pop("rope_scaling", None) if "rope_parameters" in patched_keys else None
    model = describe(patched)
    (ref,) = hf.run(model, patched, session).groups
    rope = lh.their_rope(cfg, over)
    inv, attention = model_of.frequencies(rope, session)
    assert ref.inv_freq is not None
    assert float(relative_difference(ref.inv_freq, inv).max()) <= float32_bound(rope, session)
    assert attention == pytest.approx(ref.attention_factor, rel=1e-12)


def test_truncate_false_is_rounded_through_the_override_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt-oss to 256k: posenc's override gives TurboMind the factor and range transformers uses, but TurboMind rounds
    the range; the caveat says so and the numbers equal transformers' with truncate true."""
    from clihelpers import ok, run

    monkeypatch.chdir(ROOT)
    args = ("yarn", "--config", "tests/corpus/gpt-oss-20b.json", "--target", "256k", "--fine-tuned")
    done = ok(run("scale", *args, "--engine", "lmdeploy"))
    assert "always rounds YaRN's correction range" in done.stderr
    patched_keys, over, session = _scale(*args)
    cfg = load(args[2])
    patched = {k: v for k, v in {**cfg, **patched_keys}.items() if k != "rope_scaling"}
    truncated = copy.deepcopy(patched)
    truncated["rope_parameters"]["truncate"] = True
    rope = lh.their_rope(cfg, over)
    inv, _ = model_of.frequencies(rope, session)
    (exact,) = hf.run(describe(patched), patched, session).groups
    (rounded,) = hf.run(describe(truncated), truncated, session).groups
    assert rounded.inv_freq is not None and exact.inv_freq is not None
    assert float(relative_difference(rounded.inv_freq, inv).max()) <= float32_bound(rope, session)
    assert float(relative_difference(exact.inv_freq, inv).max()) > 1e-3
