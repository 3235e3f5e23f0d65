"""SGLang (:data:`VERSION`, the one place its version is written) (``sglang/srt/layers/rotary_embedding/``,
``srt/configs/model_config.py``), as its own rotary classes measured on CPU in ``tests/engines/test_engine_harness.py``
(they need triton to import, so CI does not run them).

SGLang's rotary classes are an older fork of vLLM's: default, linear, llama3, YaRN (truncate honoured) and
DeepSeek YaRN build the same tables as vLLM and transformers. Three differences:

* dynamic NTK: one table of ``max_position_embeddings * factor`` rows with the base transformers uses for a sequence
  of that length, for every position (transformers grows its base from ``rope_theta`` per forward);
* LongRoPE switches per batch like transformers, one position later: a sequence of exactly ``original + 1`` tokens
  keeps the short factors (transformers: long);
* its YaRN takes an ``attn_factor`` multiplier and never reads transformers' ``attention_factor`` key.

SGLang reads the model's own rope dict, so no override can make its dynamic NTK or its LongRoPE boundary equal
transformers'; ``--context-length`` longer than the model's window needs
``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import vllm
from posenc_cli.engines.render import in_text_config, served_rope
from posenc_cli.engines.runs import EngineRun, GroupRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.files import dumps_json
from posenc_cli.rope.attention_factors import yarn_mscale

if TYPE_CHECKING:  # the reader loads only when an engine runs a model
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.models.record import RopeGroup

NAME = "sglang"
VERSION = "0.5.23"
ENV_LONG = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"


def _group(model: ModelPositions, g: RopeGroup, max_model_len: int, seq_len: int,
           warnings: list[str]) -> GroupRun:
    from posenc_cli.rope.frequencies import compute

    spec, p = g.spec, g.spec.params
    rope_type = p.get("rope_type", "default")
    if rope_type == "dynamic":
        longest = int(spec.max_position_embeddings * float(p["factor"]))
        freqs = compute(spec, longest)
        return GroupRun(g.name, freqs.inv_freq, 1.0, model.softmax_scale)
    if rope_type == "longrope":
        original = int(p["original_max_position_embeddings"])
        warnings.append(f"SGLang switches to the long factors one position later than transformers: a sequence of "
                        f"exactly {original + 1:,} tokens keeps the short ones")
        # per batch, like transformers, but long only from original + 2 tokens
        freqs = compute(spec, seq_len if seq_len > original + 1 else min(seq_len, original))
        return GroupRun(g.name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale)
    group = vllm.group(model, g, max_model_len, [])
    if rope_type == "yarn" and p.get("attention_factor") is not None and model.text_model_type not in vllm.DEEPSEEK:
        warnings.append("SGLang's YaRN ignores attention_factor (it takes an attn_factor multiplier)")
        group.attention_factor = yarn_mscale(float(p.get("factor") or 1.0))
    return group


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the engine computes serving ``max_model_len``, for a sequence of ``seq_len`` tokens (default: that long)."""
    warnings: list[str] = []
    from posenc_cli.models.record import rope_groups  # numpy: only when a model is run

    groups = [_group(model, g, max_model_len, seq_len or max_model_len, warnings) for g in rope_groups(model)]
    accepts = model.max_position_embeddings or max_model_len
    needs = [ENV_LONG] if max_model_len > accepts else []
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "MODEL", "--context-length", str(max_model_len)]
    if needs:
        argv = ["env", *needs, *argv]
    return EngineRun(NAME, VERSION, max_model_len, groups, argv, accepts=accepts, needs=needs,
                     warnings=list(dict.fromkeys(warnings)))


def request_invocation(rope: dict[str, Any], *, serve_len: int, trained_len: int, text_config: bool,
                       model_name: str = "MODEL") -> tuple[list[str], list[str]]:
    """argv for ``sglang.launch_server`` serving a new rope dict at ``serve_len``, and caveats.

    ``--json-model-override-args`` replaces the rope dict whole (``rope_scaling``, an alias of transformers 5's
    ``rope_parameters``), so it carries all of it. Dynamic NTK keeps ``max_position_embeddings`` at the trained
    length: SGLang computes its one base for ``max_position_embeddings x factor`` tokens, which is then transformers'
    base at the serving length; the longer ``--context-length`` needs the override variable.
    """
    caveats: list[str] = []
    window = serve_len
    if rope.get("rope_type") == "dynamic":
        window = trained_len
        caveats.append(f"SGLang's dynamic NTK is one static base, transformers' for {serve_len} tokens, used at "
                       "every length (transformers grows its base from rope_theta)")
    if rope.get("rope_type") == "yarn" and rope.get("attention_factor") is not None:
        caveats.append("SGLang's YaRN ignores attention_factor: it applies 0.1 ln(factor) + 1")
    if rope.get("rope_type") == "longrope":
        caveats.append("SGLang switches to the long factors one token later than transformers")
    body: dict[str, Any] = {"rope_scaling": rope, "max_position_embeddings": window}
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model_name, "--json-model-override-args",
            dumps_json({"text_config": body} if text_config else body, indent=None), "--context-length", str(serve_len)]
    if serve_len > window:
        argv = ["env", ENV_LONG, *argv]
    return argv, caveats


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine sglang``: ``sglang.launch_server`` with the model's whole rope dict after the request."""
    argv, caveats = request_invocation(served_rope(r, replaces_dicts=True), serve_len=r.req.target,
                                       trained_len=r.req.original_max, text_config=in_text_config(r),
                                       model_name=r.model)
    return shlex.join(argv), caveats


TARGET = Target(
    NAME, "SGLang", "sglang", VERSION, render, run,
    proven_by="its rotary classes (skipped in CI: they need triton)",
    cannot_express="dynamic NTK (one table, transformers' base at `max_position_embeddings x factor`); LongRoPE "
                   "(switches one position later); YaRN's `attention_factor` (ignored); dual-chunk attention (not "
                   "modelled)")
