"""``posenc audit``: check an exported checkpoint's config.json against the settings it was trained with."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from posenc_cli.cli.output import note, print_json
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.files import dumps_config, write_output_text
from posenc_cli.models.sources import read_source
from posenc_cli.trainers.audit import Audit, base_model, takes_base, trained_rope
from posenc_cli.trainers.audit import audit as run_audit


def audit(
    checkpoint: Annotated[str, typer.Argument(
        help="The exported checkpoint: its folder, its config.json, or any source posenc reads (a Hub id).")],
    trained_with: Annotated[str, typer.Option(
        "--trained-with", help="The training settings: a LLaMA-Factory or axolotl YAML, Megatron-LM arguments (a "
        "shell script or flags file), a torchtitan TOML, a posenc plan (posenc pick --json), or the model "
        "config.json the run loaded (HF Trainer, TRL, Unsloth).")],
    framework: Annotated[str | None, typer.Option(
        help="llama-factory, megatron, axolotl, torchtitan, posenc-plan or hf-config.",
        show_default="from the file: .yaml by its keys, .toml torchtitan, .json a posenc plan or (model keys) "
        "hf-config, else megatron")] = None,
    base: Annotated[str | None, typer.Option(
        help="The base model's config (any source) for LLaMA-Factory, which scales from the base's own length.",
        show_default="model_name_or_path when it is a local path, else the checkpoint's config")] = None,
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
    if to is not None and to not in ("v4", "v5"):
        raise PosencError(f"--to {to!r} is not known; use v4 or v5")
    if not Path(trained_with).exists():
        raise PosencError(f"--trained-with {trained_with}: no such file")
    exported, label = _read_checkpoint(checkpoint)
    base_cfg = None
    if base is not None:
        base_cfg = _read_config(base)
    elif (local := base_model(trained_with, framework)) is not None:
        base_cfg = _read_config(local)
    trained = trained_rope(trained_with, exported, framework, base_cfg)
    if base is not None and not takes_base(trained.framework):
        raise PosencError(f"--base is for LLaMA-Factory settings; {trained_with} is {trained.framework}'s, which "
                          "name their rope themselves")
    result = run_audit(label, exported, trained, to)
    if write is not None and result.findings and result.fixed is None:
        raise PosencError(f"--write: there is no config.json in {label} to correct; merge the rope keys printed "
                          "without --write into the model's config")
    shown = None
    if write is not None and result.fixed is not None:  # before any output: a failed write is the one error line
        shown = write_output_text(write, dumps_config(result.fixed) + "\n")
    if as_json:
        print_json(result.as_dict())
    else:
        _render(result)
    for line in trained.notes:
        note(f"note: {line}")
    if shown is not None:
        note(f"wrote {shown}")
    elif write is not None:
        note(f"no mismatch: {write} not written")
    if result.findings:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _read_checkpoint(checkpoint: str) -> tuple[dict[str, Any] | None, str]:
    """(the exported config, its label); None for a checkpoint folder without config.json."""
    path = Path(checkpoint)
    if path.is_dir() and not (path / "config.json").exists():
        if not any(path.iterdir()):
            raise PosencError(f"{checkpoint} is an empty folder, not a checkpoint")
        return None, str(path)
    src = read_source(checkpoint)
    if src.gguf is not None:
        raise PosencError(f"{src.label} is a GGUF file; audit reads the transformers config.json an export writes")
    return src.config, src.label


def _read_config(source: str) -> dict[str, Any]:
    return read_source(source).config


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
