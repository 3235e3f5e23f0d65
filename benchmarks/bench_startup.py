"""Wall time of whole posenc commands next to the bare imports they cannot avoid.

Each row is a fresh process (start-up included), timed best-of-N after one warm-up run; rounds interleave the
commands so drift in machine load hits every row alike. The ratio compares best times with the row's baseline
(issue 3 asks scale and inspect to stay within 1.5x of ``python -c "import typer, numpy"``).

    python benchmarks/bench_startup.py            # N = 15
    python benchmarks/bench_startup.py --runs 30
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import _timing

ROOT = Path(__file__).resolve().parents[1]
# Llama 3.1 8B's config.json, as the tests use it
LLAMA31 = ROOT / "tests" / "fixtures" / "llama-3.1-8b.json"
GGUF = ROOT / "docs" / "examples" / "llama-3.1-8b.gguf"
HUB_CACHE = ROOT / "docs" / "hub-cache"


@dataclass
class Row:
    label: str
    argv: list[str]
    baseline: str | None = None  # label of the row this one is compared with
    samples: list[_timing.Sample] = field(default_factory=list)

    @property
    def best_ms(self) -> float:
        return _timing.best(self.samples) * 1000

    @property
    def median_ms(self) -> float:
        return _timing.median(self.samples) * 1000


def available_commands() -> set[str]:
    import typer

    from posenc_cli.cli import app

    group = typer.main.get_command(app)
    return set(group.list_commands(typer.Context(group)))  # type: ignore[attr-defined]


def build_rows(tmp: Path) -> tuple[list[Row], list[str]]:
    py, posenc = sys.executable, _timing.posenc_command()
    commands = available_commands()
    config = tmp / "llama-3.1-config.json"
    shutil.copyfile(LLAMA31, config)
    rows = [
        Row('python -c "import typer, numpy"', [py, "-c", "import typer, numpy"]),
        Row("posenc scale yarn --original-max 32k --target 128k --head-dim 128 --theta 1e6",
            [*posenc, "scale", "yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128",
             "--theta", "1e6"], baseline='python -c "import typer, numpy"'),
        Row("posenc inspect llama-3.1-config.json --json", [*posenc, "inspect", str(config), "--json"],
            baseline='python -c "import typer, numpy"'),
        # --engine ENGINE prints the engine's verdict (posenc check's, for the request): it computes frequencies
        Row("posenc scale yarn --original-max 32k --target 128k --head-dim 128 --theta 1e6 --engine vllm",
            [*posenc, "scale", "yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128",
             "--theta", "1e6", "--engine", "vllm"], baseline='python -c "import typer, numpy"'),
    ]
    # other sources: each against the import its reader cannot avoid (env pins the Hub read to the offline cache)
    hub_env = ["env", "HF_HUB_OFFLINE=1", f"HF_HUB_CACHE={HUB_CACHE}", "HF_HUB_DISABLE_TELEMETRY=1"]
    rows += [
        # posenc reads a GGUF header with the standard library: the same baseline as a config.json
        Row("posenc inspect llama-3.1-8b.gguf --json", [*posenc, "inspect", str(GGUF), "--json"],
            baseline='python -c "import typer, numpy"'),
        Row('python -c "import typer, numpy, huggingface_hub"',
            [*hub_env, py, "-c", "import typer, numpy, huggingface_hub"]),
        Row("posenc inspect Qwen/Qwen2.5-7B-Instruct --json (offline cache)",
            [*hub_env, *posenc, "inspect", "Qwen/Qwen2.5-7B-Instruct", "--json"],
            baseline='python -c "import typer, numpy, huggingface_hub"'),
    ]
    skipped = []
    if "pick" in commands:
        rows += [
            Row('python -c "import typer, yaml"', [py, "-c", "import typer, yaml"]),
            Row("posenc pick --ctx 128k", [*posenc, "pick", "--ctx", "128k"],
                baseline='python -c "import typer, yaml"'),
        ]
    else:
        skipped.append("posenc pick (no such command)")
    if "plot" in commands:
        rows += [
            Row('python -c "import matplotlib.pyplot"', [py, "-c", "import matplotlib.pyplot"]),
            Row("posenc plot sinusoidal --max-len 512 --d-model 128 -o plot.png",
                [*posenc, "plot", "sinusoidal", "--max-len", "512", "--d-model", "128", "-o", str(tmp / "plot.png")],
                baseline='python -c "import matplotlib.pyplot"'),
        ]
    else:
        skipped.append("posenc plot (no such command)")
    return rows, skipped


def table(rows: list[Row]) -> str:
    by_label = {r.label: r for r in rows}
    cells = []
    for r in rows:
        ratio = "baseline" if r.baseline is None else f"{r.best_ms / by_label[r.baseline].best_ms:.2f}x"
        cells.append([f"`{r.label}`", f"{r.best_ms:.1f}", f"{r.median_ms:.1f}", ratio])
    return _timing.markdown_table(["command", "best ms", "median ms", "ratio to baseline (best)"], cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (best-of-N); default 15")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="posenc-bench-") as tmpdir:
        tmp = Path(tmpdir)
        rows, skipped = build_rows(tmp)
        samples = _timing.interleaved({r.label: r.argv for r in rows}, args.runs, cwd=tmp)
        for r in rows:
            r.samples = samples[r.label]
    print(f"Python {sys.version.split()[0]}, best of {args.runs} runs after one warm-up, fresh process each\n")
    print(table(rows))
    for s in skipped:
        print(f"\nskipped: {s}")


if __name__ == "__main__":
    main()
