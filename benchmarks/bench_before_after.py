"""Whole commands of this checkout against the same commands of another git revision, paired round by round.

A refactor must not cost start-up time: each round runs a command from the revision given (``--before``, exported
with ``git archive`` into a temporary folder) and from this checkout back to back, both as ``python -m posenc_cli``
with ``PYTHONPATH`` pointing at their own tree, so the only difference is the code. Prints, per command, the median
wall times and the median of the per-pair ratios (after / before) with its quartiles, against the budget
(:data:`LIMIT`, the issue's "no slower than before": at most 1.02x).

    python benchmarks/bench_before_after.py --before c9124f8           # 30 pairs per command
    python benchmarks/bench_before_after.py --before HEAD~5 --runs 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import _timing

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1.02
MIN_PAIRS = 15
LLAMA31 = ROOT / "tests" / "fixtures" / "llama-3.1-8b.json"
GGUF = ROOT / "docs" / "examples" / "llama-3.1-8b.gguf"
COMMANDS = {
    "scale yarn --original-max 32k --target 128k --head-dim 128":
        ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128"],
    "inspect llama-3.1-8b.json --json": ["inspect", str(LLAMA31), "--json"],
    "inspect llama-3.1-8b.gguf --json": ["inspect", str(GGUF), "--json"],
    "pick --ctx 128k": ["pick", "--ctx", "128k"],
}


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` (its committed files only) unpacked into ``into``."""
    archive = into / "before.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", revision], stdout=out, check=True)
    tree = into / "before"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision to compare with (a commit, tag, branch)")
    parser.add_argument("--runs", type=int, default=30, help=f"pairs per command (at least {MIN_PAIRS}; default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per command first (default 3)")
    args = parser.parse_args()
    if args.runs < MIN_PAIRS or args.warmup < 0:
        parser.error(f"--runs must be at least {MIN_PAIRS} and --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmp:
        before = export(args.before, Path(tmp))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")  # compiled once, in the warm-up; nothing in the tree
        envs = {"before": {**env, "PYTHONPATH": str(before)}, "after": {**env, "PYTHONPATH": str(ROOT)}}
        print(f"python {sys.version.split()[0]}; before = {args.before}, after = this checkout; {args.runs} pairs per "
              f"command after {args.warmup} warm-up runs, each pair back to back\n")
        rows = []
        worst = 0.0
        for label, argv in COMMANDS.items():
            command = [sys.executable, "-m", "posenc_cli", *argv]
            for env_ in envs.values():
                for _ in range(args.warmup):
                    _timing.time_process(command, cwd=tmp, env=env_)
            pairs = [(_timing.time_process(command, cwd=tmp, env=envs["before"]),
                      _timing.time_process(command, cwd=tmp, env=envs["after"])) for _ in range(args.runs)]
            old, new = [p[0] for p in pairs], [p[1] for p in pairs]
            ratios = _timing.paired_ratios(new, old)
            q = statistics.quantiles(ratios)
            ratio = statistics.median(ratios)
            worst = max(worst, ratio)
            rows.append([f"`posenc {label}`", f"{_timing.median(old) * 1e3:.1f}", f"{_timing.median(new) * 1e3:.1f}",
                         f"{ratio:.3f}x", f"{q[0]:.3f}x .. {q[2]:.3f}x"])
    print(_timing.markdown_table(["command", "before median (ms)", "after median (ms)", "after / before (median of "
                                  "pairs)", "quartiles"], rows))
    print(f"\nlargest median ratio {worst:.3f}x: {'within' if worst <= LIMIT else 'OVER'} the {LIMIT}x budget")


if __name__ == "__main__":
    main()
