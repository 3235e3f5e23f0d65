"""A run's wall time at ``--concurrency 1`` against the probed default, on llama.cpp's own llama-server.

``python benchmarks/bench_eval_concurrency.py`` serves the committed passkey model (tests/fixtures/passkey) with
``llama-server -np 4`` (four slots) and the YaRN x4 flags ``posenc scale`` prints, with ``--ctx-size 4096`` so each
slot holds 1k, and times whole ``posenc eval run`` processes (probe included) on the same grid, alternating: one at
``--concurrency 1``, one at the default the probe learns (``/props`` ``total_slots``: 4), each into a fresh folder.
It prints the best and median wall time of each and the ratio of the medians, and checks that every run wrote the
same results.jsonl apart from the per-cell ``seconds``. Needs ``POSENC_LLAMA_SERVER`` (or llama-server on PATH).

    python benchmarks/bench_eval_concurrency.py             # 5 rounds, 80 cells per run, llama-server -t 1
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "harness"))

import llama_server  # noqa: E402

SECONDS = re.compile(r'"seconds":[0-9.eE+-]+')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slots", type=int, default=4, help="llama-server -np (default 4)")
    parser.add_argument("--threads", default="1", help="llama-server -t (default 1)")
    parser.add_argument("--lengths", default="64,256,512,1024")
    parser.add_argument("--trials", default="4")
    args = parser.parse_args()
    if llama_server.llama_server_binary() is None:
        raise SystemExit("needs llama-server: set POSENC_LLAMA_SERVER or put it on PATH")
    posenc = _timing.posenc_command()
    flags = llama_server.native_scale_flags("yarn", "--factor", "4")
    argv = llama_server.native_command(*flags, "--ctx-size", str(1024 * args.slots), "-np", str(args.slots),
                                       "-t", args.threads)
    grid = ["--lengths", args.lengths, "--trials", args.trials, "--pass-rate", "0"]
    walls: dict[str, list[float]] = {}
    files: set[str] = set()
    with llama_server.serve(argv) as url, tempfile.TemporaryDirectory() as tmp:
        caps = json.loads(subprocess.run([*posenc, "eval", "probe", url, "--json"], capture_output=True, text=True,
                                         check=True).stdout)
        default = caps["concurrency"]
        settings = {"1": ["--concurrency", "1"], f"{default} (probed: {caps['concurrency_source']})": []}
        for i in range(args.rounds + 1):  # round 0 warms the caches and is not counted
            for name, extra in settings.items():
                out = Path(tmp) / f"{i}-{len(walls.get(name, []))}-{extra[-1] if extra else 'default'}"
                started = time.perf_counter()
                subprocess.run([*posenc, "eval", "run", url, *grid, *extra, "--out", str(out)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wall = time.perf_counter() - started
                files.add(SECONDS.sub("", (out / "results.jsonl").read_text(encoding="utf-8")))
                cells = (out / "results.jsonl").read_text(encoding="utf-8").count("\n")
                if i:
                    walls.setdefault(name, []).append(wall)
    if len(files) != 1:
        raise SystemExit("the runs wrote different results")
    base = statistics.median(walls["1"])
    rows = [[name, f"{min(w):.2f} s", f"{statistics.median(w):.2f} s", f"{base / statistics.median(w):.2f}x"]
            for name, w in walls.items()]
    print(f"llama-server -np {args.slots} -t {args.threads}, {cells} cells per run, {args.rounds} rounds; "
          "every run wrote the same results")
    print(_timing.markdown_table(["--concurrency", "best", "median", "speed-up (median)"], rows))


if __name__ == "__main__":
    main()
