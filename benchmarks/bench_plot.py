"""Wall time of ``posenc plot`` against the cost of merely importing matplotlib.pyplot, side by side in one run.

    python benchmarks/bench_plot.py [--runs 7]

Each command runs in a fresh interpreter (subprocess), as a user would run it; the two are interleaved so machine
load hits both alike. One warm-up run of each is discarded (disk cache, font cache), then ``--runs`` timed runs;
the table shows the best and the median and their ratio. The issue's target: ``posenc plot sinusoidal --max-len
512 --d-model 128`` to PNG within 1.5x of ``python -c "import matplotlib.pyplot"``.

The large case (131072 x 4096, aggregated to the pixel grid) is timed the same way and its peak RSS is read with
``resource.getrusage(RUSAGE_CHILDREN)`` in a wrapper process, so it is the plotting process's own peak.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import _timing

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
POSENC = [PY, "-m", "posenc_cli"]

_RSS_WRAPPER = """
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
print(json.dumps({"rc": proc.returncode, "peak_kib": peak_kib, "stderr": proc.stderr.decode()[-500:]}))
"""


def peak_rss_mib(argv: list[str], cwd: str) -> float:
    out = subprocess.run([PY, "-c", _RSS_WRAPPER, *argv], cwd=cwd, capture_output=True, text=True, check=True)
    info = json.loads(out.stdout)
    if info["rc"] != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {info['stderr']}")
    return float(info["peak_kib"]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command after one warm-up")
    args = parser.parse_args()
    env_note = f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs"
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            'python -c "import matplotlib.pyplot"': [PY, "-c", "import matplotlib.pyplot"],
            "posenc plot sinusoidal --max-len 512 --d-model 128 -o tmp.png":
                [*POSENC, "plot", "sinusoidal", "--max-len", "512", "--d-model", "128", "-o", "tmp.png"],
            "posenc plot sinusoidal --max-len 131072 --d-model 4096 -o big.png":
                [*POSENC, "plot", "sinusoidal", "--max-len", "131072", "--d-model", "4096", "-o", "big.png"],
        }
        samples = _timing.interleaved(commands, args.runs, cwd=tmp)
        big = commands["posenc plot sinusoidal --max-len 131072 --d-model 4096 -o big.png"]
        rss_big = peak_rss_mib(big, tmp)
        rss_pyplot = peak_rss_mib(commands['python -c "import matplotlib.pyplot"'], tmp)
    names = list(commands)
    base_best, base_median = _timing.best(samples[names[0]]), _timing.median(samples[names[0]])
    base_cpu = _timing.median_cpu(samples[names[0]])
    print(f"posenc plot timings ({env_note}; {args.runs} fresh processes each after a warm-up, interleaved)\n")
    rows = []
    for name in names:
        best, median = _timing.best(samples[name]), _timing.median(samples[name])
        cpu = _timing.median_cpu(samples[name])
        rows.append([f"`{name}`", f"{best:.3f} s", f"{median:.3f} s",
                     f"{best / base_best:.2f}x / {median / base_median:.2f}x", f"{cpu:.3f} s ({cpu / base_cpu:.2f}x)"])
    print(_timing.markdown_table(["command", "wall best", "wall median", "ratio best / median", "CPU median (ratio)"],
                                 rows))
    print()
    print(_timing.markdown_table(["process", "peak RSS"], [
        ['`python -c "import matplotlib.pyplot"`', f"{rss_pyplot:.0f} MiB"],
        ["`posenc plot sinusoidal --max-len 131072 --d-model 4096`", f"{rss_big:.0f} MiB"]]))
    ratio = _timing.median(samples[names[1]]) / base_median
    verdict = "within" if ratio <= 1.5 else "OVER"
    print(f"\nsmall plot / import pyplot (medians): {ratio:.2f}x, {verdict} the 1.5x target")


if __name__ == "__main__":
    main()
