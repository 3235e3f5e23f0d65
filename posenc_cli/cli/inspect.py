"""``posenc inspect``: read a model from any source, report its positions per layer group, optionally lint it.

Parsing and rendering only: the reading, the report and the lint are :func:`posenc_cli.models.inspected.inspect_source`
(imported when the command runs: it loads numpy)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from posenc_cli.cli.options import LENGTHS
from posenc_cli.cli.output import note, print_json
from posenc_cli.errors import ExitCode
from posenc_cli.models.model_types import newer_transformers_notice

SourceArg = Annotated[str, typer.Argument(
    help="A config.json (or - for stdin), a model folder, a Hub id (Qwen/Qwen2.5-7B-Instruct) or a GGUF file.")]
RevisionOpt = Annotated[str | None, typer.Option(help="Hub revision (branch, tag or commit) for a Hub id.",
                                                  show_default="main")]


def inspect(
    source: SourceArg,
    revision: RevisionOpt = None,
    seq_len: Annotated[str | None, typer.Option(
        help=f"Sequence length for dynamic / longrope (4k, 128k); {LENGTHS}.", show_default="the model's window")
    ] = None,
    lint: Annotated[bool, typer.Option(
        help="Check the config for problems engines trip on; exit 1 if any (warnings alone: 0).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Report what a model's positional encoding really does, per layer group, numbers included."""
    from posenc_cli.models.inspected import inspect_source

    inspected = inspect_source(source, revision, seq_len, lint=lint, note=note)
    if as_json:
        print_json(inspected.result)
    else:
        _render(inspected.result)
        if inspected.problems is not None:
            _render_lint(inspected.problems, inspected.oldest)
    if inspected.code != ExitCode.OK:
        raise typer.Exit(inspected.code)


def _render(r: dict[str, Any]) -> None:
    from posenc_cli.models.inspection import layer_ranges

    # plain text: values come from the config file, and a wrapped slope list would not paste back
    layers = f"   layers: {r['num_layers']}" if r.get("num_layers") else ""
    named = r.get("model_type") or "none given"  # the note below says what it was read as
    out = [f"model_type: {named}   family: {r['family']}{layers}"]
    out += [f"note: {n}" for n in r.get("notes", [])]
    if "engine_reading" in r:
        out += _engine_lines(r["engine_reading"])
    if r["family"] != "rope":
        if r.get("alibi_slopes"):
            out.append(f"slopes ({r['num_heads']} heads): " + ", ".join(f"{s:.6g}" for s in r["alibi_slopes"]))
        out.append(r["summary"])
    many = len(r.get("layers", [])) + len(r.get("no_rope", [])) > 1
    for layer in r.get("layers", []):
        if many:
            n = len(layer["layers"]) if layer["layers"] is not None else "?"
            out.append(f"[{layer['layer']}] layers {layer_ranges(layer['layers'])} ({n})")
        window, original = layer["native_window"], layer["original_length"]
        lines = [
            ("rope type", layer["rope_type"]),
            ("rope_theta", f"{layer['rope_theta']:g}"),
            ("rotary dims", f"{layer['rotary_dim']} of head_dim {layer['head_dim']} "
                            f"(partial_rotary_factor {layer['partial_rotary_factor']:g}; "
                            f"{layer['rotating_pairs']} pairs turn)"),
            ("parameters", ", ".join(f"{k}={v}" for k, v in layer["parameters"].items()) or "none"),
            ("native window", "unbounded (dynamic NTK)" if window is None else f"{window:,}" + (
                f" ({layer['window_basis']})" if window != r.get("max_position_embeddings") else "")),
            ("original length", f"{original:,}" if original is not None else "not named by the config"),
            ("attention factor", f"{layer['attention_factor']:.6f} (logits x {layer['logit_multiplier']:.6f})"),
            ("wavelengths", f"{layer['wavelength_min']:,.2f} .. {layer['wavelength_max']:,.1f} positions; "
                            f"{layer['pairs_longer_than_original']} pairs longer than "
                            f"{'the original length' if original else 'the window'}"),
        ]
        if "bands" in layer:
            lines.append(("bands", ", ".join(f"{n} {b}" for b, n in layer["bands"].items())))
        if layer["rope_type"] in ("dynamic", "longrope"):
            # no --seq-len: what transformers builds at init, before any sequence is seen
            at = "as built" if layer["seq_len"] is None else f"at seq_len {layer['seq_len']:,}"
            d = layer["details"]
            if layer["rope_type"] == "dynamic":
                lines.append((at, f"effective theta {d['effective_theta']:,.1f}"))
            else:
                lines.append((at, f"{d['factors_used']} factors (long above {d['switch_above']:,})"))
        out += [f"{key:>17}: {value}" for key, value in lines]
        if layer.get("window_fact"):
            out.append(f"note: window from {layer['window_fact']}")
    if r.get("serving"):  # the length it was trained at, apart from the window it serves training-free
        out.append(f"   trained length: {r['trained_length']:,}; {r['serving']}")
        out += [line for line in (r.get("trained_note") or "").splitlines() if "training-free" in line]
    for group in r.get("no_rope", []):
        n = len(group["layers"]) if group["layers"] is not None else "?"
        out.append(f"[{group['name']}] layers {layer_ranges(group['layers'])} ({n}): no RoPE: {group['reason']}")
    if r.get("softmax_scale", 1.0) != 1.0:
        out.append(f"softmax scale x{r['softmax_scale']:.6f}: {r['softmax_scale_reason']} "
                   "(included in the logit multipliers above)")
    if "gguf" in r:
        g = r["gguf"]
        out.append(f"gguf: architecture {g['architecture']}; rope_freqs tensor: "
                   f"{'present' if g['has_rope_freqs'] else 'absent'}")
        arch = g["architecture"]
        rope = {k: v for k, v in g["metadata"].items() if k.startswith(f"{arch}.rope.")}
        if rope:
            out.append("  rope keys: " + ", ".join(f"{k[len(arch) + 1:]}={_short(v)}" for k, v in rope.items()))
        for name, values in g.get("rope_tensors", {}).items():
            out.append(f"  {name}: {len(values)} values, {min(values):.6g} .. {max(values):.6g}")
        out += [f"  llama.cpp: {line}" for line in g.get("llama_cpp", [])]
    sys.stdout.write("\n".join(out) + "\n")


def _engine_lines(e: dict[str, Any]) -> list[str]:
    """How a remote-code family / engine-only mechanism was read: by which engine's code, and what it will not do."""
    out = []
    if e["transformers_needs_remote_code"]:
        out.append(f"transformers: needs trust_remote_code for {e['family']} (posenc does not run the model's own "
                   "code; no transformers numbers)")
    if e["engine"]:
        out.append(f"numbers from: {e['numbers_from']} ({e['rope_class']}; {e['layout']}; "
                   f"max_position {e['max_position']:,})" if e["rope_class"] else f"numbers from: {e['numbers_from']}")
    if e["ignored_keys"]:
        out.append(f"not read by the engine: {', '.join(e['ignored_keys'])}")
    out += [f"{engine} will not serve it as configured: {why}" for engine, why in e["will_not_serve"].items()]
    dc = e.get("dual_chunk")
    if dc:
        q = dc["query_positions"]
        out.append(f"dual chunk rope: chunk_len {dc['chunk_len']:,}; keys at {dc['key_positions']}; queries at "
                   f"{q['intra']} (intra), {q['successive']} (successive), {q['inter']} (inter); largest rotated "
                   f"position {dc['largest_rotated_position']:,}")
    return out


def _short(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)} values]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _render_lint(problems: list[dict[str, str]], oldest: dict[str, str] | None) -> None:
    errors = sum(p.get("severity", "error") == "error" for p in problems)
    warnings = len(problems) - errors
    counts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((errors, "problem"), (warnings, "warning")) if n]
    out = [f"lint: {', '.join(counts)}" if problems else "lint: no problems found"]
    for p in problems:
        tag = " (warning)" if p.get("severity") == "warning" else ""
        out += [f"- {p['code']}{tag}: {p['problem']}", f"  why: {p['why']}", f"  fix: {p['fix']}"]
    if oldest:
        out.append(f"oldest transformers that reads it: {oldest['version']} (for {oldest['because']})")
    sys.stdout.write("\n".join(out) + "\n")


def note_newer_transformers() -> None:
    """One line on stderr when the installed transformers is newer than posenc's model-type data."""
    notice = newer_transformers_notice()
    if notice:
        note(notice)
