"""``posenc verify --config``: a real model's RoPE, per layer group, in the dtype it runs in (numpy).

The numeric core is :mod:`posenc_cli.rope.verify` (:func:`~posenc_cli.rope.verify.precision_section`); this module
takes a :class:`~posenc_cli.models.model_positions.ModelPositions`, builds each group's frequencies as ``posenc
inspect`` does and runs that core on them up to the window the group serves.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from posenc_cli.errors import PosencError
from posenc_cli.models.model_positions import ModelPositions
from posenc_cli.models.record import rope_groups
from posenc_cli.rope.frequencies import compute
from posenc_cli.rope.precision import DTYPE_NAMES, default_tolerance
from posenc_cli.rope.verify import Precision, precision_section


@dataclass
class GroupPrecision:
    """The precision section for one group of layers that share a rotary embedding."""

    layer: str
    rope_type: str
    theta: float
    rotary_dim: int
    head_dim: int
    attention_factor: float
    max_position: int
    precision: Precision

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "precision"}
        out["precision"] = self.precision.as_dict()
        return out


@dataclass
class ModelVerifyReport:
    """``posenc verify --config``: a real model's RoPE, per layer group, in the dtype it runs in."""

    model_type: str | None
    dtype: str
    dtype_source: str
    tolerance: float
    groups: list[GroupPrecision]

    @property
    def passed(self) -> bool:
        return all(g.precision.passed for g in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "model_type": self.model_type, "dtype": self.dtype,
                "dtype_source": self.dtype_source, "tolerance": self.tolerance,
                "groups": [g.as_dict() for g in self.groups]}


def run_model(model: ModelPositions, *, dtype: str, dtype_source: str, max_position: int | None = None,
              tolerance: float | None = None, trials: int = 16, seed: int = 0) -> ModelVerifyReport:
    """Check each rope group of ``model`` in ``dtype`` up to its extended context (or ``max_position``).

    The frequencies and attention factor are the ones ``posenc inspect`` reports (the same
    :func:`posenc_cli.rope.frequencies.compute` call), taken at the window's top, so dynamic NTK and LongRoPE use
    their long-context spectrum.
    """
    if model.family != "rope":
        what = {"alibi": "ALiBi (a bias on attention scores, no rotation)",
                "learned": "learned absolute position embeddings",
                "sinusoidal": "fixed sinusoidal absolute positions",
                "relative_bias": "learned relative-position biases (T5 style)",
                "none": "no positional encoding"}.get(model.family, "no positional encoding posenc recognises")
        raise PosencError(f"{{config}}: model_type {model.model_type!r} uses {what}, not RoPE; "
                          "verify {config} checks RoPE models", "config")
    if dtype not in DTYPE_NAMES:
        raise PosencError(f"{{dtype}} {dtype!r} is not known; use one of: {', '.join(DTYPE_NAMES)}", "dtype")
    if max_position is not None and max_position < 2:
        raise PosencError(f"{{max_position}} must be at least 2, got {max_position}", "max_position")
    if trials < 1:
        raise PosencError(f"{{trials}} must be at least 1, got {trials}", "trials")
    if tolerance is not None and (not math.isfinite(tolerance) or tolerance <= 0):
        raise PosencError(f"{{tolerance}} must be a finite number greater than 0, got {tolerance}", "tolerance")
    tol = default_tolerance(dtype) if tolerance is None else tolerance
    if not model.layers:
        raise PosencError(f"{{config}}: model_type {model.model_type!r} applies RoPE in no layer; nothing to verify",
                          "config")
    groups = []
    for group in rope_groups(model):
        spec, served = group.spec, group.window
        # dynamic NTK: as far as its factor was meant to reach
        window = max_position or (served.native if served else spec.max_position_embeddings)
        freqs = compute(spec, window, top_level=group.top_level)
        rng = np.random.default_rng(seed)
        section = precision_section(freqs.inv_freq, dtype, max_position=window, tolerance=tol, trials=trials,
                                    rng=rng, attention_factor=freqs.attention_factor)
        groups.append(GroupPrecision(group.name, spec.rope_type, spec.theta, spec.rotary_dim, spec.head_dim,
                                     freqs.attention_factor, window, section))
    return ModelVerifyReport(model.model_type, dtype, dtype_source, tol, groups)
