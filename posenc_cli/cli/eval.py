"""``posenc eval run|probe|report|compare``: run a test plan against a served model and judge it.

Parsing and rendering only: the plan, the client, the runner and the verdicts live in ``posenc_cli.evaluation``
and ``posenc_cli.evaluation.client``. rich loads for the progress bar and tables; matplotlib only when a PNG is asked
for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from posenc_cli.cli.output import console, note, print_json
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.evaluation import MAX_EVAL_LENGTH, MAX_TRIALS, MIN_EVAL_LENGTH
from posenc_cli.evaluation.client import Client, api_key_from_env
from posenc_cli.evaluation.losspolicy import check_flags, choose
from posenc_cli.evaluation.probe import PROBE_TEXT, Capabilities, expect_context, probe
from posenc_cli.evaluation.tokens import local_counter, server_counter
from posenc_cli.files import output_kind, write_output
from posenc_cli.folderlock import hold
from posenc_cli.units import format_length, parse_length

MAX_TIMEOUT = 86_400.0  # one day per answer; beyond it socket timeouts overflow (inf) and nobody waits
MAX_RETRIES = 20  # with the 8 s back-off cap, 20 retries already wait ~2.5 min
MAX_CONCURRENCY = 256  # requests in flight: one thread each
_EVAL_LENGTHS = f"{MIN_EVAL_LENGTH} to {format_length(MAX_EVAL_LENGTH)} tokens"

eval_app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Run needle/passkey retrieval and per-position loss against an OpenAI-compatible server (vLLM, SGLang, "
    "llama.cpp), and judge the results against pick's test plan.")

UrlArg = Annotated[str, typer.Argument(help="The server's base URL, e.g. http://127.0.0.1:8000/v1.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model id to request.",
                                               show_default="the server's first")]
TokenizerOpt = Annotated[str | None, typer.Option(
    "--tokenizer", help="Count tokens locally: 'bytes' (the passkey model's vocabulary), a tokenizer.json or a model "
    "folder.", show_default="the server's tokenize endpoint")]
KeyEnvOpt = Annotated[str, typer.Option("--api-key-env", help="Environment variable holding the API key.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", help=f"Seconds to wait for one answer; greater than 0, at most {MAX_TIMEOUT:.0f}.")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", help=f"Retries per request (back-off 0.5 s, doubling, max 8 s); 0 to {MAX_RETRIES}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
PngOpt = Annotated[Path | None, typer.Option("--png", help="Write the depth x length pass-rate heatmap(s) here.",
                                             show_default="none")]
LossOpt = Annotated[bool | None, typer.Option(
    "--loss/--no-loss", help="Measure the per-position loss (prompt log-probabilities), or leave it out.",
    show_default="on, except when no test needs it and the engine's loss path is slow (llama-cpp-python)")]
LossMaxOpt = Annotated[str | None, typer.Option(
    "--loss-max-length", help=f"Longest loss request; a longer one is sent at this length; {_EVAL_LENGTHS}.",
    show_default="none; 2k on llama-cpp-python")]
ApiOpt = Annotated[str, typer.Option(
    "--api", help="completions: the raw prompt on /v1/completions; chat: the prompt as one user message on "
    "/v1/chat/completions, its length counting the chat template's tokens (measured by the probe).")]
LossPngOpt = Annotated[Path | None, typer.Option("--loss-png", help="Write the per-position loss curve(s) here.",
                                                 show_default="none")]


def _client(url: str, key_env: str, timeout: float, retries: int) -> Client:
    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan
        raise PosencError(f"--timeout {timeout:g}: allowed greater than 0 to {MAX_TIMEOUT:.0f} seconds")
    if not 0 <= retries <= MAX_RETRIES:
        raise PosencError(f"--retries {retries}: allowed 0 to {MAX_RETRIES}")
    return Client(url, api_key=api_key_from_env(key_env), timeout=timeout, retries=retries)


def _counter(client: Client, caps: Capabilities, tokenizer: str | None) -> Any:
    if tokenizer is None:
        return server_counter(client, caps)
    count = local_counter(tokenizer)
    offset = caps.probe_tokens - count(PROBE_TEXT) if caps.probe_tokens is not None else 0
    if offset:
        note(f"note: --tokenizer {tokenizer} counts {-offset:+d} tokens against the server's usage; corrected")
    return (lambda text: count(text) + offset) if offset else count


@eval_app.command("probe")
def probe_command(
    url: UrlArg,
    model: ModelOpt = None,
    tokenizer: TokenizerOpt = None,
    expect_ctx: Annotated[str | None, typer.Option(
        "--expect-ctx", help="Send a request using exactly this much context (the length posenc scale meant): a "
        "prompt one token shorter plus one generated token; exit 1 if the server does not serve it; "
        f"{_EVAL_LENGTHS}.", show_default="no such request")] = None,
    template: Annotated[str | None, typer.Option("--template", help="Template for that prompt's text.",
                                                 show_default="needle")] = None,
    loss: LossOpt = None,
    loss_max_length: LossMaxOpt = None,
    api: ApiOpt = "completions",
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    timeout: TimeoutOpt = 600.0,
    retries: RetriesOpt = 1,
    as_json: JsonOpt = False,
) -> None:
    """What the server supports (tokenize, prompt logprobs, context per slot), whether it serves a context, and
    what a run with the same loss flags would send for the loss."""
    from posenc_cli.evaluation.templates import build_prompt, load_template

    cap = check_flags(loss, loss_max_length)
    client = _client(url, api_key_env, timeout, retries)
    length = parse_length(expect_ctx, name="--expect-ctx") if expect_ctx is not None else None
    if length is not None and not MIN_EVAL_LENGTH <= length <= MAX_EVAL_LENGTH:
        raise PosencError(f"--expect-ctx {expect_ctx}: allowed {_EVAL_LENGTHS}")
    chosen = load_template(template)
    caps = probe(client, model, api)
    if length is not None:
        try:
            count = _counter(client, caps, tokenizer)
        except PosencError as exc:
            raise PosencError(f"--expect-ctx needs a token count: {exc}") from None
        def long_prompt(n: int) -> tuple[str, int]:
            prompt = build_prompt(chosen, length=n, depth=0.5, seed=0, count=count)
            return prompt.text, prompt.tokens

        expect_context(client, caps, length, long_prompt)
    choice = choose(None, caps, loss, cap)
    result = caps.as_dict() | {"loss": choice.as_dict()}
    expected = caps.expected_context
    served = expected is None or (
        bool(expected.get("served")) and expected.get("prompt_tokens") in (None, expected.get("built_tokens")))
    if as_json:
        print_json(result)
    else:
        _render_probe(caps, choice.describe())
    if not served:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _render_probe(caps: Capabilities, loss: str) -> None:
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


@eval_app.command("run")
def run_command(
    url: UrlArg,
    out: Annotated[Path, typer.Option("--out", help="Run folder: manifest.json + results.jsonl (resumed if "
                                      "it exists).")],
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="A `posenc pick --json` answer (file, or - for stdin): its tests and lengths.",
        show_default="none")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", help="A model (config.json, folder, Hub id, GGUF): lengths where its positions change.",
        show_default="none")] = None,
    lengths: Annotated[str | None, typer.Option(
        "--lengths", help=f"Explicit lengths: 64,128,1k; each {_EVAL_LENGTHS}.", show_default="none")] = None,
    depths: Annotated[str | None, typer.Option(
        "--depths", help="Needle depths as fractions, each 0 to 1.", show_default="0,0.25,0.5,0.75,1")] = None,
    trials: Annotated[int | None, typer.Option(
        "--trials", help=f"Prompts per length and depth; 1 to {MAX_TRIALS}.",
        show_default="2 from a plan or model, 4 with --lengths")] = None,
    pass_rate: Annotated[float | None, typer.Option(
        "--pass-rate", help="With --lengths: pass rate required at the longest length; 0 to 1.",
        show_default="no needle test")] = None,
    template: Annotated[str | None, typer.Option(
        "--template", help="passkey (the tiny model's), needle (pretrained models) or a template YAML file.",
        show_default="passkey with --lengths, else needle")] = None,
    model: ModelOpt = None,
    tokenizer: TokenizerOpt = None,
    loss: LossOpt = None,
    loss_max_length: LossMaxOpt = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help=f"Requests in flight at once; 1 to {MAX_CONCURRENCY}. Lines are written in the plan's "
        "order at any value.",
        show_default="llama-server's slots; 4 on vLLM and SGLang; else 1 (what probe shows)")] = None,
    api: ApiOpt = "completions",
    label: Annotated[str | None, typer.Option("--label", help="A name for this run in reports.",
                                              show_default="the run folder")] = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    timeout: TimeoutOpt = 600.0,
    retries: RetriesOpt = 3,
    as_json: JsonOpt = False,
) -> None:
    """Send every cell of the plan (skipping finished ones), then report: exit 0 pass, 1 fail, 3 could not run."""
    from posenc_cli.evaluation.plan import plan_for
    from posenc_cli.evaluation.run import Runner

    if concurrency is not None and not 1 <= concurrency <= MAX_CONCURRENCY:
        raise PosencError(f"--concurrency {concurrency}: allowed 1 to {MAX_CONCURRENCY}")
    cap = check_flags(loss, loss_max_length)
    plan = plan_for(plan_file=str(plan_file) if plan_file is not None else None, config=config, lengths=lengths,
                    template=template, depths=depths, trials=trials, pass_rate=pass_rate)
    for line in plan.notes:
        sys.stderr.write(f"note: {line}\n")

    client = _client(url, api_key_env, timeout, retries)
    caps = probe(client, model, api)
    count = _counter(client, caps, tokenizer)
    loss_choice = choose(plan, caps, loss, cap)
    runner = Runner(client, caps, plan, out, count, concurrency=concurrency or caps.concurrency, label=label,
                    counter=f"local:{tokenizer}" if tokenizer else f"server:{caps.tokenize}", loss=loss_choice)
    # held from reading the manifest to the report: a second run on the folder would send and append every cell
    # again; the kernel drops the lock when this process dies, so a killed run never blocks its rerun
    with hold(out):
        todo, done = runner.prepare()
        if caps.prompt_logprobs is None:
            sys.stderr.write(f"note: per-position loss unavailable: {caps.logprobs_detail}\n")
        elif loss_choice.mode != "on":  # a loss left out or shortened is said; one measured as planned is not
            sys.stderr.write(f"note: per-position loss {loss_choice.describe()}\n")
        if done:
            sys.stderr.write(f"note: {out}: {done} cells already done, {len(todo)} to run\n")
        if concurrency is None and caps.concurrency > 1 and todo:
            sys.stderr.write(f"note: {caps.concurrency} requests in flight ({caps.concurrency_source}; "
                             "--concurrency to change)\n")
        with _Bar(len(todo)) as bar:
            runner.run(todo, bar.update)
        _report(out, None, None, None, as_json)


class _Bar:
    """A rich progress bar on stderr: cells done of total, requests sent, passes so far, ETA."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.progress: Any = None

    def __enter__(self) -> _Bar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        stderr = console(stderr=True)
        if not stderr.is_terminal:  # a transient bar still leaves an empty line in a pipe or log: draw none there
            return self
        self.progress = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[requests]} requests, {task.fields[passed]} passed"),
                                 TimeRemainingColumn(), console=stderr, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("eval", total=self.total, requests=0, passed=0)
        return self

    def update(self, state: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=state.done, requests=state.requests, passed=state.passed)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


@eval_app.command("report")
def report_command(
    run: Annotated[Path, typer.Argument(help="A run folder written by `posenc eval run`.")],
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="The unscaled model's run, for the short-context regression test.",
        show_default="none")] = None,
    png: PngOpt = None,
    loss_png: LossPngOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pass rates per length and depth (task runs: scores per task and length) with 95% intervals, the loss curve,
    and each test's verdict: exit 0 pass, 1 fail, 3 not run."""
    _report(run, baseline, png, loss_png, as_json)


def _report(run: Path, baseline: Path | None, png: Path | None, loss_png: Path | None, as_json: bool) -> None:
    from posenc_cli.evaluation.report import FAIL, PASS, summarise

    summary = summarise(run, baseline)
    summary["api"] = _api_of(run)
    _figures([summary], png, loss_png)
    if as_json:
        print_json(summary)
    else:
        _render_summary(summary)
    # "not run" (cells missing, no log-probabilities, no baseline, no test at all) is not bad input: nothing to fix
    # on the command line, the run could not be judged
    code = {PASS: ExitCode.OK, FAIL: ExitCode.CHECK_FAILED}.get(summary["result"], ExitCode.COULD_NOT_RUN)
    if code != ExitCode.OK:
        raise typer.Exit(code)


def _api_of(run: Path) -> dict[str, Any]:
    """Which endpoint the run's retrieval prompts went to, and the chat template's tokens in their lengths."""
    from posenc_cli.evaluation.run import read_manifest

    manifest = read_manifest(run)
    name = manifest.get("api", "completions")
    out: dict[str, Any] = {"name": name, "endpoint": "/v1/chat/completions" if name == "chat" else "/v1/completions"}
    if name == "chat":
        out["template_tokens"] = manifest["server"].get("chat_offset")
    return out


def _figures(summaries: list[dict[str, Any]], png: Path | None, loss_png: Path | None) -> None:
    if png is None and loss_png is None:
        return

    for name, path in (("--png", png), ("--loss-png", loss_png)):
        if path is not None and output_kind(path) == "stdout":
            # the summary (table or JSON) is the command's stdout: a PNG there would corrupt both
            raise PosencError(f"{name} {path}: the report prints its summary on stdout; write the PNG to a file")
    from posenc_cli.plots.figures import LossCurve, figure_bytes, loss_figure, pass_rate_figure

    if png is not None:
        grids = [_grid(s) for s in summaries]
        shown = write_output(png, figure_bytes(pass_rate_figure(grids), "png"))
        sys.stderr.write(f"wrote {shown}\n")
    if loss_png is not None:
        curves = [LossCurve(s["label"] or s["run"], [b["from"] for b in s["loss"]["curve"]],
                            [b["to"] for b in s["loss"]["curve"]], [b["loss"] for b in s["loss"]["curve"]])
                  for s in summaries if s["loss"]["curve"]]
        if not curves:
            raise PosencError("--loss-png: no run has prompt log-probabilities (the server gave none, or the run "
                              "left the loss out: --no-loss, or no test needed it)")
        # the plan's own lengths: where the regression is judged and where the needle test deploys
        names = {"regression": "regression check", "niah": "needle test"}
        marks = sorted({(t["length"], names[t["kind"]]) for s in summaries for t in s["tests"] if t["kind"] in names})
        shown = write_output(loss_png, figure_bytes(loss_figure(curves, marks=marks), "png"))
        sys.stderr.write(f"wrote {shown}\n")


def _grid(summary: dict[str, Any]) -> Any:
    """A run's heatmap: needle pass rates by depth, or for a task run each task's score (x100 -> 0 .. 1)."""
    from posenc_cli.plots.figures import PassGrid

    title = summary["label"] or summary["run"]
    tasks = summary.get("tasks")
    if tasks is None:
        return PassGrid(title, summary["lengths"], summary["depths"], summary["pass_rate"])
    rates = [[None if tasks["scores"][t][str(n)] is None else tasks["scores"][t][str(n)] / 100 for t in tasks["names"]]
             for n in summary["lengths"]]
    return PassGrid(title, summary["lengths"], [], rates, rows=tasks["names"])


def _render_summary(summary: dict[str, Any]) -> None:
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
    if "tasks" in summary:
        _render_tasks(summary["tasks"])
    else:
        out.print(table)
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


def _render_tasks(tasks: dict[str, Any]) -> None:
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


@eval_app.command("compare")
def compare_command(
    runs: Annotated[list[Path], typer.Argument(help="Two or more run folders (same lengths).")],
    png: PngOpt = None,
    loss_png: LossPngOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side, each against the first with the 95% interval of the difference: pass rates per length (task
    runs: scores per task and length), heatmaps in one PNG, loss curves on one chart."""
    from posenc_cli.evaluation.report import compare, summarise

    if len(runs) < 2:
        raise PosencError(f"compare needs two or more run folders, got {len(runs)}")
    summaries = [summarise(r) for r in runs]
    result = compare(summaries)
    _figures(summaries, png, loss_png)
    if as_json:
        print_json(result)
        return
    _render_compare(result)


def _render_compare(result: dict[str, Any]) -> None:
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
