"""LMDeploy 0.18.0 for the engine tests: the pinned version, and TurboMind's own rope parser run on a config.

lmdeploy goes in without its dependencies (they would pull a CUDA torch and CUDA libraries): TurboMind's parser is
plain Python in ``lmdeploy/turbomind/models/utils.py``, run by :mod:`posenc_cli.engines.installed.lmdeploy` from the
installed file (the CUDA extension and lmdeploy's serving dependencies are never imported). Nothing of lmdeploy's
kernel runs here: its frequencies are posenc's model (:func:`posenc_cli.engines.lmdeploy.frequencies`).
"""

from __future__ import annotations

from typing import Any

from posenc_cli.engines import lmdeploy as model_of
from posenc_cli.engines.installed import lmdeploy as installed

LMDEPLOY_VERSION = "0.18.0"
#: .ci/run installs these with --no-deps
PIP_NO_DEPS = (f"lmdeploy=={LMDEPLOY_VERSION}",)


def available() -> bool:
    return installed.version() == LMDEPLOY_VERSION


def their_rope(cfg: dict[str, Any], overrides: dict[str, Any] | None = None) -> model_of.TurboMindRope:
    """The ``RopeConfig`` lmdeploy's own ``parse_rope_param``/``copy_rope_config`` fill for ``cfg`` served with
    ``--hf-overrides overrides`` (merged by lmdeploy's own ``override_hf_config``)."""
    return installed._parsed(cfg, overrides)


def supported_archs() -> tuple[str, ...]:
    return installed._supported_archs()
