"""The served runs of docs/commands/eval.md: the committed passkey model under llama-cpp-python's server, four ways.

``python benchmarks/eval_served.py`` serves tests/fixtures/passkey/passkey.gguf plain, with YaRN x2, YaRN x4 and
linear x4 (each command from ``posenc scale --engine llama-cpp-python``, then ``--n_ctx 1024`` so every
configuration takes the same grid), runs ``posenc eval run`` on each, and writes docs/eval/NAME/ (manifest and
results), docs/eval/heatmaps.png, docs/eval/loss.png and docs/eval/timings.json: requests, wall time per run,
and the share of the wall time spent in the model's completion requests (the rest is prompt building, tokenize
calls and bookkeeping). Needs the engines extra.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))

import llama_server  # noqa: E402

GRID = ["--lengths", "64,128,192,256,384,512,768,1024", "--trials", "4", "--loss"]  # loss.png needs it
NAMES = ("plain", "yarn-x2", "yarn-x4", "linear-x4")


def configs() -> dict[str, list[str]]:
    """Each configuration's server command (posenc scale runs here, not at import: ``--help`` starts nothing)."""
    fixture = str(llama_server.FIXTURE)
    return {
        "plain": llama_server.plain_command(1024),
        "yarn-x2": llama_server.scale_command("yarn", "--factor", "2", "--config", fixture),
        "yarn-x4": llama_server.scale_command("yarn", "--factor", "4", "--config", fixture),
        "linear-x4": llama_server.scale_command("linear", "--factor", "4", "--config", fixture),
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    out = ROOT / "docs" / "eval"
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, dict[str, object]] = {}
    for name, argv in configs().items():
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        argv = [*argv[: argv.index("--n_ctx")], *argv[argv.index("--n_ctx") + 2:], "--n_ctx", "1024",
                "--model_alias", "passkey"]  # the model id the server reports (default: the file's path)
        with llama_server.serve(argv) as url:
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", url, *GRID, "--out",
                                   str(folder), "--label", name, "--json"], capture_output=True, text=True)
            wall = time.perf_counter() - started
        if proc.returncode not in (0, 1, 2) or not proc.stdout:
            raise SystemExit(proc.stderr)
        summary = json.loads(proc.stdout)
        records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        timings[name] = {"server": " ".join(argv[1:]).replace(str(ROOT) + "/", ""), "cells": len(records),
                         "requests": summary["requests"], "wall_s": round(wall, 2),
                         "in_cells_s": summary["seconds"],
                         "pass_rate": {n: v["pass_rate"] for n, v in summary["by_length"].items()}}
        print(name, timings[name], flush=True)
    timings |= pick_plan(out)
    subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "compare", *(str(out / n) for n in NAMES),
                    "--png", str(out / "heatmaps.png"), "--loss-png", str(out / "loss.png")], check=True)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")


def pick_plan(out: Path) -> dict[str, dict[str, object]]:
    """pick's answer for taking the model to 1k, as a plan: served plain (the baseline) and as pick says."""
    posenc = [sys.executable, "-m", "posenc_cli"]
    fixture = str(llama_server.FIXTURE.relative_to(ROOT))
    answer = subprocess.run([*posenc, "pick", "--ctx", "1k", "--config", fixture, "--json"], capture_output=True,
                            text=True, check=True, cwd=ROOT).stdout
    (out / "pick-plan.json").write_text(answer)
    command = json.loads(answer)["extension"]["command"].split()  # posenc scale yarn --config MODEL --target 1k
    scaled = llama_server.scale_command(*[fixture if w == "MODEL" else w for w in command[2:]])
    timings: dict[str, dict[str, object]] = {}
    for name, argv in (("pick-plain", llama_server.plain_command(1024)), ("pick-yarn", scaled)):
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        with llama_server.serve([*argv, "--model_alias", "passkey"]) as url:
            started = time.perf_counter()
            proc = subprocess.run([*posenc, "eval", "run", url, "--plan", "docs/eval/pick-plan.json", "--template",
                                   "passkey", "--trials", "4", "--out", f"docs/eval/{name}", "--label", name,
                                   "--json"], capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - started
        if not proc.stdout:
            raise SystemExit(proc.stderr)
        summary = json.loads(proc.stdout)
        timings[name] = {"server": " ".join(argv[1:]).replace(str(ROOT) + "/", ""), "requests": summary["requests"],
                         "wall_s": round(wall, 2), "in_cells_s": summary["seconds"]}
        print(name, timings[name], flush=True)
    return timings


if __name__ == "__main__":
    main()
