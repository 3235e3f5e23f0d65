"""Wall time of ``posenc memory`` against the imports it cannot avoid, side by side, and a 100 GB GGUF against a
small one.

The issue's budgets: ``memory`` on a config.json within 1.3x of ``python -c "import typer, yaml"``; on a GGUF within
1.3x of ``import typer, numpy`` (the header path loads numpy only where a ``rope_freqs`` tensor is matched against
transformers' llama3 arithmetic; the baseline is ``import typer, yaml`` when it does not), and a GGUF's size does not
matter: a sparse 100 GB file behind a real header costs its header (ratio to the small file about 1).

All commands run as fresh processes, interleaved, after warm-up runs; the verdict is the median of per-pair ratios
(at least :data:`MIN_PAIRS` rounds). Bytecode caching is on, in a throw-away ``PYTHONPYCACHEPREFIX``.

    python benchmarks/bench_memory.py            # 20 runs each
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _timing

LIMIT = 1.3
MIN_PAIRS = 15
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "corpus" / "gemma-3-27b-it.json"
GGUF = ROOT / "docs" / "examples" / "llama-3.1-twin.gguf"
SPARSE_SIZE = 100 * 10**9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per command (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per command first (default 3)")
    args = parser.parse_args()
    if args.runs < MIN_PAIRS or args.warmup < 0:
        parser.error(f"--runs must be at least {MIN_PAIRS} and --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        sparse = Path(tmp) / "huge.gguf"
        shutil.copyfile(GGUF, sparse)
        with open(sparse, "r+b") as f:
            f.truncate(SPARSE_SIZE)  # a hole: the header is real, the tensor data never read
        bench(args, env, sparse)


def _loads_numpy(argv: list[str], env: dict[str, str]) -> bool:
    probe = ("import sys\nfrom posenc_cli.cli import app\ntry:\n    app(" + repr(argv) +
             ", standalone_mode=False)\nexcept SystemExit:\n    pass\nsys.stderr.write('NUMPY %s' % ('numpy' in "
             "sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    return "NUMPY True" in proc.stderr


def _verdict(samples: dict[str, list[_timing.Sample]], name: str, base: str, limit: float) -> str:
    ratios = _timing.paired_ratios(samples[name], samples[base])
    ratio = statistics.median(ratios)
    q = statistics.quantiles(ratios)
    verdict = "within" if ratio <= limit else "OVER"
    return (f"`{name}` / `{base}`: median of {len(ratios)} per-pair ratios {ratio:.2f}x (quartiles {q[0]:.2f}x .. "
            f"{q[2]:.2f}x): {verdict} the {limit}x budget")


def bench(args: argparse.Namespace, env: dict[str, str], sparse: Path) -> None:
    posenc = _timing.posenc_command()
    gguf_argv = ["memory", str(GGUF), "--ctx", "32k", "--json"]
    numpy = _loads_numpy(gguf_argv, env)
    gguf_base = "import typer, numpy" if numpy else "import typer, yaml"
    commands = {
        "import typer, yaml": [sys.executable, "-c", "import typer, yaml"],
        "memory config.json": [*posenc, "memory", str(CONFIG), "--ctx", "128k", "--json"],
        "import typer, numpy": [sys.executable, "-c", "import typer, numpy"],
        "memory GGUF": [*posenc, *gguf_argv],
        "memory 100 GB GGUF": [*posenc, "memory", str(sparse), "--ctx", "32k", "--json"],
    }
    samples = _timing.interleaved(commands, args.runs, warmup=args.warmup, env=env)
    print(f"python {sys.version.split()[0]}, {args.runs} runs each after {args.warmup} warm-up, interleaved; "
          f"config {CONFIG.name}, GGUF {GGUF.name} ({GGUF.stat().st_size:,} bytes) and a sparse copy of "
          f"{SPARSE_SIZE:,} bytes; the GGUF path loads numpy: {numpy}")
    print()
    base_best = _timing.best(samples["import typer, yaml"])
    rows = [[f"`{name}`", f"{_timing.best(samples[name]) * 1e3:.1f}", f"{_timing.median(samples[name]) * 1e3:.1f}",
             f"{_timing.best(samples[name]) / base_best:.2f}x"] for name in commands]
    print(_timing.markdown_table(["command", "best (ms)", "median (ms)", "best / import typer, yaml"], rows))
    print()
    print(_verdict(samples, "memory config.json", "import typer, yaml", LIMIT))
    print(_verdict(samples, "memory GGUF", gguf_base, LIMIT))
    print(_verdict(samples, "memory 100 GB GGUF", "memory GGUF", 1.1))


if __name__ == "__main__":
    main()
