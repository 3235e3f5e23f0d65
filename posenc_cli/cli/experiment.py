"""``posenc experiment lm|copy|passkey``: train tiny transformers on the CPU (extrapolation per position method;
a passkey Llama exported for llama.cpp and transformers).

Parsing and rendering only: each command is one call of :mod:`posenc_cli.experiment.launch`. Only typer and the
standard library load with this module: torch (an optional extra) and matplotlib are imported there, after checking
that torch is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli.output import console, note, print_json
from posenc_cli.experiment import launch
from posenc_cli.experiment.settings import MAX_LEN, MAX_SEED, MAX_STEPS

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

experiment_app = typer.Typer(
    add_completion=False,
    help="Train tiny language models on the CPU and measure how each positional encoding extrapolates "
    "past its training length (needs the optional torch extra).",
    no_args_is_help=True,
)

MethodsOpt = Annotated[str | None, typer.Option(
    "--methods", help="Comma list of nope, sinusoidal, learned, rope, rope+linear, rope+ntk, rope+yarn, alibi.",
    show_default="all")]
TrainLenOpt = Annotated[str | None, typer.Option(
    "--train-len", help=f"Training length in tokens; 2 to {MAX_LEN} (copy: even, at least 4).",
    show_default="lm 128, copy 32; --quick: 64 and 16")]
EvalLensOpt = Annotated[str | None, typer.Option(
    "--eval-lens", help=f"Evaluation lengths: multiples like 1x,2x,4x or lengths like 128,256,1k; each 2 to {MAX_LEN}.",
    show_default="1x,2x,4x,8x; --quick: 1x,2x,4x")]
StepsOpt = Annotated[int | None, typer.Option(
    "--steps", help=f"Training steps per model; 1 to {MAX_STEPS}.",
    show_default="lm 400, copy 1000; --quick: 100, 150")]
SeedOpt = Annotated[int, typer.Option(
    "--seed", help=f"Random seed: same seed, same machine, same numbers; 0 to {MAX_SEED}.")]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", help="cpu or cuda.", show_default="cuda when torch sees one, else cpu")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="A small run that finishes in under a minute on a CPU.")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Folder for results.json, chart.png and command.txt (created if missing).",
    show_default="write no files")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")]


@experiment_app.command("lm")
def lm(
    methods: MethodsOpt = None,
    train_len: TrainLenOpt = None,
    eval_lens: EvalLensOpt = None,
    steps: StepsOpt = None,
    seed: SeedOpt = 0,
    device: DeviceOpt = None,
    quick: QuickOpt = False,
    text: Annotated[str | None, typer.Option(
        "--text", help="Your own corpus (bytes).", show_default="the Python standard library's source files")] = None,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Byte-level language model: bits per byte on held-out text, per method and evaluation length.

    Each model is trained at --train-len and evaluated on the same held-out bytes cut into windows of every
    --eval-lens length. rope+linear/ntk/yarn apply the scaling to the trained RoPE model at evaluation time.
    """
    _experiment("lm", methods=methods, train_len=train_len, eval_lens=eval_lens, steps=steps, seed=seed,
                device=device, quick=quick, text=text, out=out, as_json=as_json)


@experiment_app.command("copy")
def copy(
    methods: MethodsOpt = None,
    train_len: TrainLenOpt = None,
    eval_lens: EvalLensOpt = None,
    steps: StepsOpt = None,
    seed: SeedOpt = 0,
    device: DeviceOpt = None,
    quick: QuickOpt = False,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy task: random symbols, a separator, the same symbols again; accuracy on the copy per method and length.

    Trained on rows packed with strings of random lengths that fit --train-len; tested on one string filling each
    --eval-lens length.
    """
    _experiment("copy", methods=methods, train_len=train_len, eval_lens=eval_lens, steps=steps, seed=seed,
                device=device, quick=quick, text=None, out=out, as_json=as_json)


@experiment_app.command("passkey")
def passkey(
    out: Annotated[Path, typer.Option(
        "--out", help="Folder for passkey.gguf, hf/ (a transformers checkpoint) and train.json (created if missing).")],
    steps: Annotated[int | None, typer.Option(
        "--steps", help=f"Training steps; 1 to {MAX_STEPS}.", show_default="2000; --quick: 30")] = None,
    seed: SeedOpt = 0,
    quick: Annotated[bool, typer.Option("--quick", help="A few dozen steps on short prompts: seconds, for tests.")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Train a tiny Llama (about 250k parameters, one CPU thread) on passkey retrieval and export it for engines.

    Training sequences are prompts of the shipped passkey eval template (rules/templates/passkey.yaml) of 48 to 250
    byte tokens, then the key. Writes OUT/passkey.gguf (llama.cpp), OUT/hf/ (config.json, model.safetensors,
    tokenizer.json, tokenizer_config.json: transformers, vLLM) and OUT/train.json (command, settings, losses,
    wall time and the greedy pass rate per prompt length, measured in torch). Same seed, same machine, same bytes.
    """
    settings, result = launch.passkey(out, steps=steps, seed=seed, quick=quick, as_json=as_json, note=note)
    if as_json:
        print_json(result)
    else:
        rates = ", ".join(f"{k}: {v:.0%}" for k, v in result["pass_rate"].items())
        sys.stdout.write(f"passkey pass rate by prompt length (trained up to {settings.shape.max_position_embeddings}"
                         f" tokens): {rates}\n")


def _experiment(task: str, *, as_json: bool, **asked: Any) -> None:
    results = launch.extrapolation(task, **asked, progress=_ProgressReporter, note=note)
    if as_json:
        print_json(results)
    else:
        _render(results)


class _ProgressReporter:
    """rich progress bars on stderr, one per trained model; nothing is drawn before the first model starts."""

    def __enter__(self) -> _ProgressReporter:
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def start(self, label: str, total: int) -> None:
        if self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), console=console(stderr=True),
            )
            self.progress.start()
        self.task = self.progress.add_task(label, total=total, loss="-")

    def advance(self, loss: float) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1, loss=f"{loss:.3f}")

    def done(self) -> None:
        self.task = None


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1%}" if metric == "copy_accuracy" else f"{value:.3f}"


def _render(results: dict[str, Any]) -> None:
    from rich.table import Table

    settings = results["settings"]
    metric = results["metric"]
    train_len = settings["train_len"]
    what = ("held-out bits per byte (lower is better)" if metric == "bits_per_byte"
            else "copy accuracy (higher is better)")
    table = Table(title=f"posenc experiment {results['task']}: {what}")
    table.add_column("method")
    for n in settings["eval_lens"]:
        table.add_column(f"{n} (train)" if n == train_len else str(n), justify="right")
    table.add_column("train loss first -> last", justify="right")
    for method, series in results["results"].items():
        kind = "rope" if method.startswith("rope") else method
        tr = results["training"][kind]
        table.add_row(method, *(_fmt(v, metric) for v in series.values()),
                      f"{tr['loss_first']:.3f} -> {tr['loss_last']:.3f}")
    base = results["baseline"]
    table.caption = (f"trained at {train_len} for {settings['steps']} steps, seed {results['seed']}; "
                     f"{base['name']} baseline {_fmt(base['value'], metric)}")
    out = console()
    out.print(table)
