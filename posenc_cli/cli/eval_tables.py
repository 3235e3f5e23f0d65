"""``posenc eval``'s tables: a probe, a run's summary (with its task scores) and a comparison, as text on stdout
(rich tables). Formatting only: every number and verdict comes from :mod:`posenc_cli.evaluation`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.cli.output import console
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from posenc_cli.evaluation.probe import Capabilities


def render_probe(caps: Capabilities, loss: str) -> None:
    from rich.table import Table

    # above the table, not its title: a title wraps to the table's width, and a long URL or path would break
    console().print(f"{caps.base_url}  model {caps.model}", soft_wrap=True, markup=False)
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("engine", caps.engine)
    table.add_row("served context", f"{caps.served_context} ({caps.context_source})" if caps.served_context
                  else caps.context_source)
    table.add_row("tokenize", f"{caps.tokenize} (usage counts {caps.tokenize_offset:+d})"
                  if caps.tokenize and caps.tokenize_offset is not None else str(caps.tokenize or "none"))
    table.add_row("prompt logprobs", caps.logprobs_detail if caps.prompt_logprobs else f"unavailable: "
                  f"{caps.logprobs_detail}")
    for name, state in caps.parameters.items():
        table.add_row(f"  {name}", state)
    if caps.sampling:
        table.add_row("sent with completions", ", ".join(f"{k}={v}" for k, v in caps.sampling.items()) +
                      " (plain greedy decoding, whatever the server's defaults)")
    if caps.api == "chat":
        table.add_row("chat template", f"{caps.chat_offset:+d} tokens around one user message (usage, chat vs "
                      "completions)")
    table.add_row("concurrency", f"{caps.concurrency} ({caps.concurrency_source})")
    if caps.expected_context is not None:
        e = caps.expected_context
        table.add_row(f"{e['tokens']} tokens of context", f"served ({e.get('prompt_tokens')} prompt tokens + 1)"
                      if e.get("served") else f"refused: {e.get('message')}")
    table.add_row("loss in a run", loss)
    table.add_row("requests", str(caps.requests))
    console().print(table)


def render_dry_run(result: dict[str, Any]) -> None:
    """What ``eval run --dry-run`` found: requests and prompt tokens per length, the totals and the window."""
    from rich.table import Table

    out = console()
    out.print(f"dry run of {result['plan']}: nothing written, nothing sent"
              f"{' but the probe' if result['probe_requests'] else ''}", soft_wrap=True, markup=False)
    table = Table()
    for name in ("length", "needle", "task", "loss", "requests", "prompt tokens"):
        table.add_column(name, justify="right")
    for row in result["grid"]:
        table.add_row(format_length(row["length"]), str(row["needle"]), str(row["task"]), str(row["loss"]),
                      str(row["requests"]), f"{row['prompt_tokens']:,}")
    table.add_row("total", "", "", "", str(result["requests"]), f"{result['prompt_tokens']:,}")
    out.print(table)
    window = result["served_context"]
    out.print(f"served window: {'unknown' if window is None else window} ({result['context_source']})",
              soft_wrap=True, markup=False)
    flight = result["concurrency"] or "the server's default (the probe reads it)"
    out.print(f"loss: {result['loss']}; requests in flight: {flight}", soft_wrap=True, markup=False)
    if "why" in result:
        out.print(f"a run would refuse: {result['why']}", soft_wrap=True, markup=False)


def render_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    out = console()
    title = f"{summary['label'] or summary['run']}: {summary['model']} on {summary['engine']} ({summary['plan']})"
    table = Table()
    table.add_column("length", justify="right")
    for d in summary["depths"]:
        table.add_column(f"depth {d:g}", justify="right")
    table.add_column("pass rate", justify="right")
    table.add_column("95% interval", justify="right")
    for n, row in zip(summary["lengths"], summary["pass_rate"], strict=True):
        stats = summary["by_length"][str(n)]
        cells = ["-" if v is None else f"{v:.2f}" for v in row]
        rate = "-" if stats["pass_rate"] is None else f"{stats['pass_rate']:.2f}"
        interval = "-" if stats["interval"] is None else "{:.2f} .. {:.2f}".format(*stats["interval"])
        table.add_row(format_length(n), *cells, rate, interval)
    out.print(title, soft_wrap=True, markup=False)  # above the table, not its title (as probe's)
    if "needle" in summary.get("kinds", ["task"] if "tasks" in summary else ["needle"]):
        out.print(table)
    if "tasks" in summary:
        render_tasks(summary["tasks"])
    loss = summary["loss"]
    if loss["curve"]:
        at = ", ".join(format_length(n) for n in loss["lengths"])
        capped = f", capped at {format_length(loss['cap'])}" if loss.get("mode") == "capped" else ""
        points = ", ".join(f"{b['from']}-{b['to']}: {b['loss']:.3f}" for b in loss["curve"][-6:])
        out.print(f"per-position loss measured at {at}{capped}; by position (last bins): {points}")
    elif not loss["available"]:
        out.print(f"per-position loss: unavailable ({loss['why']})")
    else:
        out.print(f"per-position loss: not measured ({loss.get('why') or 'no loss request finished'})")
    first = summary.get("first_token")
    if first is not None and first["measured"]:
        flight = "/".join(str(n) for n in first["in_flight"])
        times = ", ".join(f"{format_length(int(n))} {v['median']:.3f} s (max {v['max']:.3f})"
                          for n, v in first["by_length"].items())
        out.print(f"time to first token by length, median ({flight} in flight): {times}", soft_wrap=True,
                  markup=False)
    elif first is not None and first["why"] is not None:
        out.print(f"time to first token: {first['why']}", soft_wrap=True, markup=False)
    if summary["refused"]:
        out.print(f"{summary['refused']} prompts refused by the server (counted as failures; a rerun sends them again)")
    if summary["mismatched_lengths"]:
        out.print(f"[bold]{len(summary['mismatched_lengths'])} cells left out: the server counted a different "
                  "prompt length[/bold]")
    for test in summary["tests"]:
        from posenc_cli.evaluation.plan import PlanTest

        threshold = test.get("pass_rate", test.get("margin", test.get("threshold", test.get("ratio"))))
        text = PlanTest(test["kind"], test["length"], threshold, test.get("baseline")).describe()
        if "baseline_loss" in test:
            measured = (f" (loss {test['loss']:.3f} vs {test['baseline_loss']:.3f} nats per token: perplexity "
                        f"{test['measured']:+.1%})")
        elif test["kind"] in ("ruler", "nolima") and "measured" in test:
            measured = f" (measured {'none' if test['measured'] is None else format_length(test['measured'])})"
        else:
            measured = f" (measured {test['measured']:g})" if "measured" in test else ""
        why = f": {test['why']}" if "why" in test else ""
        out.print(f"{test['result'].upper():8} {text}{measured}{why}")
    api = summary.get("api")
    if api is not None and api["name"] == "chat":  # a completions run (the default) says so in --json only
        out.print(f"api: chat, {api['endpoint']} (each length includes the chat template's {api['template_tokens']} "
                  "tokens)")
    why = f": {summary['why']}" if "why" in summary else ""
    out.print(f"result: {summary['result']}{why}  ({summary['requests']} requests, "
              f"{summary['seconds']:.1f} s of request time)")


def _interval(pair: list[float] | None, signed: bool = False) -> str:
    if pair is None:
        return "-"
    form = "{:+.1f}" if signed else "{:.1f}"
    return f"{form.format(pair[0])} .. {form.format(pair[1])}"


def render_tasks(tasks: dict[str, Any]) -> None:
    """RULER scores (x100) per task and length, the average, and the effective lengths (with the baseline's)."""
    from rich.table import Table

    out = console()
    lengths = list(tasks["average"])
    table = Table()
    table.add_column("task")
    for n in lengths:
        table.add_column(format_length(int(n)), justify="right")
    rows = [(name, tasks["scores"][name]) for name in tasks["names"]] + [("average", tasks["average"])]
    base = tasks.get("baseline")
    if base is not None:
        rows.append(("baseline average", base["average"]))
    for name, row in rows:
        table.add_row(name, *["-" if row.get(n) is None else f"{row[n]:.1f}" for n in lengths])
        of = tasks if name == "average" else base if name == "baseline average" else None
        if of is not None:
            table.add_row(f"[dim]95% interval ({of['prompts'] * len(of['names'])} prompts)[/dim]",
                          *[_interval(of["average_interval"].get(n)) for n in lengths])
    out.print(table)
    for label, found in (("", tasks), ("baseline ", base)):
        if found is None:
            continue
        eff = found["effective_length"]

        def shown(n: int | None) -> str:
            return "none (the shortest length fails)" if n is None else format_length(n)

        out.print(f"{label}effective length: {shown(eff['ruler'])} by RULER's (average >= {eff['ruler_threshold']:g}), "
                  f"{shown(eff['nolima'])} by NoLiMa's (>= {eff['nolima_ratio']:.0%} of "
                  f"{'-' if eff['nolima_base'] is None else format(eff['nolima_base'], '.1f')} at the shortest)")
    if tasks["mismatched"]:
        out.print(f"[bold]{tasks['mismatched']} task cells left out: the server counted a different prompt "
                  "length[/bold]")


def render_compare(result: dict[str, Any]) -> None:
    """Each run per length (task runs: per task and length, scores x100), and each later run against the first:
    the difference with its 95% interval, marked where the interval excludes 0."""
    from rich.table import Table

    names = [r["label"] for r in result["runs"]]
    out = console()
    level = f"{result['level']:.0%}"
    if "tasks" in result:
        title = f"task scores by length; difference from {names[0]} with its {level} interval (* excludes 0)"
        table = Table()
        table.add_column("task")
        table.add_column("length", justify="right")
        rows = result["tasks"]
        cell = "score"
    else:
        title = f"needle pass rate by length; difference from {names[0]} with its {level} interval (* excludes 0)"
        table = Table()
        rows = result["by_length"]
        cell = ""
        table.add_column("length", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for name in names[1:]:
        table.add_column(f"{name} - {names[0]}", justify="right")
    for row in rows:
        lead = [row["task"], format_length(row["length"])] if cell else [format_length(row["length"])]
        shown = []
        for name in names:
            value = row[name][cell] if cell else row[name]
            shown.append("-" if value is None else f"{value:.1f}" if cell else f"{value:.2f}")
        versus = []
        for name in names[1:]:
            v = row.get("versus", {}).get(name)
            if v is None:
                versus.append("-")
            else:
                d = f"{v['difference']:+.1f}" if cell else f"{v['difference']:+.2f}"
                span = (_interval(v["interval"], signed=True) if cell
                        else "{:+.2f} .. {:+.2f}".format(*v["interval"]))
                versus.append(f"{d} ({span}){' *' if v['separated'] else '  '}")
        table.add_row(*lead, *shown, *versus)
    out.print(title, soft_wrap=True, markup=False)
    out.print(table)
