"""posenc: pick, scale, inspect and verify positional encodings.

The numeric API loads numpy on first use, so ``import posenc_cli`` (and the CLI start-up) stays cheap::

    from posenc_cli import apply_rope, rope_inv_freq, sinusoidal, alibi_slopes
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it; resolved lazily (PEP 562) so the CLI never pays for numpy up front
_EXPORTS = {
    "sinusoidal": "rope.encodings",
    "rope_inv_freq": "rope.encodings",
    "apply_rope": "rope.encodings",
    "to_half_layout": "rope.encodings",
    "to_interleaved_layout": "rope.encodings",
    "half_layout_permutation": "rope.encodings",
    "alibi_slopes": "rope.encodings",
    "alibi_bias": "rope.encodings",
    "PosencError": "errors",
    "CouldNotRun": "errors",
    "ExitCode": "errors",
    "parse_length": "units",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'posenc_cli' has no attribute {name!r}")
    return getattr(importlib.import_module(f"posenc_cli.{module}"), name)
