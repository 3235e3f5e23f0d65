"""Summaries of eval runs: pass rates per length and depth, the per-position loss curve, and the plan's verdicts.

Stdlib only: the PNGs are drawn by :mod:`posenc_cli.plots` from the numbers computed here.

Verdicts: a ``niah`` test passes when the pass rate over every depth and trial at its length reaches the
threshold; a ``regression`` test compares the mean negative log-likelihood per token below its length with a
baseline run's (``--baseline``) and passes when the relative rise is at most the margin. A test that cannot be
evaluated (cells missing, no prompt log-probabilities, no baseline) is "not run", never passed. Cells whose
served prompt length disagrees with the built one are left out of every rate and counted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posenc_cli.evaluation.plan import Cell
from posenc_cli.evaluation.run import read_manifest, read_results

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"


def load_run(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = Path(folder)
    manifest = read_manifest(path)
    latest: dict[str, dict[str, Any]] = {}
    for record in read_results(path):
        latest[record["cell"]] = record  # a cell written twice (two runs racing) counts once
    return manifest, list(latest.values())


def loss_curve(records: list[dict[str, Any]], bins_per_octave: int = 2) -> list[dict[str, Any]]:
    """Mean loss (-log p, nats per token) per position bin over every loss request: bins [2^(k/b), 2^((k+1)/b))."""
    sums: dict[int, tuple[float, int]] = {}
    for record in records:
        if record.get("kind") != "loss" or not record.get("length_ok", True):
            continue
        for position, value in enumerate(record.get("logprobs") or []):
            if value is None or position == 0:
                continue
            k = math.floor(math.log2(position) * bins_per_octave)
            total, n = sums.get(k, (0.0, 0))
            sums[k] = (total - float(value), n + 1)
    return [{"from": math.ceil(2 ** (k / bins_per_octave)), "to": math.ceil(2 ** ((k + 1) / bins_per_octave)),
             "loss": round(total / n, 5), "tokens": n} for k, (total, n) in sorted(sums.items())]


def mean_loss_below(records: list[dict[str, Any]], length: int) -> float | None:
    values = [-float(v) for r in records if r.get("kind") == "loss" and r.get("length_ok", True)
              for v in (r.get("logprobs") or [])[1:length] if v is not None]
    return sum(values) / len(values) if values else None


def summarise(folder: str | Path, baseline: str | Path | None = None) -> dict[str, Any]:
    manifest, records = load_run(folder)
    plan = manifest["plan"]
    lengths, depths, trials = plan["lengths"], plan["depths"], plan["trials"]
    needles = [r for r in records if r.get("kind") == "needle"]
    mismatched = [r["cell"] for r in needles if not r.get("length_ok", True)]
    good = {r["cell"]: r for r in needles if r.get("length_ok", True)}
    grid: list[list[float | None]] = []
    by_length: dict[int, dict[str, Any]] = {}
    for n in lengths:
        row: list[float | None] = []
        hits = total = 0
        for d in depths:
            cells = [good.get(Cell("needle", n, d, t).key) for t in range(trials)]
            done = [c for c in cells if c is not None]
            row.append(round(sum(bool(c["passed"]) for c in done) / len(done), 4) if done else None)
            hits += sum(bool(c["passed"]) for c in done)
            total += len(done)
        grid.append(row)
        by_length[n] = {"pass_rate": round(hits / total, 4) if total else None, "cells": total,
                        "planned": len(depths) * trials}
    curve = loss_curve(records)
    has_logprobs = manifest["server"].get("prompt_logprobs") is not None
    base_records = load_run(baseline)[1] if baseline is not None else None
    verdicts = []
    for test in plan["tests"]:
        verdict: dict[str, Any] = dict(test)
        if test["kind"] == "niah":
            row_stats = by_length.get(test["length"])
            if row_stats is None or row_stats["cells"] < row_stats["planned"]:
                verdict |= {"result": NOT_RUN, "why": "cells at this length are missing (resume the run)"}
            else:
                rate = row_stats["pass_rate"]
                verdict |= {"measured": rate, "result": PASS if rate >= test["pass_rate"] else FAIL}
        else:
            mine = mean_loss_below(records, test["length"])
            theirs = mean_loss_below(base_records, test["length"]) if base_records is not None else None
            if not has_logprobs:
                verdict |= {"result": NOT_RUN, "why": "the server gives no prompt log-probabilities"}
            elif base_records is None:
                verdict |= {"result": NOT_RUN, "why": "needs a baseline run (--baseline RUN) of the unscaled model"}
            elif mine is None or theirs is None:
                verdict |= {"result": NOT_RUN, "why": "no loss below this length in one of the runs"}
            else:
                rise = (mine - theirs) / theirs
                verdict |= {"measured": round(rise, 5), "loss": round(mine, 5), "baseline_loss": round(theirs, 5),
                            "result": PASS if rise <= test["margin"] else FAIL}
        verdicts.append(verdict)
    results = {v["result"] for v in verdicts}
    overall = FAIL if FAIL in results else NOT_RUN if NOT_RUN in results or not verdicts else PASS
    return {
        "run": str(folder), "label": manifest.get("label"), "model": manifest.get("model"),
        "engine": manifest["server"].get("engine"), "plan": plan["source"], "fingerprint": manifest["fingerprint"],
        "lengths": lengths, "depths": depths, "trials": trials,
        "pass_rate": grid, "by_length": {str(k): v for k, v in by_length.items()},
        "loss": {"available": has_logprobs, "curve": curve} if has_logprobs else {
            "available": False, "why": manifest["server"].get("logprobs_detail", "no prompt log-probabilities")},
        "mismatched_lengths": mismatched,
        "requests": sum(int(r.get("requests", 1)) for r in records),
        "seconds": round(sum(float(r.get("seconds", 0.0)) for r in records), 3),
        "tests": verdicts, "result": overall,
    }


def compare(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Side by side pass rates per length (runs must share their lengths); the first run is the reference."""
    lengths = summaries[0]["lengths"]
    rows = []
    for n in lengths:
        row: dict[str, Any] = {"length": n}
        for s in summaries:
            stats = s["by_length"].get(str(n))
            row[s["label"] or s["run"]] = stats["pass_rate"] if stats else None
        rows.append(row)
    return {"runs": [{"run": s["run"], "label": s["label"], "engine": s["engine"], "result": s["result"]}
                     for s in summaries], "by_length": rows}
