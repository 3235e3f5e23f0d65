"""A toy engine for the registry's test: one module exporting one record, registered by a monkeypatched entry
(``tests/frameworks/test_registry.py``) without touching any other file. It serves transformers' numbers."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from posenc_cli.engines import hf
from posenc_cli.engines.runs import EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.files import dumps_json
from posenc_cli.models.model_positions import ModelPositions
from posenc_cli.rope.scaling import rope_parameters

NAME = "toy"


def render(r: Rendering) -> tuple[str, list[str]]:
    rope = dumps_json(rope_parameters(r.req), indent=None)
    return shlex.join(["toy-serve", r.model, "--rope", rope, "--context", str(r.req.target)]), ["a toy caveat"]


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    served = hf.run(model, cfg, max_model_len, seq_len)
    return replace(served, engine=NAME, version=TARGET.version, invocation=["toy-serve", "MODEL"], warnings=[])


TARGET = Target(NAME, "Toy", "toy-engine", "0.1", render, run, proven_by="nothing (a test's engine)",
                cannot_express="anything but transformers' own numbers")
