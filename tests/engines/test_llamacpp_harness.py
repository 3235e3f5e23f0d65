"""The llama.cpp harness itself: real llama.cpp (llama-cpp-python) against transformers on one tiny random llama.

A 2-layer llama (head_dim 16, 4 query / 2 key-value heads, vocabulary 128, trained context 256) is evaluated on 1024
token ids, so positions run to four times the trained length. Logits have an RMS of about 8.

Tolerance: ``TOL`` = 0.1 logits (1.25% of the logit RMS). Measured on four weight seeds, the two float32
implementations differ by at most 0.0073 (plain RoPE), 0.0016 (linear), 0.017 (YaRN, whose attention factor
sharpens attention) and 0.0086 (YaRN with attention factor 1); each of them is within 0.014 of a float64 forward
pass with float64 angles, so the disagreement is float32 rounding of the rotation angles (it grows with position),
amplified by sharp attention, not a different formula. 0.1 is 6x the largest disagreement. The smallest real
difference checked here, a freq_base of 10001 instead of 10000, moves the logits by 1.1 or more (asserted: 0.5);
every other mismatch moves them by 9.9 or more (asserted: ``MISMATCH`` = 5, 50 x TOL).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.numeric

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from llamacpp_harness import (  # noqa: E402
    ROPE_SCALING_LINEAR,
    ROPE_SCALING_NONE,
    ROPE_SCALING_YARN,
    hf_logits,
    llamacpp_logits,
    write_tiny_llama_gguf,
)

CTX_TRAIN = 256
N_TOKENS = 1024  # positions 0..1023: four times the trained context
FACTOR = 4.0
BASE = 10000.0
TOL = 0.1
MISMATCH = 50 * TOL
#: what llama.cpp's kernel multiplies into YaRN's cos/sin on its own, so an attention factor of 1 needs this one
YARN_ATTN_1 = 1.0 / (1.0 + 0.1 * math.log(FACTOR))
YARN_KWARGS: dict[str, Any] = {"rope_scaling_type": ROPE_SCALING_YARN, "rope_freq_scale": 1.0 / FACTOR,
                               "yarn_orig_ctx": CTX_TRAIN}
YARN_HF: dict[str, Any] = {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": CTX_TRAIN}


class Tiny:
    """One tiny llama: GGUF files written from its seed on demand, its weights, its tokens, logits cached."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.weights = write_tiny_llama_gguf(folder / "plain.gguf", ctx_train=CTX_TRAIN, rope_freq_base=BASE)
        self.tokens = np.random.default_rng(100).integers(0, self.weights["lm_head.weight"].shape[0], N_TOKENS)
        self._hf: dict[str, np.ndarray] = {}

    def gguf(self, name: str = "plain", **options: Any) -> Path:
        path = self.folder / f"{name}.gguf"
        if not path.exists():
            write_tiny_llama_gguf(path, ctx_train=CTX_TRAIN, rope_freq_base=BASE, **options)
        return path

    def llamacpp(self, gguf: Path | None = None, **kwargs: Any) -> np.ndarray:
        return llamacpp_logits(gguf or self.gguf(), self.tokens, n_ctx=N_TOKENS, **kwargs)

    def hf(self, **rope: Any) -> np.ndarray:
        params = {"rope_type": "default", "rope_theta": BASE, **rope}
        key = repr(sorted(params.items()))
        if key not in self._hf:
            self._hf[key] = hf_logits(self.weights, self.tokens, hf_config_overrides={
                "rope_parameters": params, "max_position_embeddings": N_TOKENS})
        return self._hf[key]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return Tiny(tmp_path_factory.mktemp("llamacpp"))


def max_diff(a: np.ndarray, b: np.ndarray, start: int = 0) -> float:
    """Largest absolute logit difference at positions ``start`` and later."""
    assert a.shape == b.shape == (N_TOKENS, 128)
    assert np.isfinite(a).all() and np.isfinite(b).all()
    return float(np.abs(a[start:] - b[start:]).max())


def test_plain_rope_agrees(tiny: Tiny) -> None:
    ours, theirs = tiny.llamacpp(), tiny.hf()
    rms = float(np.sqrt(np.mean(theirs**2)))
    assert 6.0 < rms < 10.0, f"logit RMS {rms}: TOL was chosen for an RMS of about 8"
    assert max_diff(ours, theirs) <= TOL


@pytest.mark.parametrize(("base", "at_least"), [(20000.0, MISMATCH), (10001.0, 5 * TOL)])
def test_wrong_freq_base_is_caught(tiny: Tiny, base: float, at_least: float) -> None:
    """llama.cpp with ``--rope-freq-base`` other than the model's: far outside TOL past the trained context."""
    assert max_diff(tiny.llamacpp(rope_freq_base=base), tiny.hf(), start=CTX_TRAIN) >= at_least


def test_scaling_type_none_ignores_freq_scale(tiny: Tiny) -> None:
    """llama-context.cpp: rope_scaling_type none forces freq_scale 1, whatever was asked."""
    assert max_diff(tiny.llamacpp(rope_scaling_type=ROPE_SCALING_NONE, rope_freq_scale=1.0 / FACTOR), tiny.hf()) <= TOL


@pytest.mark.parametrize("route", ["freq_scale", "linear_type", "gguf"])
def test_linear_scaling_agrees(tiny: Tiny, route: str) -> None:
    """rope_freq_scale 1/4 (alone, with type linear, or from GGUF rope.scaling keys) = transformers linear 4."""
    if route == "freq_scale":
        ours = tiny.llamacpp(rope_freq_scale=1.0 / FACTOR)
    elif route == "linear_type":
        ours = tiny.llamacpp(rope_scaling_type=ROPE_SCALING_LINEAR, rope_freq_scale=1.0 / FACTOR)
    else:
        ours = tiny.llamacpp(tiny.gguf("linear", scaling={"type": "linear", "factor": FACTOR}))
    theirs = tiny.hf(rope_type="linear", factor=FACTOR)
    assert max_diff(ours, theirs) <= TOL
    assert max_diff(ours, tiny.hf()) >= MISMATCH


@pytest.mark.parametrize("route", ["kwargs", "gguf"])
def test_yarn_agrees(tiny: Tiny, route: str) -> None:
    """YaRN 4 (truncate, beta 32/1): llama.cpp's context parameters or GGUF keys = transformers' yarn."""
    if route == "kwargs":
        ours = tiny.llamacpp(**YARN_KWARGS)
    else:
        ours = tiny.llamacpp(tiny.gguf("yarn", scaling={"type": "yarn", "factor": FACTOR,
                                                         "original_context_length": CTX_TRAIN}))
    assert max_diff(ours, tiny.hf(**YARN_HF)) <= TOL
    assert max_diff(ours, tiny.hf(rope_type="linear", factor=FACTOR)) >= MISMATCH


def test_yarn_truncate_false_differs(tiny: Tiny) -> None:
    """llama.cpp always floors/ceils the correction range (ggml_rope_yarn_corr_dims): transformers' truncate=False
    (range 0.21..3.22 instead of 0..4 here) is something llama.cpp cannot run."""
    ours = tiny.llamacpp(**YARN_KWARGS)
    assert max_diff(ours, tiny.hf(**YARN_HF, truncate=False), start=CTX_TRAIN) >= MISMATCH


@pytest.mark.parametrize("route", ["kv_overrides", "gguf"])
def test_yarn_attention_factor_via_attn_factor_key(tiny: Tiny, route: str) -> None:
    """transformers attention_factor 1.0 = llama.cpp with ``llama.rope.scaling.attn_factor`` 1/(1 + 0.1 ln 4), from
    kv_overrides (``--override-kv``) or written in the GGUF."""
    if route == "kv_overrides":
        ours = tiny.llamacpp(**YARN_KWARGS, kv_overrides={"llama.rope.scaling.attn_factor": YARN_ATTN_1})
    else:
        ours = tiny.llamacpp(tiny.gguf("yarn-attn", scaling={"type": "yarn", "factor": FACTOR,
                                                              "original_context_length": CTX_TRAIN,
                                                              "attn_factor": YARN_ATTN_1}))
    assert max_diff(ours, tiny.hf(**YARN_HF, attention_factor=1.0)) <= TOL
    assert max_diff(ours, tiny.hf(**YARN_HF)) >= MISMATCH


@pytest.mark.parametrize("route", ["yarn_attn_factor", "gguf_yarn_attn_factor"])
def test_yarn_attn_factor_is_ignored(tiny: Tiny, route: str) -> None:
    """``yarn_attn_factor`` (``--yarn-attn-factor``) and the GGUF key ``llama.rope.scaling.yarn_attn_factor`` (what
    convert_hf_to_gguf.py writes for attention_factor) change nothing: with YaRN on, llama-context.cpp overwrites
    the attention factor; the llama architecture does not even read that key. Bit-identical to plain YaRN."""
    plain_yarn = tiny.llamacpp(**YARN_KWARGS)
    if route == "yarn_attn_factor":
        ours = tiny.llamacpp(**YARN_KWARGS, yarn_attn_factor=YARN_ATTN_1)
    else:
        ours = tiny.llamacpp(tiny.gguf("yarn-yarn-attn", scaling={"type": "yarn", "factor": FACTOR,
                                                                   "original_context_length": CTX_TRAIN,
                                                                   "yarn_attn_factor": 1.0}))
    assert np.array_equal(ours, plain_yarn)
    assert max_diff(ours, tiny.hf(**YARN_HF, attention_factor=1.0)) >= MISMATCH


def test_yarn_beta_fast_kwarg_is_honoured_gguf_key_is_not(tiny: Tiny) -> None:
    """beta_fast 8: the context parameter (``--yarn-beta-fast``) matches transformers; the GGUF key
    ``llama.rope.scaling.yarn_beta_fast`` is not read for the llama architecture (only grok, mistral3)."""
    theirs = tiny.hf(**YARN_HF, beta_fast=8.0)
    assert max_diff(tiny.llamacpp(**YARN_KWARGS, yarn_beta_fast=8.0), theirs) <= TOL
    from_key = tiny.llamacpp(tiny.gguf("yarn-beta", scaling={"type": "yarn", "factor": FACTOR,
                                                              "original_context_length": CTX_TRAIN,
                                                              "yarn_beta_fast": 8.0}))
    assert np.array_equal(from_key, tiny.llamacpp(**YARN_KWARGS))
    assert max_diff(from_key, theirs) >= MISMATCH


def test_llama3_rope_freqs_tensor_agrees(tiny: Tiny) -> None:
    """Llama 3 scaling = a ``rope_freqs.weight`` tensor of per-frequency divisors, computed as convert_hf_to_gguf.py
    (conversion/llama.py, generate_extra_tensors) does."""
    factor, low, high = 8.0, 1.0, 4.0
    head_dim = 16
    inv_freq = 1.0 / (BASE ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    divisors = []
    for freq in inv_freq:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < CTX_TRAIN / high:
            divisors.append(1.0)
        elif wavelen > CTX_TRAIN / low:
            divisors.append(factor)
        else:
            smooth = (CTX_TRAIN / wavelen - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    ours = tiny.llamacpp(tiny.gguf("llama3", rope_freqs=np.array(divisors, dtype=np.float32)))
    theirs = tiny.hf(rope_type="llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                     original_max_position_embeddings=CTX_TRAIN)
    assert max_diff(ours, theirs) <= TOL
    assert max_diff(tiny.llamacpp(), theirs) >= MISMATCH
