"""``posenc experiment lm|copy|passkey``: train tiny transformers on the CPU (extrapolation per position method;
a passkey Llama exported for llama.cpp and transformers).

Only typer and the standard library load with this module: torch (an optional extra) and matplotlib are imported
inside the commands, after checking that torch is installed.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli.output import console, print_json
from posenc_cli.errors import PosencError
from posenc_cli.experiment.settings import MAX_LEN, MAX_SEED, MAX_STEPS, resolve
from posenc_cli.files import atomic_write_bytes, atomic_write_text, dumps_config
from posenc_cli.folderlock import hold

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from posenc_cli.experiment.settings import Settings

INSTALL_HINT = "posenc experiment needs torch: pip install 'posenc[experiment]'"

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
    _require_torch()
    from posenc_cli.experiment.passkey import settings_for

    settings = settings_for(steps=steps, seed=seed, quick=quick)
    from posenc_cli.experiment.passkey import run, stderr_progress

    command = ["posenc", "experiment", "passkey", "--out", str(out)]
    if steps is not None:
        command += ["--steps", str(steps)]
    command += ["--seed", str(seed)] + (["--quick"] if quick else []) + (["--json"] if as_json else [])
    with hold(out):  # creates the folder; two trainings into one folder would interleave their files
        result = run(settings, out, command, stderr_progress(every=10 if quick else 100))
    sys.stderr.write(f"wrote {out / 'passkey.gguf'}, {out / 'hf'} and {out / 'train.json'} "
                     f"({result['wall_seconds']:.0f} s)\n")
    if as_json:
        print_json(result)
    else:
        rates = ", ".join(f"{k}: {v:.0%}" for k, v in result["pass_rate"].items())
        sys.stdout.write(f"passkey pass rate by prompt length (trained up to {settings.shape.max_position_embeddings}"
                         f" tokens): {rates}\n")


def _experiment(task: str, *, methods: str | None, train_len: str | None, eval_lens: str | None,
                steps: int | None, seed: int, device: str | None, quick: bool, text: str | None,
                out: Path | None, as_json: bool) -> None:
    _require_torch()

    if device is None:
        import torch  # noqa: TID253 - checked above; only this command loads it

        device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = resolve(task, methods=methods, train_len=train_len, eval_lens=eval_lens, steps=steps, seed=seed,
                       device=device, quick=quick, text=text)
    from posenc_cli.experiment.run import check_device, run

    check_device(settings.device)
    import contextlib

    # held from before training to the last file written: a second run into the folder would mix its files in
    with hold(out) if out is not None else contextlib.nullcontext():
        with _ProgressReporter() as reporter:
            results = run(settings, reporter)
        if out is not None:
            _write_out(out, settings, results)
    for line in results["notes"]:
        sys.stderr.write(f"note: {line}\n")
    if as_json:
        print_json(results)
    else:
        _render(results)


def _require_torch() -> None:
    """One ``error:`` line with the install hint when torch cannot be imported (never a traceback)."""
    try:
        missing = importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):  # a blocked or broken torch entry in sys.modules / sys.meta_path
        missing = True
    if missing:
        raise PosencError(INSTALL_HINT)
    try:
        import torch  # noqa: F401, TID253 - only this command loads it
    except ImportError as exc:
        raise PosencError(f"{INSTALL_HINT} (importing it failed: {exc})") from None


def _write_out(out: Path, settings: Settings, results: dict[str, Any]) -> None:

    from posenc_cli.experiment.chart import render_png

    versions = results["versions"]
    command = shlex.join(settings.command(out=str(out)))
    lines = [
        command,
        f"seed: {settings.seed}",
        f"device: {settings.device}, torch threads: {settings.threads}",
        f"versions: posenc {versions['posenc']}, torch {versions['torch']}, python {versions['python']}",
        f"wall time: {results['timing']['wall_seconds']:.1f} s",
    ]
    atomic_write_text(out / "results.json", dumps_config(results) + "\n")
    atomic_write_bytes(out / "chart.png", render_png(results))
    atomic_write_text(out / "command.txt", "\n".join(lines) + "\n")
    sys.stderr.write(f"wrote {out / 'results.json'}, {out / 'chart.png'} and {out / 'command.txt'}\n")


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
