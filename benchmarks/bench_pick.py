"""Wall time of ``posenc pick --ctx 128k`` against ``python -c "import typer, yaml"``, side by side.

The issue's budget: pick must stay within 1.3x of the bare imports it cannot avoid. Both commands run as fresh
processes, interleaved (so drift in machine load hits both alike), after warm-up runs that fill the OS file cache.
Prints a markdown table with best-of-N and median wall times, and the verdict on the median of the per-pair ratios
(each round runs both commands back to back; at least :data:`MIN_PAIRS` rounds).

Installed packages come with compiled bytecode; an editable checkout under ``PYTHONDONTWRITEBYTECODE=1`` would
recompile posenc's modules on every run. So by default both commands run with bytecode caching on, in a throw-away
``PYTHONPYCACHEPREFIX`` (nothing is written into the source tree); ``--no-bytecode-cache`` measures the cold case.

    python benchmarks/bench_pick.py            # 30 runs each
    python benchmarks/bench_pick.py --runs 50 --ctx 1M
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import _timing

LIMIT = 1.3
#: Fewer pairs than this leave the median of the ratios at the mercy of one disturbed round.
MIN_PAIRS = 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="timed runs per command (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per command first (default 3)")
    parser.add_argument("--ctx", default="128k", help="--ctx for pick (default 128k)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep the caller's bytecode settings (PYTHONDONTWRITEBYTECODE etc.)")
    args = parser.parse_args()
    if args.runs < MIN_PAIRS or args.warmup < 0:
        parser.error(f"--runs must be at least {MIN_PAIRS} and --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="bench-pick-pycache-") as cache:
        env = dict(os.environ)
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = cache
        bench(args, env)


def bench(args: argparse.Namespace, env: dict[str, str]) -> None:
    commands = {
        'python -c "import typer, yaml"': [sys.executable, "-c", "import typer, yaml"],
        f"posenc pick --ctx {args.ctx}": [*_timing.posenc_command(), "pick", "--ctx", args.ctx],
    }
    samples = _timing.interleaved(commands, args.runs, warmup=args.warmup, env=env)

    base_name, pick_name = commands
    base_best, base_median = _timing.best(samples[base_name]), _timing.median(samples[base_name])
    caching = "off (caller's settings)" if args.no_bytecode_cache else "on (temporary PYTHONPYCACHEPREFIX)"
    print(f"python {sys.version.split()[0]}, {args.runs} runs each after {args.warmup} warm-up, interleaved; "
          f"pick runs as: {' '.join(commands[pick_name][:1])}; bytecode cache {caching}")
    print()
    rows = []
    for name in commands:
        best, median = _timing.best(samples[name]), _timing.median(samples[name])
        rows.append([f"`{name}`", f"{best * 1e3:.1f}", f"{median * 1e3:.1f}", f"{best / base_best:.2f}x",
                     f"{median / base_median:.2f}x"])
    print(_timing.markdown_table(["command", "best (ms)", "median (ms)", "best / baseline", "median / baseline"],
                                 rows))
    ratios = _timing.paired_ratios(samples[pick_name], samples[base_name])
    ratio = statistics.median(ratios)
    verdict = "within" if ratio <= LIMIT else "OVER"
    print()
    print(f"median of {len(ratios)} per-pair ratios {ratio:.2f}x (quartiles {statistics.quantiles(ratios)[0]:.2f}x"
          f" .. {statistics.quantiles(ratios)[2]:.2f}x): {verdict} the {LIMIT}x budget")

if __name__ == "__main__":
    main()
