"""Summaries of eval runs: pass rates per length and depth, the per-position loss curve, and the plan's verdicts.

Stdlib only: the PNGs are drawn by :mod:`posenc_cli.plots.figures` from the numbers computed here.

Verdicts: a ``niah`` test passes when the pass rate over every depth and trial at its length reaches the
threshold (a prompt the server refused counts as a failure); a ``regression`` test compares perplexity (exp of the
mean loss per token) over the positions below its length with a baseline run's on the same prompt (``--baseline``),
a ``perplexity`` test with the same run's own below the test's baseline length, and passes when the relative rise
is at most the margin. A test that cannot be evaluated (cells missing, no prompt log-probabilities, no baseline) is
"not run", never passed. Cells whose served prompt length disagrees with the built one are left out of every rate
and counted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.evaluation.intervals import LEVEL, difference, wilson
from posenc_cli.evaluation.plan import Cell
from posenc_cli.evaluation.run import read_manifest, read_results
from posenc_cli.units import format_length

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"


def effective_length(scores: dict[int, float | None], threshold: float) -> int | None:
    """RULER's effective length: the longest length such that it and every shorter one scored at least
    ``threshold`` (RULER's 85.6, Hsieh et al. 2024); ``None`` when the shortest fails or has no score.

    RULER reads its table the same way (the length before the first one below the threshold); a score missing at
    a length (cells not run) ends the reach there."""
    reached = None
    for n in sorted(scores):
        value = scores[n]
        if value is None or value < threshold:
            break
        reached = n
    return reached


def nolima_length(scores: dict[int, float | None], ratio: float) -> tuple[int | None, float | None]:
    """NoLiMa's effective length (Modarressi et al. 2025): the longest length keeping at least ``ratio`` of the
    short-context score, here the score at the shortest length run; and that base score."""
    if not scores:
        return None, None
    base = scores[min(scores)]
    if base is None or base <= 0:
        return None, base
    return effective_length(scores, ratio * base), base


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


def mean_loss_below(records: list[dict[str, Any]], length: int, *, cell_length: int | None = None) -> float | None:
    """Mean loss (nats per token) over positions 1 .. ``length - 1`` of the loss requests that reach ``length``
    (or only those of ``cell_length``: the prompt two runs share)."""
    values = [-float(v) for r in records
              if r.get("kind") == "loss" and r.get("length_ok", True) and "refused" not in r
              and (r.get("length") == cell_length if cell_length is not None else r.get("length", 0) >= length)
              for v in (r.get("logprobs") or [])[1:length] if v is not None]
    return sum(values) / len(values) if values else None


def _niah(test: dict[str, Any], stats: dict[str, Any] | None) -> dict[str, Any]:
    if stats is None or stats["mismatched"]:
        return {"result": NOT_RUN, "why": f"{stats['mismatched'] if stats else 'all'} cells at this length had a "
                "prompt length the server counted differently (check --tokenizer)"}
    if stats["cells"] < stats["planned"]:
        return {"result": NOT_RUN, "why": "cells at this length are missing (resume the run)"}
    rate = stats["pass_rate"]
    out = {"measured": rate, "result": PASS if rate >= test["pass_rate"] else FAIL}
    if stats["refused"]:
        out["why"] = f"the server refused {stats['refused']} of the prompts at this length (counted as failures)"
    return out


def _perplexity(test: dict[str, Any], records: list[dict[str, Any]], has_logprobs: bool,
                base_records: list[dict[str, Any]] | None, choice: dict[str, Any] | None = None) -> dict[str, Any]:
    """regression: against the baseline run, on the same loss prompt; perplexity: against this run's own
    perplexity at the test's baseline length. The margin is on perplexity, exp(mean loss)."""
    if not has_logprobs:
        return {"result": NOT_RUN, "why": "the server gives no prompt log-probabilities"}
    if choice is not None and choice["mode"] == "off":
        return {"result": NOT_RUN, "why": f"the run left the loss out ({choice['why']})"}
    if choice is not None and choice.get("cap") is not None and test["length"] > choice["cap"]:
        return {"result": NOT_RUN, "why": f"the loss requests were capped at {format_length(choice['cap'])}, "
                "below this test's length (--loss-max-length, or the engine's default cap)"}
    if test["kind"] == "regression":
        if base_records is None:
            return {"result": NOT_RUN, "why": "needs a baseline run (--baseline RUN) of the unscaled model"}
        mine = mean_loss_below(records, test["length"], cell_length=test["length"])
        theirs = mean_loss_below(base_records, test["length"], cell_length=test["length"])
    else:
        mine = mean_loss_below(records, test["length"])
        theirs = mean_loss_below(records, test["baseline"], cell_length=None) if mine is not None else None
    if mine is None or theirs is None:
        return {"result": NOT_RUN, "why": "no loss at this length (the request is missing or was refused)"}
    rise = math.exp(mine - theirs) - 1.0
    return {"measured": round(rise, 5), "loss": round(mine, 5), "baseline_loss": round(theirs, 5),
            "result": PASS if rise <= test["margin"] else FAIL}


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
        hits = total = refused = 0
        for d in depths:
            cells = [good.get(Cell("needle", n, d, t).key) for t in range(trials)]
            done = [c for c in cells if c is not None]
            row.append(round(sum(bool(c["passed"]) for c in done) / len(done), 4) if done else None)
            hits += sum(bool(c["passed"]) for c in done)
            total += len(done)
            refused += sum("refused" in c for c in done)
        grid.append(row)
        by_length[n] = {"pass_rate": round(hits / total, 4) if total else None, "passed": hits,
                        "interval": [round(x, 4) for x in wilson(hits, total)] if total else None, "cells": total,
                        "planned": len(depths) * trials, "refused": refused,
                        "mismatched": sum(r["length"] == n for r in needles if not r.get("length_ok", True))}
    curve = loss_curve(records)
    has_logprobs = manifest["server"].get("prompt_logprobs") is not None
    base_records = None
    base_manifest: dict[str, Any] = {}
    if baseline is not None:
        base_manifest, base_records = load_run(baseline)
        if base_manifest["plan"]["template"] != plan["template"]:
            raise PosencError(f"--baseline {baseline}: its prompts come from another template than {folder}'s; "
                              "run the same plan against the unscaled model")
    tasks = task_scores(plan, records)
    if tasks is not None and base_records is not None:
        tasks["baseline"] = task_scores(base_manifest["plan"], base_records)
    verdicts = []
    for test in plan["tests"]:
        verdict: dict[str, Any] = dict(test)
        if test["kind"] == "niah":
            verdict |= _niah(test, by_length.get(test["length"]))
        elif test["kind"] in ("ruler", "nolima"):
            verdict |= _effective(test, tasks)
        else:
            verdict |= _perplexity(test, records, has_logprobs, base_records, manifest.get("loss"))
        verdicts.append(verdict)
    results = {v["result"] for v in verdicts}
    overall = FAIL if FAIL in results else NOT_RUN if NOT_RUN in results or not verdicts else PASS
    return {
        "run": str(folder), "label": manifest.get("label"), "model": manifest.get("model"),
        "engine": manifest["server"].get("engine"), "plan": plan["source"], "fingerprint": manifest["fingerprint"],
        "lengths": lengths, "depths": depths, "trials": trials,
        # the retrieval cells the plan sends, each kind summarised apart: needle (pass_rate) and task (tasks)
        "kinds": [k for k, sent in (("needle", "tasks" not in plan["template"]), ("task", tasks is not None)) if sent],
        "pass_rate": grid, "by_length": {str(k): v for k, v in by_length.items()},
        **({} if tasks is None else {"tasks": tasks}),
        "loss": _loss_summary(manifest, records, has_logprobs, curve),
        "first_token": first_token_summary(manifest, records),
        "mismatched_lengths": mismatched,
        "refused": sum(v["refused"] for v in by_length.values()),
        "requests": sum(int(r.get("requests", 1)) for r in records),
        "seconds": round(sum(float(r.get("seconds", 0.0)) for r in records), 3),
        "tests": verdicts, "result": overall,
        **({} if verdicts else {"why": "the plan has no test (give --pass-rate with --lengths, or a --plan)"}),
    }


def first_token_summary(manifest: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Time to first token of the retrieval requests (streamed; ``first_token_seconds`` per line), per length: the
    median, the slowest and how many, with the requests in flight they were sent beside; or why it was not
    measured (the probe's reason)."""
    timed = [r for r in records if r.get("kind") in ("needle", "task") and "first_token_seconds" in r]
    out: dict[str, Any] = {"measured": bool(timed)}
    if not timed:
        out["why"] = manifest["server"].get("first_token_detail")  # None: a run from before it was measured
        return out
    by_length: dict[str, dict[str, Any]] = {}
    for n in sorted({int(r["length"]) for r in timed}):
        values = sorted(float(r["first_token_seconds"]) for r in timed if r["length"] == n)
        middle = len(values) // 2
        median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
        by_length[str(n)] = {"median": round(median, 4), "max": values[-1], "requests": len(values)}
    out |= {"in_flight": sorted({int(r.get("in_flight", 1)) for r in timed}), "by_length": by_length}
    return out


def task_scores(plan: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A task-set run's scores, x100 as RULER reports them: per task and length (the mean over trials, ``None``
    while cells are missing), their average per length, and both effective lengths; the tasks are the template's
    or those sent beside a needle template (the plan's ``tasks``). ``None`` for a needle run."""
    from posenc_cli.evaluation.plan import NOLIMA_RATIO, RULER_THRESHOLD

    names = [t["name"] for t in plan.get("tasks", plan["template"]).get("tasks", [])]
    if not names:
        return None
    lengths, trials = plan["lengths"], plan["trials"]
    good = {r["cell"]: r for r in records if r.get("kind") == "task" and r.get("length_ok", True)}
    mismatched = sum(1 for r in records if r.get("kind") == "task" and not r.get("length_ok", True))
    scores: dict[str, dict[str, float | None]] = {}
    totals: dict[str, dict[str, float | None]] = {}  # summed score per cell, what the intervals are built from
    for name in names:
        row: dict[str, float | None] = {}
        summed: dict[str, float | None] = {}
        for n in lengths:
            found = [good.get(f"task:{name}:{n}:{t}") for t in range(trials)]
            done = [float(c["score"]) for c in found if c is not None]
            complete = len(done) == trials
            row[str(n)] = round(100 * sum(done) / len(done), 2) if complete else None
            summed[str(n)] = sum(done) if complete else None
        scores[name], totals[name] = row, summed
    average: dict[int, float | None] = {}
    for n in lengths:
        values = [scores[name][str(n)] for name in names]
        average[n] = None if any(v is None for v in values) else round(sum(v or 0.0 for v in values) / len(values), 2)
    ruler_threshold = 100 * RULER_THRESHOLD
    nolima, base = nolima_length(average, NOLIMA_RATIO)
    pooled = {str(n): None if average[n] is None else sum(totals[name][str(n)] or 0.0 for name in names)
              for n in lengths}
    return {"names": names, "scores": scores, "average": {str(k): v for k, v in average.items()},
            "prompts": trials, "totals": totals, "pooled": pooled,
            "intervals": {name: {k: _percent_interval(v, trials) for k, v in totals[name].items()} for name in names},
            "average_interval": {k: _percent_interval(v, trials * len(names)) for k, v in pooled.items()},
            "mismatched": mismatched,
            "effective_length": {"ruler": effective_length(average, ruler_threshold),
                                 "ruler_threshold": ruler_threshold, "nolima": nolima, "nolima_ratio": NOLIMA_RATIO,
                                 "nolima_base": base}}


def _percent_interval(total: float | None, n: int) -> list[float] | None:
    """The 95% interval (Wilson, :mod:`posenc_cli.evaluation.intervals`) of a mean score, x100 as scores are shown."""
    if total is None:
        return None
    low, high = wilson(total, n)
    return [round(100 * low, 2), round(100 * high, 2)]


def _effective(test: dict[str, Any], tasks: dict[str, Any] | None) -> dict[str, Any]:
    """A ``ruler`` / ``nolima`` test: the effective length (with the test's threshold) reaches the test's length."""
    if tasks is None:
        return {"result": NOT_RUN, "why": "the run sent no RULER task (run it with --template ruler)"}
    average = {int(k): v for k, v in tasks["average"].items()}
    if any(v is None for n, v in average.items() if n <= test["length"]):
        return {"result": NOT_RUN, "why": "task cells up to this length are missing or were counted differently"}
    if test["kind"] == "ruler":
        reached = effective_length(average, 100 * test["threshold"])
    else:
        reached = nolima_length(average, test["ratio"])[0]
    return {"measured": reached, "result": PASS if reached is not None and reached >= test["length"] else FAIL}


def _loss_summary(manifest: dict[str, Any], records: list[dict[str, Any]], has_logprobs: bool,
                  curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the loss was measured, at which lengths (the loss requests that came back), and the run's choice."""
    lengths = sorted({int(r["length"]) for r in records if r.get("kind") == "loss" and "refused" not in r})
    choice = manifest.get("loss")
    out: dict[str, Any] = {"available": has_logprobs, "measured": bool(curve), "lengths": lengths, "curve": curve}
    if choice is not None:
        out |= {"mode": choice["mode"], "cap": choice.get("cap"), "planned": choice["lengths"]}
    if not has_logprobs:
        out["why"] = manifest["server"].get("logprobs_detail", "no prompt log-probabilities")
    elif choice is not None and choice["why"]:
        out["why"] = choice["why"]
    return out


def _versus(total_a: float, n_a: int, total_b: float, n_b: int, scale: float) -> dict[str, Any]:
    """b against a: the difference of means, its 95% interval (Newcombe) and whether it excludes 0."""
    d, low, high = difference(total_a, n_a, total_b, n_b)
    digits = 4 if scale == 1.0 else 2  # as the scores: pass rates to 4 places, task scores (x100) to 2
    return {"difference": round(scale * d, digits),
            "interval": [round(scale * low, digits), round(scale * high, digits)], "separated": low > 0 or high < 0}


def compare(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Side by side per length (runs must share their lengths): needle pass rates, and for task runs each task's
    score and the average. The first run is the reference: every other run's difference from it comes with its 95%
    interval (:func:`posenc_cli.evaluation.intervals.difference`) and whether that interval excludes 0."""
    lengths = summaries[0]["lengths"]
    for s in summaries[1:]:
        if s["lengths"] != lengths:
            raise PosencError(f"{s['run']}: its lengths ({', '.join(map(format_length, s['lengths']))}) differ from "
                              f"{summaries[0]['run']}'s ({', '.join(map(format_length, lengths))}); compare runs of "
                              "one plan")
    names = [s["label"] or s["run"] for s in summaries]
    if len(set(names)) < len(names):
        names = [s["run"] for s in summaries]
    reference = summaries[0]
    rows = []
    for n in lengths:
        row: dict[str, Any] = {"length": n}
        ref = reference["by_length"].get(str(n))
        for name, s in zip(names, summaries, strict=True):
            stats = s["by_length"].get(str(n))
            row[name] = stats["pass_rate"] if stats else None
            if s is not reference and stats and ref and stats["cells"] and ref["cells"]:
                row.setdefault("versus", {})[name] = _versus(ref["passed"], ref["cells"], stats["passed"],
                                                            stats["cells"], 1.0)
        rows.append(row)
    out: dict[str, Any] = {
        "runs": [{"run": s["run"], "label": name, "engine": s["engine"], "result": s["result"]}
                 for name, s in zip(names, summaries, strict=True)],
        "reference": names[0], "level": LEVEL, "by_length": rows}
    if all("tasks" in s for s in summaries):
        out["tasks"] = _compare_tasks(names, [s["tasks"] for s in summaries], lengths)
    return out


def _compare_tasks(names: list[str], tasks: list[dict[str, Any]], lengths: list[int]) -> list[dict[str, Any]]:
    """One row per task (those every run sent, in the reference's order) and length, then the average's rows when
    the runs sent the same tasks: scores x100, intervals, and each run against the reference."""
    common = [t for t in tasks[0]["names"] if all(t in other["names"] for other in tasks[1:])]
    same_set = all(other["names"] == tasks[0]["names"] for other in tasks[1:])
    rows = []
    for task in [*common, *(["average"] if same_set else [])]:
        for n in map(str, lengths):
            row: dict[str, Any] = {"task": task, "length": int(n)}
            cells = []
            for t in tasks:
                if task == "average":
                    total, count = t["pooled"][n], t["prompts"] * len(t["names"])
                    score, interval = t["average"][n], t["average_interval"][n]
                else:
                    total, count = t["totals"][task][n], t["prompts"]
                    score, interval = t["scores"][task][n], t["intervals"][task][n]
                cells.append((total, count))
                row[names[len(cells) - 1]] = {"score": score, "interval": interval}
            ref_total, ref_count = cells[0]
            for name, (total, count) in zip(names[1:], cells[1:], strict=True):
                if ref_total is not None and total is not None:
                    row.setdefault("versus", {})[name] = _versus(ref_total, ref_count, total, count, 100.0)
            rows.append(row)
    return rows
