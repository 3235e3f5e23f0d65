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
