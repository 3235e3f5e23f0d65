"""What ``posenc check --trainers`` and ``posenc pick --trainer`` cost on top of the commands without them.

Each row is a fresh process, best-of-N after one warm-up run, rounds interleaved so drift in machine load hits every
row alike: ``check`` on Llama 3.1 8B's config against the engines alone, then with all eight trainers (their runners
compute every trainer's frequencies and every trainer x engine pair); ``pick`` on the same config with a staged
256k plan, alone and with ``--trainer torchtitan`` (each stage rendered through ``posenc scale``'s functions).

    python benchmarks/bench_check.py            # N = 10
    python benchmarks/bench_check.py --runs 20
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _timing

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "tests" / "corpus" / "llama-3.1-8b-instruct.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    posenc = _timing.posenc_command()
    check = [*posenc, "check", LLAMA, "--json"]
    pick = [*posenc, "pick", "--ctx", "256k", "--config", LLAMA, "--budget", "2B", "--json"]
    commands = {
        "check (4 engines)": check,
        "check --trainers all (4 engines, 8 trainers, 32 pairs)": [*check, "--trainers", "all"],
        "pick, staged 256k plan": pick,
        "pick --trainer torchtitan": [*pick, "--trainer", "torchtitan"],
    }
    samples = _timing.interleaved(commands, args.runs, cwd=ROOT)
    base = {"check": _timing.best(samples["check (4 engines)"]),
            "pick": _timing.best(samples["pick, staged 256k plan"])}
    rows = []
    for name, runs in samples.items():
        ms = _timing.best(runs) * 1000
        ratio = _timing.best(runs) / base[name.split()[0].rstrip(",")]
        rows.append((f"`{name}`", f"{ms:.1f}", f"{_timing.median(runs) * 1000:.1f}", f"{ratio:.2f}x"))
    print(_timing.markdown_table(["command", "best ms", "median ms", "vs the same command without"], rows))


if __name__ == "__main__":
    main()
