"""The RULER task set against the tests' scripted server (tests/harness/fake_server.py + ruler_model.py): the run
folders docs/commands/eval.md reports on.

The scripted model reads only the last ``reach`` byte tokens of each prompt, so it stands for a model whose usable
context is ``reach``: ``short`` reads 3,000 tokens (a model used inside its window), ``long`` 12,000 (the same
model after an extension that works). Both runs send every task of ``rules/templates/ruler.yaml`` at 2k, 4k, 8k and
16k tokens, 4 trials each (176 prompts per run), counted with the server's tokenize endpoint.

    python benchmarks/eval_ruler.py [--out docs/eval]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))

from fake_server import FakeServer, Script  # noqa: E402

RUNS = (("ruler-short", 3000), ("ruler-long", 12000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "eval"))
    args = parser.parse_args()
    for name, reach in RUNS:
        folder = Path(args.out) / name
        shutil.rmtree(folder, ignore_errors=True)
        with FakeServer(Script(reach=reach)) as server:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", server.url, "--template",
                                   "ruler", "--lengths", "2k,4k,8k,16k", "--trials", "4", "--out", str(folder),
                                   "--label", name], capture_output=True, text=True, cwd=ROOT)
            print(f"{name}: reach {reach}, exit {done.returncode}, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
