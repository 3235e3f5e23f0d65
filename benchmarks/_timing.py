"""What the start-up benchmarks share: time whole commands as fresh processes, interleaved, and print markdown tables.

The scripts run as ``python benchmarks/NAME.py``; Python puts this folder on ``sys.path``, so they ``import _timing``.
"""

from __future__ import annotations

import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def posenc_command() -> list[str]:
    """The console script installed next to this interpreter, else ``python -m posenc_cli``."""
    script = Path(sys.executable).with_name("posenc")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "posenc_cli"]


@dataclass(frozen=True)
class Sample:
    """One run of one command, in seconds."""

    wall: float
    cpu: float  # the child's user + system time


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(argv: Sequence[str], *, cwd: str | Path | None = None,
                 env: Mapping[str, str] | None = None) -> Sample:
    """Run ``argv`` once (stdout discarded) and time it; a failing command stops the benchmark with its stderr."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({proc.returncode}):\n"
                         f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return Sample(elapsed, _children_cpu() - cpu)


def interleaved(commands: Mapping[str, Sequence[str]], runs: int, *, warmup: int = 1,
                cwd: str | Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, list[Sample]]:
    """``warmup`` untimed runs of each command (file cache, .pyc files), then ``runs`` rounds that run every command
    once in turn, so drift in machine load hits every command alike."""
    for argv in commands.values():
        for _ in range(warmup):
            time_process(argv, cwd=cwd, env=env)
    samples: dict[str, list[Sample]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(time_process(argv, cwd=cwd, env=env))
    return samples


def best(samples: Sequence[Sample]) -> float:
    """The fastest wall time (seconds): the least disturbed run."""
    return min(s.wall for s in samples)


def median(samples: Sequence[Sample]) -> float:
    """The median wall time (seconds)."""
    return statistics.median(s.wall for s in samples)


def median_cpu(samples: Sequence[Sample]) -> float:
    """The median CPU time (seconds)."""
    return statistics.median(s.cpu for s in samples)


def paired_ratios(a: Sequence[Sample], b: Sequence[Sample]) -> list[float]:
    """Wall time of ``a`` over ``b`` round by round (the two ran back to back in each round of
    :func:`interleaved`): a drift in machine load moves both halves of a pair alike, so the ratio keeps its meaning."""
    return [x.wall / y.wall for x, y in zip(a, b, strict=True)]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None) -> str:
    """A markdown table; ``align`` has one letter per column, ``l`` or ``r`` (default: the first left, the rest
    right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
