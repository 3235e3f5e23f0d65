"""Each ``posenc eval`` command's work, from what it was asked to what it renders: :func:`probe_server`,
:func:`run_plan` (and :func:`dry_run_plan`), :func:`report_run` and :func:`compare_runs`.

Nothing is printed here: messages for stderr go to ``note`` as whole lines (``note: ...``, ``wrote ...``), a run's
progress to ``progress``, and the result comes back with the exit status it earns. Errors name their fields
(``{timeout}``, ``{png}``), which the command line renders as its options. The plan, the runner and the report load
yaml; they are imported inside the functions that need them, so a probe never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.errors import CouldNotRun, ExitCode, PosencError
from posenc_cli.evaluation import MAX_EVAL_LENGTH, MIN_EVAL_LENGTH
from posenc_cli.evaluation.client import Client, api_key_from_env
from posenc_cli.evaluation.losspolicy import LossChoice, check_flags, choose
from posenc_cli.evaluation.probe import PROBE_TEXT, Capabilities, expect_context, probe, window_refusal
from posenc_cli.evaluation.tokens import Counter, local_counter, server_counter
from posenc_cli.files import output_kind, write_output
from posenc_cli.folderlock import hold
from posenc_cli.units import format_length, parse_length

if TYPE_CHECKING:
    from posenc_cli.evaluation.plan import Plan
    from posenc_cli.evaluation.run import Progress

MAX_TIMEOUT = 86_400.0  # one day per answer; beyond it socket timeouts overflow (inf) and nobody waits
MAX_RETRIES = 20  # with the 8 s back-off cap, 20 retries already wait ~2.5 min
MAX_CONCURRENCY = 256  # requests in flight: one thread each
#: How the length options state their range.
EVAL_LENGTHS = f"{MIN_EVAL_LENGTH} to {format_length(MAX_EVAL_LENGTH)} tokens"

Note = Callable[[str], None]
#: ``progress(total)`` opens a display of a run's cells and returns the callback the runner reports to.
ProgressDisplay = Callable[[int], AbstractContextManager[Callable[["Progress"], None]]]


class Server(NamedTuple):
    """The server a probe or a run talks to, and how."""

    url: str
    model: str | None = None  # None: the server's first
    tokenizer: str | None = None  # None: the server's tokenize endpoint; else "bytes", a tokenizer.json or a folder
    api: str = "completions"  # or "chat"
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 600.0
    retries: int = 1
    num_ctx: int | None = None  # api "ollama": the window sent with every request (None: the plan's longest length)


def connect(server: Server) -> Client:
    """A client for ``server``, its timeout and retries checked against the limits."""
    timeout, retries = server.timeout, server.retries
    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan
        raise PosencError(f"{{timeout}} {timeout:g}: allowed greater than 0 to {MAX_TIMEOUT:.0f} seconds", "timeout")
    if not 0 <= retries <= MAX_RETRIES:
        raise PosencError(f"{{retries}} {retries}: allowed 0 to {MAX_RETRIES}", "retries")
    if server.num_ctx is not None and not MIN_EVAL_LENGTH <= server.num_ctx <= MAX_EVAL_LENGTH:
        raise PosencError(f"{{num_ctx}} {server.num_ctx}: allowed {EVAL_LENGTHS}", "num_ctx")
    return Client(server.url, api_key=api_key_from_env(server.api_key_env), timeout=timeout, retries=retries)


def counter(client: Client, caps: Capabilities, tokenizer: str | None, note: Note) -> Counter:
    """The prompt token counter: the server's, or the local ``tokenizer`` corrected by the tokens the server's usage
    counts beyond it on the probe's text (said in a note)."""
    if tokenizer is None:
        return server_counter(client, caps)
    count = local_counter(tokenizer)
    offset = caps.probe_tokens - count(PROBE_TEXT) if caps.probe_tokens is not None else 0
    if offset:
        note(f"note: --tokenizer {tokenizer} counts {-offset:+d} tokens against the server's usage; corrected")
    return (lambda text: count(text) + offset) if offset else count


class Probed(NamedTuple):
    """A probe: the server's capabilities, what a run with the same loss flags would send for the loss, the JSON
    answer, and whether the context asked for (if any) was served."""

    caps: Capabilities
    loss: LossChoice
    result: dict[str, Any]
    served: bool

    @property
    def code(self) -> ExitCode:
        return ExitCode.OK if self.served else ExitCode.CHECK_FAILED


def probe_server(server: Server, *, expect_ctx: str | None = None, template: str | None = None,
                 loss: bool | None = None, loss_max_length: str | None = None, note: Note) -> Probed:
    """``posenc eval probe``: what ``server`` supports and, with ``expect_ctx``, whether it serves that context (a
    prompt one token shorter, built from ``template``, plus one generated token)."""
    from posenc_cli.evaluation.templates import build_prompt, load_template

    cap = check_flags(loss, loss_max_length)
    client = connect(server)
    length = parse_length(expect_ctx, name="--expect-ctx") if expect_ctx is not None else None
    if length is not None and not MIN_EVAL_LENGTH <= length <= MAX_EVAL_LENGTH:
        raise PosencError(f"{{expect_ctx}} {expect_ctx}: allowed {EVAL_LENGTHS}", "expect_ctx")
    chosen = load_template(template)
    caps = probe(client, server.model, server.api, server.num_ctx or length)
    if length is not None:
        try:
            count = counter(client, caps, server.tokenizer, note)
        except PosencError as exc:
            raise PosencError(f"{{expect_ctx}} needs a token count: {exc}", "expect_ctx") from None

        def long_prompt(n: int) -> tuple[str, int]:
            prompt = build_prompt(chosen, length=n, depth=0.5, seed=0, count=count)
            return prompt.text, prompt.tokens

        expect_context(client, caps, length, long_prompt)
    choice = choose(None, caps, loss, cap)
    expected = caps.expected_context
    served = expected is None or (
        bool(expected.get("served")) and expected.get("prompt_tokens") in (None, expected.get("built_tokens")))
    return Probed(caps, choice, caps.as_dict() | {"loss": choice.as_dict()}, served)


class Judged(NamedTuple):
    """A run's (or several runs') report: the JSON answer and the exit status its verdict earns."""

    result: dict[str, Any]
    code: ExitCode


def run_plan(server: Server, out: Path, *, plan_file: str | None = None, config: str | None = None,
             lengths: str | None = None, depths: str | None = None, trials: int | None = None,
             pass_rate: float | None = None, template: str | None = None, loss: bool | None = None,
             loss_max_length: str | None = None, concurrency: int | None = None, label: str | None = None,
             note: Note, progress: ProgressDisplay) -> Judged:
    """``posenc eval run``: send every cell of the plan (``plan_file``, ``config`` or ``lengths``) not yet in the
    run folder ``out``, then report it (:func:`report_run`)."""
    from posenc_cli.evaluation.run import Runner

    cap, plan = _planned(concurrency, loss, loss_max_length, note, plan_file=plan_file, config=config,
                         lengths=lengths, template=template, depths=depths, trials=trials, pass_rate=pass_rate)

    client = connect(server)
    caps = probe(client, server.model, server.api, server.num_ctx or max(plan.lengths))
    refusal = window_refusal(caps, list(plan.lengths))
    if refusal is not None:  # before any cell: a server truncates or refuses past its window, silently or not
        raise CouldNotRun(f"{refusal}; nothing was sent")
    count = counter(client, caps, server.tokenizer, note)
    loss_choice = choose(plan, caps, loss, cap)
    counted_by = f"local:{server.tokenizer}" if server.tokenizer else f"server:{caps.tokenize}"
    runner = Runner(client, caps, plan, out, count, concurrency=concurrency or caps.concurrency, label=label,
                    counter=counted_by, loss=loss_choice)
    # held from reading the manifest to the report: a second run on the folder would send and append every cell
    # again; the kernel drops the lock when this process dies, so a killed run never blocks its rerun
    with hold(out):
        todo, done = runner.prepare()
        if caps.prompt_logprobs is None:
            note(f"note: per-position loss unavailable: {caps.logprobs_detail}")
        elif loss_choice.mode != "on":  # a loss left out or shortened is said; one measured as planned is not
            note(f"note: per-position loss {loss_choice.describe()}")
        if done:
            note(f"note: {out}: {done} cells already done, {len(todo)} to run")
        if concurrency is None and caps.concurrency > 1 and todo:
            note(f"note: {caps.concurrency} requests in flight ({caps.concurrency_source}; --concurrency to change)")
        with progress(len(todo)) as update:
            runner.run(todo, update)
        return report_run(out, note=note)


def _planned(concurrency: int | None, loss: bool | None, loss_max_length: str | None, note: Note,
             **asked: Any) -> tuple[Any, Any]:
    """What a run and its dry run share: the options checked, the loss cap, the plan built and its notes said."""
    from posenc_cli.evaluation.plan import plan_for

    if concurrency is not None and not 1 <= concurrency <= MAX_CONCURRENCY:
        raise PosencError(f"{{concurrency}} {concurrency}: allowed 1 to {MAX_CONCURRENCY}", "concurrency")
    cap = check_flags(loss, loss_max_length)
    plan = plan_for(**asked)
    for line in plan.notes:
        note(f"note: {line}")
    return cap, plan


def dry_run_plan(server: Server | None, *, plan_file: str | None = None, config: str | None = None,
            lengths: str | None = None, depths: str | None = None, trials: int | None = None,
            pass_rate: float | None = None, template: str | None = None, loss: bool | None = None,
            loss_max_length: str | None = None, concurrency: int | None = None, note: Note) -> Judged:
    """``posenc eval run --dry-run``: the grid, the requests and the prompt tokens the run would send, and the
    window the server serves (probed when ``server`` is given, else unknown); nothing is written or sent beyond
    the probe. Exit 3 when a length is past the window (what the run would refuse)."""

    cap, plan = _planned(concurrency, loss, loss_max_length, note, plan_file=plan_file, config=config,
                         lengths=lengths, template=template, depths=depths, trials=trials, pass_rate=pass_rate)
    caps = (probe(connect(server), server.model, server.api, server.num_ctx or max(plan.lengths))
            if server is not None else None)
    if caps is not None:
        choice = choose(plan, caps, loss, cap)
        loss_lengths, loss_text = (choice.lengths if choice.measured else ()), choice.describe()
    elif loss is False:
        loss_lengths, loss_text = (), "off (--no-loss)"
    else:  # what a server giving prompt log-probabilities would take (the probe decides)
        loss_lengths = tuple(n for n in plan.loss_lengths if cap is None or n <= cap)
        loss_text = "if the server gives prompt log-probabilities (unknown without a server)"
    grid = _dry_grid(plan, loss_lengths)
    refusal = window_refusal(caps, list(plan.lengths)) if caps is not None else None
    result: dict[str, Any] = {
        "dry_run": True, "plan": plan.source, "lengths": list(plan.lengths), "depths": list(plan.depths),
        "trials": plan.trials, "grid": grid, "requests": sum(row["requests"] for row in grid),
        "prompt_tokens": sum(row["prompt_tokens"] for row in grid),
        "served_context": caps.served_context if caps is not None else None,
        "context_source": caps.context_source if caps is not None else "no server given",
        "window": "unknown" if caps is None or caps.served_context is None else "refused" if refusal else "fits",
        "loss": loss_text,
        "concurrency": concurrency or (caps.concurrency if caps is not None else None),  # None: the server's
        "probe_requests": caps.requests if caps is not None else 0,
    }
    if refusal is not None:
        result["why"] = refusal
    return Judged(result, ExitCode.COULD_NOT_RUN if refusal else ExitCode.OK)


def _dry_grid(plan: Plan, loss_lengths: tuple[int, ...]) -> list[dict[str, Any]]:
    """Per length: the requests of each kind and their prompt tokens as the server counts them (a cell of length L
    is L tokens of context less the tokens it may generate; prompts are built to that exact count, a chat run's
    with the chat template's tokens inside it)."""
    from posenc_cli.evaluation.templates import Template

    template, tasks = plan.template, plan.task_set
    rows = []
    for n in sorted({*plan.lengths, *loss_lengths}):  # a capped loss request may sit below the longest length
        sent = n in plan.lengths
        needle = len(plan.depths) * plan.trials if isinstance(template, Template) and sent else 0
        per_task = [(task.max_tokens, plan.trials) for task in tasks.tasks] if tasks is not None and sent else []
        loss = plan.loss_trials if n in loss_lengths else 0
        tokens = loss * (n - 1) + sum(k * (n - generated) for generated, k in per_task)
        if isinstance(template, Template):
            tokens += needle * (n - template.max_tokens)
        rows.append({"length": n, "needle": needle, "task": sum(k for _, k in per_task), "loss": loss,
                     "requests": needle + sum(k for _, k in per_task) + loss, "prompt_tokens": tokens})
    return rows


def report_run(run: Path, baseline: Path | None = None, png: Path | None = None, loss_png: Path | None = None, *,
               note: Note) -> Judged:
    """``posenc eval report``: the run's summary against its plan's tests (and the ``baseline`` run's), with the
    endpoint its prompts went to; the heatmap and loss figures written where asked. "not run" (cells missing, no
    log-probabilities, no baseline, no test at all) is not bad input: nothing to fix on the command line, the run
    could not be judged."""
    from posenc_cli.evaluation.report import FAIL, PASS, summarise

    summary = summarise(run, baseline)
    summary["api"] = _api_of(run)
    write_figures([summary], png, loss_png, note)
    code = {PASS: ExitCode.OK, FAIL: ExitCode.CHECK_FAILED}.get(summary["result"], ExitCode.COULD_NOT_RUN)
    return Judged(summary, code)


def compare_runs(runs: list[Path], png: Path | None = None, loss_png: Path | None = None, *,
                 note: Note) -> dict[str, Any]:
    """``posenc eval compare``: the runs side by side, each against the first (:func:`.report.compare`), the
    figures written where asked."""
    from posenc_cli.evaluation.report import compare, summarise

    if len(runs) < 2:
        raise PosencError(f"compare needs two or more run folders, got {len(runs)}")
    summaries = [summarise(r) for r in runs]
    result = compare(summaries)
    write_figures(summaries, png, loss_png, note)
    return result


def _api_of(run: Path) -> dict[str, Any]:
    """Which endpoint the run's retrieval prompts went to, and the chat template's tokens in their lengths."""
    from posenc_cli.evaluation.run import read_manifest

    manifest = read_manifest(run)
    name = manifest.get("api", "completions")
    endpoint = {"chat": "/v1/chat/completions", "ollama": "/api/generate"}.get(name, "/v1/completions")
    out: dict[str, Any] = {"name": name, "endpoint": endpoint}
    if name == "chat":
        out["template_tokens"] = manifest["server"].get("chat_offset")
    return out


def write_figures(summaries: list[dict[str, Any]], png: Path | None, loss_png: Path | None, note: Note) -> None:
    """The runs' pass-rate heatmaps into ``png`` and their loss curves into ``loss_png`` (matplotlib loads only
    here); each path written is said in a note."""
    if png is None and loss_png is None:
        return
    for field, path in (("png", png), ("loss_png", loss_png)):
        if path is not None and output_kind(path) == "stdout":
            # the summary (table or JSON) is the command's stdout: a PNG there would corrupt both
            raise PosencError(f"{{{field}}} {path}: the report prints its summary on stdout; write the PNG to a file",
                              field)
    from posenc_cli.plots.figures import LossCurve, figure_bytes, loss_figure, pass_rate_figure

    if png is not None:
        grids = [g for s in summaries for g in _grids(s)]
        note(f"wrote {write_output(png, figure_bytes(pass_rate_figure(grids), 'png'))}")
    if loss_png is not None:
        curves = [LossCurve(s["label"] or s["run"], [b["from"] for b in s["loss"]["curve"]],
                            [b["to"] for b in s["loss"]["curve"]], [b["loss"] for b in s["loss"]["curve"]])
                  for s in summaries if s["loss"]["curve"]]
        if not curves:
            raise PosencError("{loss_png}: no run has prompt log-probabilities (the server gave none, or the run left "
                              "the loss out: --no-loss, or no test needed it)", "loss_png")
        # the plan's own lengths: where the regression is judged and where the needle test deploys
        names = {"regression": "regression check", "niah": "needle test"}
        marks = sorted({(t["length"], names[t["kind"]]) for s in summaries for t in s["tests"] if t["kind"] in names})
        note(f"wrote {write_output(loss_png, figure_bytes(loss_figure(curves, marks=marks), 'png'))}")


def _grids(summary: dict[str, Any]) -> list[Any]:
    """A run's heatmaps: needle pass rates by depth, and for the tasks it sent each task's score (x100 -> 0 .. 1)."""
    from posenc_cli.plots.figures import PassGrid

    title = summary["label"] or summary["run"]
    tasks = summary.get("tasks")
    kinds = summary.get("kinds", ["task"] if tasks is not None else ["needle"])
    out = []
    if "needle" in kinds:
        out.append(PassGrid(f"{title} (needle)" if tasks is not None else title, summary["lengths"],
                            summary["depths"], summary["pass_rate"]))
    if tasks is not None:
        rates = [[None if tasks["scores"][t][str(n)] is None else tasks["scores"][t][str(n)] / 100
                  for t in tasks["names"]] for n in summary["lengths"]]
        out.append(PassGrid(f"{title} (tasks)" if "needle" in kinds else title, summary["lengths"], [], rates,
                            rows=tasks["names"]))
    return out
