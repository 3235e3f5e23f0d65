"""``posenc audit``: check an exported checkpoint's config.json against the settings it was trained with."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from posenc_cli.cli.options import hidden_alias, one_of, options_as_typed, or_list
from posenc_cli.cli.output import note, print_json
from posenc_cli.errors import ExitCode
from posenc_cli.files import dumps_config, write_output_text
from posenc_cli.frameworks.audit import audit_checkpoint, frameworks
from posenc_cli.trainers.audit import Audit


def audit(
    checkpoint: Annotated[str, typer.Argument(
        help="The exported checkpoint: its folder, its config.json, or any source posenc reads (a Hub id).")],
    trained_with: Annotated[str, typer.Option(
        "--trained-with", help="The training settings: a LLaMA-Factory or axolotl YAML, Megatron-LM arguments (a "
        "shell script or flags file), a torchtitan TOML, a posenc plan (posenc pick --json), or the model "
        "config.json the run loaded (HF Trainer, TRL, Unsloth).")],
    framework: Annotated[str | None, typer.Option(
        help=f"{or_list(frameworks())}.",
        show_default="from the file: .yaml by its keys, .toml torchtitan, .json a posenc plan or (model keys) "
        "hf-config, else megatron")] = None,
    base_model: Annotated[str | None, typer.Option(
        help="The base model's config (any source) for LLaMA-Factory, which scales from the base's own length.",
        show_default="model_name_or_path when it is a local path, else the checkpoint's config")] = None,
    base: Annotated[str | None, hidden_alias("--base", "--base-model")] = None,
    to: Annotated[str | None, typer.Option(
        help="Write the right config in transformers v4 (rope_scaling + rope_theta) or v5 (rope_parameters) form.",
        show_default="the checkpoint's own")] = None,
    write: Annotated[str | None, typer.Option(
        "--write", help="Write the config that would be right to this file (atomically) when a mismatch is found.",
        show_default="print its rope keys")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Report every mismatch between what a checkpoint's config.json makes engines compute and what it was trained
    with, and the config that would be right.

    Exit 0 when none is found, 1 when one is, 2 on bad input.
    """
    base_model, typed = one_of("base_model", (base_model, "--base-model"), (base, "--base"))
    with options_as_typed(typed):
        result = audit_checkpoint(checkpoint, trained_with, framework, base_model, to, writing=write is not None)
    shown = None
    if write is not None and result.fixed is not None:  # before any output: a failed write is the one error line
        shown = write_output_text(write, dumps_config(result.fixed) + "\n")
    if as_json:
        print_json(result.as_dict())
    else:
        _render(result)
    for line in result.trained.notes:
        note(f"note: {line}")
    if shown is not None:
        note(f"wrote {shown}")
    elif write is not None:
        note(f"no mismatch: {write} not written")
    if result.findings:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _render(result: Audit) -> None:
    t = result.trained
    out = [f"audit: {result.checkpoint} against {t.label}"]
    if t.rope is not None:
        nested = {k: v for k, v in t.rope.items() if isinstance(v, dict)}
        params = "; ".join(f"{k}: {_params(v)}" for k, v in nested.items()) if nested else _params(t.rope)
        window = f"; window {t.window}" if t.window is not None else ""
        out.append(f"trained with: {params}{window}")
    else:
        out.append("trained with: the model's own rope (the settings change none)")
    if not result.findings:
        out.append("ok: config.json carries the rope the model was trained with")
        sys.stdout.write("\n".join(out) + "\n")
        return
    n = len(result.findings)
    out.append(f"{n} mismatch{'es' if n > 1 else ''}:")
    out += [f"  {f.kind}{f' ({f.group})' if f.group else ''}: {f.message}" for f in result.findings]
    if result.numbers is not None:
        num = result.numbers
        where = f" ({num['group']})" if "group" in num else ""
        if "pairs_differing" in num:
            out.append(f"numbers{where}: {num['pairs_differing']} of {num['pairs']} frequency pairs differ (by up to "
                       f"{num['max_relative_difference']:.1%}); attention factor "
                       f"{num['attention_factor_exported']:.6g} served, {num['attention_factor_trained']:.6g} trained")
        else:
            out.append(f"numbers{where}: {num['exported_pairs']} frequency pairs served, {num['pairs']} trained")
    if result.fragment is not None:
        out.append("the config that would be right (its rope keys; --write FILE writes the whole config.json):")
        out.append(dumps_config(result.fragment))
    sys.stdout.write("\n".join(out) + "\n")


def _params(rope: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in rope.items())
