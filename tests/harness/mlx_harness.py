"""Run MLX-LM's own code on mlx's CPU backend (a plain helper module, imported as ``from mlx_harness import ...``).

Pinned versions (``.ci/run`` installs them from here): ``pip install mlx[cpu]==MLX_VERSION`` and
``pip install --no-deps mlx-lm==MLX_LM_VERSION`` plus :data:`MLX_LM_DEPS` (transformers and numpy are this
project's own).

* :func:`available`: both import (tests skip cleanly otherwise).
* :func:`kernel_angles`: the angle per position step mx.fast.rope itself applies for a captured call (position 1,
  read back with atan2 from the rotated unit vectors), and the pairing it uses.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import numpy as np

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
#: mlx-lm 0.32.2's declared requirements beyond numpy and transformers (its package import loads its tokenizer and
#: generation modules); .ci/run installs them
MLX_LM_DEPS = ("jinja2", "protobuf", "pyyaml", "sentencepiece")
#: mlx_lm/models/*.py that are helpers, not model files
HELPER_FILES = frozenset({"activations", "base", "bitlinear_layers", "cache", "gated_delta", "mla", "pipeline",
                          "rope_utils", "ssm", "switch_layers"})


@functools.lru_cache(maxsize=1)
def available() -> bool:
    if importlib.util.find_spec("mlx") is None or importlib.util.find_spec("mlx_lm") is None:
        return False
    try:
        import mlx.core  # noqa: F401
        import mlx_lm.models.rope_utils  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def model_files() -> set[str]:
    """The model files of the installed mlx-lm (``mlx_lm/models/*.py`` less helpers)."""
    from pathlib import Path

    import mlx_lm.models

    folder = Path(mlx_lm.models.__file__).parent
    return {p.stem for p in folder.glob("*.py")} - HELPER_FILES - {"__init__"}


def kernel_angles(call: dict[str, Any]) -> tuple[np.ndarray, str]:
    """(angle per position step per pair, ``half`` or ``interleaved``) as ``mx.fast.rope`` computes for ``call``
    (the arguments a rope module passed, from ``posenc_cli.engines.installed.mlx_lm.probe``). The probe puts a 1 on
    each pair's first feature; at position 1 the pair holds (cos, sin) of the angle."""
    import mlx.core as mx

    dims = int(call["dims"])
    half = dims // 2
    out = {}
    for layout, traditional in (("rotate-half", False), ("interleaved", True)):
        first = np.zeros(dims, dtype=np.float32)
        if traditional:
            first[0::2] = 1
        else:
            first[:half] = 1
        freqs = None if call["freqs"] is None else mx.array(call["freqs"])
        y = np.array(mx.fast.rope(mx.array(first.reshape(1, 1, 1, dims)), dims, traditional=bool(call["traditional"]),
                                  base=call["base"], scale=call["scale"], offset=1, freqs=freqs),
                     dtype=np.float64).reshape(dims)
        c, s = (y[0::2], y[1::2]) if traditional else (y[:half], y[half:])
        out[layout] = (np.arctan2(s, c), float(np.abs(np.hypot(c, s) - 1).max()))
    layout = "interleaved" if call["traditional"] else "rotate-half"
    angles, norm_error = out[layout]
    assert norm_error < 1e-6, norm_error  # the probe's pairs are the kernel's pairs
    return angles, layout


# --- tiny models and their caches (tests/engines/test_memory_mlx_lm.py) -------------------------------------------

def twin(config: dict[str, Any], layers: int = 8, **text_changes: Any) -> dict[str, Any]:
    """A tiny random twin of ``config`` as mlx-lm reads it: its text part (``text_config`` of a wrapper, kept in
    place) shrunk as the per-layer rotation sweep shrinks a config (``generate_layer_rotation.shrink``: at most 4
    heads, tiny sizes, the layer pattern over the first ``layers`` layers), a one-letter-per-layer pattern string
    (Nemotron-H's ``hybrid_override_pattern``) cut alike, then ``text_changes``. Vision and audio parts dropped."""
    import copy

    from generate_layer_rotation import shrink

    out = copy.deepcopy(config)
    inner = out.get("text_config")
    text = shrink(inner if isinstance(inner, dict) else out, layers)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) > layers:
        text["hybrid_override_pattern"] = pattern[:layers]
        text["num_hidden_layers"] = layers
    text.update(text_changes)
    if isinstance(inner, dict):
        out["text_config"] = text
        for key in ("vision_config", "audio_config", "torch_dtype", "dtype"):
            out.pop(key, None)
        text.setdefault("vocab_size", 256)  # a partial text_config (Gemma 3 4B) takes the class's 262208
        out["vocab_size"] = text["vocab_size"]  # Gemma 3's wrapper writes its own into text_config
        text.setdefault("tie_word_embeddings", out.get("tie_word_embeddings", False))
        return out
    return text


def build(config: dict[str, Any], dtype: str = "float32") -> Any:
    """mlx-lm's model for ``config`` with random weights, cast to ``dtype`` as ``mlx_lm.convert`` casts (the model's
    ``cast_predicate``), evaluated."""
    import mlx.core as mx
    from mlx.utils import tree_map_with_path
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config=config)
    model = model_class(args_class.from_dict(config))
    keep = getattr(model, "cast_predicate", lambda _: True)
    target = getattr(mx, dtype)
    model.update(tree_map_with_path(
        lambda k, v: v.astype(target) if keep(k) and mx.issubdtype(v.dtype, mx.floating) else v, model.parameters()))
    mx.eval(model.parameters())
    return model


def prefill(model: Any, tokens: int, max_kv_size: int | None = None, **settings: Any) -> list[Any]:
    """The prompt cache after ``mlx_lm.generate``'s ``generate_step`` runs a prompt of ``tokens`` tokens and
    generates nothing (``max_tokens=0``), with its settings (``kv_bits``, ``kv_group_size``,
    ``quantized_kv_start``, ``prefill_step_size``)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model, max_kv_size=max_kv_size)
    prompt = mx.array([i % 97 + 1 for i in range(tokens)], dtype=mx.int32)
    for _ in generate_step(prompt, model, prompt_cache=cache, max_tokens=0, **settings):
        pass
    return list(cache)


def layer_nbytes(cache: list[Any]) -> list[int]:
    """Each cache's ``nbytes`` (mlx-lm's own accounting, which ``LRUPromptCache`` adds up)."""
    return [int(c.nbytes) for c in cache]
