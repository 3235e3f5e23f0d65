"""``posenc eval run|probe|report|compare``: run a test plan against a served model and judge it.

Parsing and rendering only: each command is one call of :mod:`posenc_cli.evaluation.workflows` (the plan, the
client, the runner and the verdicts live in ``posenc_cli.evaluation``); the tables are
:mod:`posenc_cli.cli.eval_tables`. rich loads for the progress bar and tables; matplotlib only when a PNG is asked
for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from posenc_cli.cli import eval_tables
from posenc_cli.cli.output import console, note, print_json
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.evaluation import MAX_TRIALS, TASKS
from posenc_cli.evaluation.workflows import (
    EVAL_LENGTHS,
    MAX_CONCURRENCY,
    MAX_RETRIES,
    MAX_TIMEOUT,
    Judged,
    Server,
    compare_runs,
    dry_run_plan,
    probe_server,
    report_run,
    run_plan,
)

eval_app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Run needle/passkey retrieval, RULER's tasks and per-position loss against an OpenAI-compatible server "
    "(vLLM, SGLang, llama.cpp), and judge the results against pick's test plan.")

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
    "--loss-max-length", help=f"Longest loss request; a longer one is sent at this length; {EVAL_LENGTHS}.",
    show_default="none; 2k on llama-cpp-python")]
ApiOpt = Annotated[str, typer.Option(
    "--api", help="completions: the raw prompt on /v1/completions; chat: the prompt as one user message on "
    "/v1/chat/completions, its length counting the chat template's tokens (measured by the probe); ollama: "
    "Ollama's /api/generate with num_ctx (URL http://127.0.0.1:11434; needs --tokenizer).")]
NumCtxOpt = Annotated[int | None, typer.Option(
    "--num-ctx", help=f"With --api ollama: the num_ctx sent with every request; {EVAL_LENGTHS}.",
    show_default="the plan's longest length (run), --expect-ctx (probe)")]
LossPngOpt = Annotated[Path | None, typer.Option("--loss-png", help="Write the per-position loss curve(s) here.",
                                                 show_default="none")]


@eval_app.command("probe")
def probe_command(
    url: UrlArg,
    model: ModelOpt = None,
    tokenizer: TokenizerOpt = None,
    expect_ctx: Annotated[str | None, typer.Option(
        "--expect-ctx", help="Send a request using exactly this much context (the length posenc scale meant): a "
        "prompt one token shorter plus one generated token; exit 1 if the server does not serve it; "
        f"{EVAL_LENGTHS}.", show_default="no such request")] = None,
    template: Annotated[str | None, typer.Option("--template", help="Template for that prompt's text.",
                                                 show_default="needle")] = None,
    loss: LossOpt = None,
    loss_max_length: LossMaxOpt = None,
    api: ApiOpt = "completions",
    num_ctx: NumCtxOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    timeout: TimeoutOpt = 600.0,
    retries: RetriesOpt = 1,
    as_json: JsonOpt = False,
) -> None:
    """What the server supports (tokenize, prompt logprobs, context per slot), whether it serves a context, and
    what a run with the same loss flags would send for the loss."""
    server = Server(url, model, tokenizer, api, api_key_env, timeout, retries, num_ctx)
    probed = probe_server(server, expect_ctx=expect_ctx, template=template, loss=loss,
                          loss_max_length=loss_max_length, note=note)
    if as_json:
        print_json(probed.result)
    else:
        eval_tables.render_probe(probed.caps, probed.loss.describe())
    if probed.code != ExitCode.OK:
        raise typer.Exit(probed.code)


@eval_app.command("run")
def run_command(
    url: Annotated[str | None, typer.Argument(
        help="The server's base URL, e.g. http://127.0.0.1:8000/v1 (optional with --dry-run).", metavar="URL",
        show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder: manifest.json + results.jsonl (resumed if "
                                             "it exists); not needed with --dry-run.", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the grid, the requests, the prompt tokens and the window the server serves "
        "(unknown without a URL); write and send nothing but the probe.")] = False,
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="A `posenc pick --json` answer (file, or - for stdin): its tests and lengths.",
        show_default="none")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", help="A model (config.json, folder, Hub id, GGUF): lengths where its positions change.",
        show_default="none")] = None,
    lengths: Annotated[str | None, typer.Option(
        "--lengths", help=f"Explicit lengths: 64,128,1k; each {EVAL_LENGTHS}.", show_default="none")] = None,
    depths: Annotated[str | None, typer.Option(
        "--depths", help="Needle depths as fractions, each 0 to 1.", show_default="0,0.25,0.5,0.75,1")] = None,
    trials: Annotated[int | None, typer.Option(
        "--trials", help=f"Prompts per length and depth; 1 to {MAX_TRIALS}.",
        show_default="2 from a plan or model, 4 with --lengths")] = None,
    pass_rate: Annotated[float | None, typer.Option(
        "--pass-rate", help="With --lengths: pass rate required at the longest length; 0 to 1.",
        show_default="no needle test")] = None,
    template: Annotated[str | None, typer.Option(
        "--template", help="passkey (the tiny model's), needle (pretrained models), ruler (RULER's 11 no-download "
        f"tasks: {', '.join(TASKS)}; or one of them alone) or a template or task set YAML file.",
        show_default="passkey with --lengths; a plan naming tasks runs needle and those tasks; else needle")] = None,
    model: ModelOpt = None,
    tokenizer: TokenizerOpt = None,
    loss: LossOpt = None,
    loss_max_length: LossMaxOpt = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help=f"Requests in flight at once; 1 to {MAX_CONCURRENCY}. Lines are written in the plan's "
        "order at any value.",
        show_default="llama-server's slots; 4 on vLLM and SGLang; else 1 (what probe shows)")] = None,
    api: ApiOpt = "completions",
    num_ctx: NumCtxOpt = None,
    label: Annotated[str | None, typer.Option("--label", help="A name for this run in reports.",
                                              show_default="the run folder")] = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    timeout: TimeoutOpt = 600.0,
    retries: RetriesOpt = 3,
    as_json: JsonOpt = False,
) -> None:
    """Send every cell of the plan (skipping finished ones), then report: exit 0 pass, 1 fail, 3 could not run
    (also: a length past the window the server reports, refused before sending)."""
    server = Server(url, model, tokenizer, api, api_key_env, timeout, retries, num_ctx) if url is not None else None
    if dry_run:
        planned = dry_run_plan(server, plan_file=str(plan_file) if plan_file is not None else None, config=config,
                               lengths=lengths, depths=depths, trials=trials, pass_rate=pass_rate, template=template,
                               loss=loss, loss_max_length=loss_max_length, concurrency=concurrency, note=note)
        if as_json:
            print_json(planned.result)
        else:
            eval_tables.render_dry_run(planned.result)
        if planned.code != ExitCode.OK:
            raise typer.Exit(planned.code)
        return
    if server is None or out is None:
        raise PosencError("eval run needs the server's URL and --out (or --dry-run to see the plan)")
    judged = run_plan(server, out, plan_file=str(plan_file) if plan_file is not None else None, config=config,
                      lengths=lengths, depths=depths, trials=trials, pass_rate=pass_rate, template=template, loss=loss,
                      loss_max_length=loss_max_length, concurrency=concurrency, label=label, note=note,
                      progress=_Bar)
    _render(judged, as_json)


class _Bar:
    """A rich progress bar on stderr: cells done of total, requests sent, passes so far, ETA."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.progress: Any = None

    def __enter__(self) -> Callable[[Any], None]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        stderr = console(stderr=True)
        if not stderr.is_terminal:  # a transient bar still leaves an empty line in a pipe or log: draw none there
            return self.update
        self.progress = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[requests]} requests, {task.fields[passed]} passed"),
                                 TimeRemainingColumn(), console=stderr, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("eval", total=self.total, requests=0, passed=0)
        return self.update

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
    _render(report_run(run, baseline, png, loss_png, note=note), as_json)


def _render(judged: Judged, as_json: bool) -> None:
    if as_json:
        print_json(judged.result)
    else:
        eval_tables.render_summary(judged.result)
    if judged.code != ExitCode.OK:
        raise typer.Exit(judged.code)


@eval_app.command("compare")
def compare_command(
    runs: Annotated[list[Path], typer.Argument(help="Two or more run folders (same lengths).")],
    png: PngOpt = None,
    loss_png: LossPngOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side, each against the first with the 95% interval of the difference: pass rates per length (task
    runs: scores per task and length), heatmaps in one PNG, loss curves on one chart."""
    result = compare_runs(runs, png, loss_png, note=note)
    if as_json:
        print_json(result)
    else:
        eval_tables.render_compare(result)
