"""``posenc scale``: the exact rope scaling for transformers (v4/v5 keys), vLLM and llama.cpp."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli import options as opts
from posenc_cli.cli.output import console, note
from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import MAX_HEAD_DIM

if TYPE_CHECKING:
    from posenc_cli.models.positions import ModelFacts


def scale(
    method: Annotated[str, typer.Argument(help="linear, ntk, dynamic, yarn, longrope or llama3.")],
    factor: opts.FactorOpt = None,
    original_max: opts.OriginalMaxOpt = None,
    target: opts.TargetOpt = None,
    theta: Annotated[float | None, typer.Option(
        help=f"rope_theta; {opts.THETA_RANGE}.", show_default="10000, or the config's")] = None,
    head_dim: Annotated[int | None, typer.Option(
        help=f"Head dimension; even, 4 to {MAX_HEAD_DIM}.", show_default="128, or the config's")] = None,
    partial_rotary_factor: opts.PartialRotaryFactorOpt = None,
    config: Annotated[str | None, typer.Option(
        help="Read theta, head dim and lengths from a model: config.json, folder, Hub id or GGUF.",
        show_default="none")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", help="hf, hf-v5, vllm, sglang, llama.cpp, llama-cpp-python; trainers: megatron, "
        "megatron-bridge, torchtitan, torchtune, llamafactory, axolotl, unsloth, trl.",
        show_default="with --config, the file's own (hf-v5 for a rope_parameters file), else hf")] = None,
    beta_fast: opts.BetaFastOpt = None,
    beta_slow: opts.BetaSlowOpt = None,
    attention_factor: opts.AttentionFactorOpt = None,
    mscale: opts.MscaleOpt = None,
    mscale_all_dim: opts.MscaleAllDimOpt = None,
    truncate: opts.TruncateOpt = None,
    low_freq_factor: opts.LowFreqFactorOpt = None,
    high_freq_factor: opts.HighFreqFactorOpt = None,
    short_factor: opts.ShortFactorOpt = None,
    long_factor: opts.LongFactorOpt = None,
    fine_tuned: Annotated[bool, typer.Option(
        help="The model is fine-tuned at this scale (no warning for a jump past x4).")] = False,
    seq_len: Annotated[str | None, typer.Option(
        help="hf, hf-v5 and trainer formats: the length one training run trains at, up to the target (a stage of a "
             "staged plan); the rope dict stays the target's, the lengths become this one.",
        show_default="the target")] = None,
    explain: Annotated[bool, typer.Option(help="Per-pair table on stderr.")] = False,
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="Write the patched --config here.", show_default="print it")] = None,
    in_place: Annotated[bool, typer.Option(help="Rewrite --config itself (atomically).")] = False,
    model: Annotated[str, typer.Option(
        help="Model name (or GGUF path) for the vllm, sglang and llama-cpp-python command lines.")] = "MODEL",
) -> None:
    """Print the exact rope scaling config for transformers (v4/v5 keys), vLLM or llama.cpp.

    Example: posenc scale yarn --original-max 32k --target 128k --theta 1e6
    """
    from posenc_cli.engines import hf
    from posenc_cli.engines.registry import formats, training_formats
    from posenc_cli.engines.render import render_request
    from posenc_cli.rope import scaling

    if fmt is not None and fmt not in formats():
        raise PosencError(f"--format {fmt!r} is not known; use one of: {', '.join(formats())}")
    if (output or in_place) and config is None:
        raise PosencError("--output and --in-place patch a model config: pass --config FILE")
    if output and in_place:
        raise PosencError("give either --output FILE or --in-place, not both")
    facts: ModelFacts | None = None
    source: dict[str, Any] | None = None
    if config is not None:
        # the model reader loads only for --config: a bare request never needs it
        from posenc_cli.models.positions import model_facts
        from posenc_cli.models.sources import describe_source, read_source, served_name

        src = read_source(config)
        if (output or in_place) and src.kind not in ("file", "stdin", "folder"):
            raise PosencError(f"--output and --in-place patch a local config.json; {src.label} is a {src.kind} "
                              "(print the scaling without them, or download config.json first)")
        if in_place and src.kind == "stdin":
            raise PosencError("--in-place rewrites a config file; --config - is stdin (use -o - to print the "
                              "patched config)")
        if in_place and src.kind == "folder" and src.path:
            config = src.path
        source = src.config
        facts = model_facts(describe_source(src), src.label, cfg=src.config)
    fmt = fmt or hf.own_format(facts)
    options = opts.ScaleOptions(
        factor=factor, original_max=original_max, target=target, partial_rotary_factor=partial_rotary_factor,
        beta_fast=beta_fast, beta_slow=beta_slow, attention_factor=attention_factor, mscale=mscale,
        mscale_all_dim=mscale_all_dim, truncate=truncate, low_freq_factor=low_freq_factor,
        high_freq_factor=high_freq_factor, short_factor=short_factor, long_factor=long_factor)
    notes: list[str] = []
    req = opts.scale_request(method, options, theta=theta, head_dim=head_dim, fine_tuned=fine_tuned, model=facts,
                             notes=notes)
    if seq_len is not None:
        from posenc_cli.units import parse_length

        if fmt not in training_formats():
            raise PosencError(f"--seq-len sets the length a training run trains at; --format {fmt} serves the whole "
                              f"target (use it with one of: {', '.join(training_formats())})")
        req = scaling.at_length(req, parse_length(seq_len, name="--seq-len"))
    # build the result before any note, so a rejected request or format ends as the one `error:` line on stderr
    writing = source is not None and config is not None and bool(output or in_place)
    caveats: list[str] = []
    text = ""
    if source is not None and facts is not None:
        if writing:
            from posenc_cli.models.sources import written_config

            text = written_config(hf.patch_config(source, req, fmt, facts.group), "the patched config")
        else:
            text, caveats = render_request(req, fmt, source, facts,
                                           served_name(src) if model == "MODEL" else model, gguf=src.kind == "gguf")
    else:
        text, caveats = render_request(req, fmt, model=model)
    for line in ((facts.window_note,) if facts and facts.window_note else ()) + (facts.notes if facts else ()):
        note(line)
    for line in notes:
        note(line)
    for name, given in (("theta", theta), ("head_dim", head_dim)):
        if given is None and (facts is None or getattr(facts, name) is None):
            note(f"note: --{name.replace('_', '-')} not given; using {getattr(req, name):g}")
    for line in scaling.warnings_for(req):
        note(line)
    if req.method == "dynamic" and not req.unchanged and fmt in hf.FORMATS:
        note("note: dynamic keeps max_position_embeddings at the trained length; the base grows past it per forward")
    if explain:
        _explain(req)
    if writing:
        from posenc_cli.files import write_output_text

        assert config is not None
        dest = config if in_place else str(output)
        shown = write_output_text(dest, text)
        note(f"wrote {shown}")
        return
    for line in caveats:
        note(f"caveat: {line}")
    sys.stdout.write(text + "\n")


def _explain(req: Any) -> None:
    """Per-pair table (stderr): what the method does to each frequency pair."""
    from rich.table import Table

    from posenc_cli.rope.frequencies import for_request

    freqs = for_request(req)
    table = Table(title=f"{req.method}: factor {req.factor:g}, {req.original_max} -> {req.target} positions, "
                        f"rotary dim {req.rotary_dim}, theta {req.theta:g}")
    for col in ("pair", "original wavelength", "new wavelength", "effective scale", "band"):
        table.add_column(col, justify="right" if col != "band" else "left")
    for i, old, new, ratio, band in freqs.pair_table():
        table.add_row(str(i), f"{old:,.2f}", f"{new:,.2f}", f"{ratio:.4f}", band)
    err = console(stderr=True)
    err.print(table)
    err.print(f"attention factor (cos and sin): {freqs.attention_factor:.6f}; "
              f"logit multiplier (its square): {freqs.attention_factor ** 2:.6f}")
    for key, value in freqs.details.items():
        err.print(f"{key}: {value}")
