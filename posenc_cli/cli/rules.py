"""``posenc rules validate|show``: check and show pick's decision rules."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from posenc_cli.cli.output import print_json
from posenc_cli.units import format_length, format_tokens

rules_app = typer.Typer(help="Check and show pick's decision rules.", no_args_is_help=True, add_completion=False)


@rules_app.command("validate")
def rules_validate(
    file: Annotated[str, typer.Argument(help="A rules YAML file.")],
) -> None:
    """Check a rules file against the schema; exit 2 with one line naming the problem."""
    from posenc_cli.pick.rules import load_rules

    ruleset = load_rules(file)
    sys.stdout.write(f"ok: {file}: {len(ruleset.rules)} rules, {len(ruleset.derived)} derived facts, "
                     f"catch-all {ruleset.rules[-1].id!r}\n")


@rules_app.command("show")
def rules_show(
    rules: Annotated[str | None, typer.Option(help="A rules file.", show_default="the shipped policy")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the parsed rules as JSON.")] = False,
) -> None:
    """Print the rules in evaluation order, with the hard guards."""
    from posenc_cli.pick.rules import GUARDS, load_rules

    ruleset = load_rules(rules)
    if as_json:
        print_json({"source": ruleset.source, **ruleset.raw, "guards": list(GUARDS)})
        return
    out = [f"rules: {ruleset.source}", "constants (the plan's numbers):"]
    out += [f"  {name} = {_number(c.value, tokens=name.endswith(('tokens', 'tokens_min', 'budget')))}  ({c.source})"
            for name, c in ruleset.constants.items()]
    for table, rows in ruleset.tables.items():
        out.append(f"table {table}:")
        out += [f"  {'up to ' + format_length(r.up_to) if r.up_to else 'beyond':>12}: {_number(r.value)}  ({r.source})"
                for r in rows]
    out.append("derived facts:")
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


def _number(value: float, tokens: bool = False) -> str:
    """Token counts as people write them (500M, 5B), other numbers with :g (1e+07)."""
    return format_tokens(int(value)) if tokens else f"{value:g}"
