"""posenc's command line: parse options, call the core, render results. No math lives here.

Results go to stdout (JSON through ``json.dumps``, tables through a stdout console); messages go to
stderr. Every user mistake ends as one ``error: ...`` line and exit code 2 (see :class:`PosencGroup`).
numpy, matplotlib and the core modules are imported inside the commands that need them.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from posenc_cli import __version__, check_cli, convert_cli, inspect_cli, verify_cli
from posenc_cli import options as opts
from posenc_cli.errors import ExitCode, PosencError

if TYPE_CHECKING:
    from rich.console import Console


#: Command groups whose modules load only when the group is used (or listed in help): name -> (module, Typer app).
LAZY_GROUPS = {
    "plot": ("posenc_cli.plot_cli", "plot_app"),
    "experiment": ("posenc_cli.experiment_cli", "experiment_app"),
}


class PosencGroup(TyperGroup):
    """Runs a command and turns any usage error or :class:`PosencError` into one ``error:`` line.

    ``plot`` and ``experiment`` are attached on first use, so other commands never import their modules.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names + [name for name in LAZY_GROUPS if name not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY_GROUPS and cmd_name not in self.commands:
            module, attr = LAZY_GROUPS[cmd_name]
            command = typer.main.get_command(getattr(importlib.import_module(module), attr))
            command.name = cmd_name
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except PosencError as exc:
            _fail(str(exc), ExitCode.USAGE)
        except typer.Abort:
            _fail("aborted", ExitCode.CHECK_FAILED)
        code = rv if isinstance(rv, int) else ExitCode.OK
        if standalone_mode:
            sys.exit(code)
        return code


def _fail(message: str, code: int) -> None:
    first = " ".join(message.split())  # one line, always
    if first:  # a bare `posenc` raises an empty usage error after printing the help
        sys.stderr.write(f"error: {first}\n")
    sys.stderr.flush()
    sys.exit(code)


app = typer.Typer(
    cls=PosencGroup,
    name="posenc",
    help="Pick, scale, inspect and verify positional encodings (sinusoidal, RoPE and its extensions, ALiBi).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def console(stderr: bool = False) -> Console:
    """A rich console bound to stdout (results) or stderr (messages); rich is loaded on first use."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # piped output has no terminal width; 120 columns keeps the tables readable in logs and READMEs
    width = None if stream.isatty() else 120
    return Console(file=stream, highlight=False, width=width)


def print_json(obj: Any) -> None:
    """Machine output: plain ``json.dumps`` to stdout, never through rich (which would wrap lines)."""
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def note(message: str) -> None:
    """A human message on stderr."""
    sys.stderr.write(message + "\n")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"posenc {__version__}\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Pick, scale, inspect and verify positional encodings."""


# one module per command; registering it imports only typer
app.command("verify")(verify_cli.verify)


@app.command()
def scale(
    method: Annotated[str, typer.Argument(help="linear, ntk, dynamic, yarn, longrope or llama3.")],
    factor: opts.FactorOpt = None,
    original_max: opts.OriginalMaxOpt = None,
    target: opts.TargetOpt = None,
    theta: Annotated[float | None, typer.Option(help="rope_theta (default 10000 or the config's).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension (default 128 or the config's).")] = None,
    partial_rotary_factor: opts.PartialRotaryFactorOpt = None,
    config: Annotated[str | None, typer.Option(
        help="Read theta, head dim and lengths from a model: config.json, folder, Hub id or GGUF.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="hf, hf-v5, vllm or llama.cpp.")] = "hf",
    beta_fast: opts.BetaFastOpt = None,
    beta_slow: opts.BetaSlowOpt = None,
    attention_factor: opts.AttentionFactorOpt = None,
    mscale: opts.MscaleOpt = None,
    mscale_all_dim: opts.MscaleAllDimOpt = None,
    truncate: opts.TruncateOpt = None,
    low_freq_factor: opts.LowFreqFactorOpt = 1.0,
    high_freq_factor: opts.HighFreqFactorOpt = 4.0,
    short_factor: opts.ShortFactorOpt = None,
    long_factor: opts.LongFactorOpt = None,
    fine_tuned: Annotated[bool, typer.Option(help="The model is fine-tuned at this scale (no >8x warning).")] = False,
    explain: Annotated[bool, typer.Option(help="Per-pair table on stderr.")] = False,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the patched --config here.")] = None,
    in_place: Annotated[bool, typer.Option(help="Rewrite --config itself (atomically).")] = False,
    model: Annotated[str, typer.Option(help="Model name for the vllm command line.")] = "MODEL",
) -> None:
    """Print the exact rope scaling config for transformers (v4/v5 keys), vLLM or llama.cpp.

    Example: posenc scale yarn --original-max 32k --target 128k --theta 1e6
    """
    from posenc_cli import scaling
    from posenc_cli.sources import describe_source, read_source

    if fmt not in scaling.FORMATS:
        raise PosencError(f"--format {fmt!r} is not known; use one of: {', '.join(scaling.FORMATS)}")
    if (output or in_place) and config is None:
        raise PosencError("--output and --in-place patch a model config: pass --config FILE")
    if output and in_place:
        raise PosencError("give either --output FILE or --in-place, not both")
    facts: scaling.ModelFacts | None = None
    source: dict[str, Any] | None = None
    if config is not None:
        src = read_source(config)
        if (output or in_place) and src.kind not in ("file", "stdin", "folder"):
            raise PosencError(f"--output and --in-place patch a local config.json; {src.label} is a {src.kind} "
                              "(print the scaling without them, or download config.json first)")
        if in_place and src.kind == "folder" and src.path:
            config = src.path
        source = src.config
        facts = scaling.model_facts(describe_source(src), src.label)
    options = opts.ScaleOptions(
        factor=factor, original_max=original_max, target=target, partial_rotary_factor=partial_rotary_factor,
        beta_fast=beta_fast, beta_slow=beta_slow, attention_factor=attention_factor, mscale=mscale,
        mscale_all_dim=mscale_all_dim, truncate=truncate, low_freq_factor=low_freq_factor,
        high_freq_factor=high_freq_factor, short_factor=short_factor, long_factor=long_factor)
    req = opts.scale_request(
        method, options,
        theta=theta if theta is not None else (facts.theta if facts else scaling.DEFAULT_THETA),
        head_dim=head_dim if head_dim is not None else (facts and facts.head_dim) or scaling.DEFAULT_HEAD_DIM,
        original_max=facts.scale_from if facts else None,
        partial_rotary_factor=facts.partial_rotary_factor if facts else None, fine_tuned=fine_tuned,
        has_config=True, model=facts)
    # build the result before any note, so a rejected request or format ends as the one `error:` line on stderr
    writing = source is not None and config is not None and bool(output or in_place)
    if writing:
        assert source is not None
        patched = scaling.patch_config(source, req, fmt)
    else:
        text, caveats = scaling.render(req, fmt, model, text_config=bool(facts and facts.text_config))
    for line in facts.notes if facts else ():
        note(line)
    for name, default in (("theta", theta), ("head_dim", head_dim)):
        if default is None and (facts is None or getattr(facts, name) is None):
            note(f"note: --{name.replace('_', '-')} not given; using {getattr(req, name):g}")
    for line in scaling.warnings_for(req):
        note(line)
    if req.method == "dynamic" and fmt in ("hf", "hf-v5"):
        note("note: dynamic keeps max_position_embeddings at the trained length; the base grows past it per forward")
    if explain:
        _explain(req)
    if writing:
        from posenc_cli.config import atomic_write_text

        assert config is not None
        dest = config if in_place else str(output)
        atomic_write_text(dest, json.dumps(patched, indent=2) + "\n")
        note(f"wrote {dest}")
        return
    for line in caveats:
        note(f"caveat: {line}")
    sys.stdout.write(text + "\n")


def _explain(req: Any) -> None:
    """Per-pair table (stderr): what the method does to each frequency pair."""
    from rich.table import Table

    from posenc_cli.frequencies import for_request

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


app.command("inspect")(inspect_cli.inspect)
app.command("convert")(convert_cli.convert)
app.command("check")(check_cli.check)


@app.command()
def pick(
    ctx: Annotated[str, typer.Option(help="Target context at inference: 4k, 128k, 1M, 131072 (k=1024).")],
    trained_ctx: Annotated[str | None, typer.Option(help="Trained length (default: --ctx).")] = None,
    extrapolation: Annotated[str, typer.Option(help="Untrained reach: none, moderate, strong.")] = "none",
    budget: Annotated[str, typer.Option(help="Fine-tuning tokens for a long-context stage: 0, 500M, 2B, 1T.")] = "0",
    config: Annotated[str | None, typer.Option(help="Existing model config.json (extended).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension (default 128 or the config's).")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention heads, for ALiBi slopes (default 32).")] = None,
    theta: Annotated[float | None, typer.Option(help="The model's rope_theta, if not in --config.")] = None,
    rules: Annotated[str | None, typer.Option(help="A rules YAML file replacing the shipped policy.")] = None,
    explain: Annotated[bool, typer.Option(help="Show every rule in order and which conditions held (stderr).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Recommend an encoding, its hyperparameters, an extension config, a test plan and a fallback."""
    from posenc_cli.picker import PickInputs
    from posenc_cli.picker import pick as run_pick
    from posenc_cli.units import parse_length, parse_tokens

    inputs = PickInputs(
        ctx=parse_length(ctx, name="--ctx"),
        trained_ctx=parse_length(trained_ctx, name="--trained-ctx") if trained_ctx is not None else None,
        extrapolation=extrapolation, budget=parse_tokens(budget), config=config, head_dim=head_dim, heads=heads,
        theta=theta, rules=rules,
    )
    result = run_pick(inputs)
    if explain:
        _render_trace(result.traces)
    if as_json:
        print_json(result.answer)
    else:
        _render_pick(result.answer)


def _render_trace(traces: Any) -> None:
    lines = ["rules, in order (first match not vetoed wins):"]
    chosen_seen = False
    for t in traces:
        if t.matched and not t.vetoed_by and not chosen_seen:
            status, chosen_seen = "FIRED", True
        elif t.vetoed_by:
            status = f"matched, vetoed by guard {t.vetoed_by}"
        elif t.matched:
            status = "matched (not reached)"
        else:
            status = "no match"
        lines.append(f"  {t.rule}: {status}")
        for text, ok in t.conditions:
            lines.append(f"      {'held  ' if ok else 'failed'}  {text}")
        if not t.conditions:
            lines.append("      (catch-all)")
    note("\n".join(lines))


def _render_pick(a: dict[str, Any]) -> None:
    from posenc_cli.units import format_length, format_tokens

    i = a["inputs"]
    kind = f"existing {i['model_encoding']} model" if i["existing"] else "new model"
    budget = format_tokens(i["budget"]) if i["budget"] else "none"
    out = [f"posenc pick: {kind}, target {format_length(i['ctx'])}, trained {format_length(i['trained_ctx'])}, "
           f"extrapolation {i['extrapolation']}, fine-tuning budget {budget}",
           "", f"1. Encoding: {a['encoding']}", f"   {a['reason']}", "", "2. Hyperparameters:"]
    out += [f"   {k}: {v}" for k, v in a["hyperparameters"].items()] or ["   (none)"]
    out += ["", "3. Extension:"]
    ext = a["extension"]
    if ext is None:
        out.append("   none")
    else:
        tuning = "yes, " + ext["fine_tune_tokens"] if ext["fine_tune"] else "none"
        out.append(f"   {ext['method']} x{ext['factor']:g}: {format_length(ext['from'])} -> "
                   f"{format_length(ext['to'])}; fine-tuning: {tuning}")
        if ext["note"]:
            out.append(f"   {ext['note']}")
        out.append("   config.json (transformers; `--format hf-v5` etc. via the command below):")
        out += ["   " + line for line in json.dumps(ext["config"], indent=2).splitlines()]
        out.append(f"   same numbers: {ext['command']}")
    out += ["", "4. Test plan:"] + [f"   - {t}" for t in a["test_plan"]]
    out += ["", f"5. Fallback: {a['fallback']}", "", f"rule: {a['rule']}: {a['why']}"]
    for v in a["vetoed"]:
        out.append(f"vetoed: {v['rule']} (guard {v['guard']})")
    sys.stdout.write("\n".join(out) + "\n")


rules_app = typer.Typer(help="Check and show pick's decision rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("validate")
def rules_validate(
    file: Annotated[str, typer.Argument(help="A rules YAML file.")],
) -> None:
    """Check a rules file against the schema; exit 2 with one line naming the problem."""
    from posenc_cli.rules import load_rules

    ruleset = load_rules(file)
    sys.stdout.write(f"ok: {file}: {len(ruleset.rules)} rules, {len(ruleset.derived)} derived facts, "
                     f"catch-all {ruleset.rules[-1].id!r}\n")


@rules_app.command("show")
def rules_show(
    rules: Annotated[str | None, typer.Option(help="A rules file (default: the shipped policy).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the parsed rules as JSON.")] = False,
) -> None:
    """Print the rules in evaluation order, with the hard guards."""
    from posenc_cli.rules import GUARDS, load_rules

    ruleset = load_rules(rules)
    if as_json:
        print_json({"source": ruleset.source, **ruleset.raw, "guards": list(GUARDS)})
        return
    out = [f"rules: {ruleset.source}", "derived facts:"]
    out += [f"  {name} = {how}({', '.join(map(str, args))})" for name, (how, args) in ruleset.derived.items()]
    out.append("rules (first match wins):")
    for n, rule in enumerate(ruleset.rules, 1):
        cond = " and ".join(c.text() for c in rule.when) or "always (catch-all)"
        ext = rule.body.get("extension")
        extra = f"; extension {ext['method']}, factor {ext['factor']}" if ext else ""
        out.append(f"  {n:2}. {rule.id}: when {cond} -> {rule.body['encoding']}{extra}")
    out.append("hard guards (veto any rule):")
    out += [f"  - {name}: {(guard.__doc__ or '').strip()}" for name, guard in GUARDS.items()]
    sys.stdout.write("\n".join(out) + "\n")


def _keep_only(name: str | None) -> None:
    """Register only the command or group the user asked for.

    Building every command's parameters costs typer about 12 ms per start; a run needs one. ``posenc``,
    ``posenc --help`` and unknown names keep the full app, so help and "no such command" hints stay complete.
    """
    commands = [c for c in app.registered_commands
                if (c.name or (c.callback.__name__ if c.callback else "")).replace("_", "-") == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups or name in LAZY_GROUPS:
        app.registered_commands = commands
        app.registered_groups = groups


def main() -> None:
    """Console-script entry point."""
    _keep_only(sys.argv[1] if len(sys.argv) > 1 else None)
    app()
