"""Reports of RULER task runs (posenc_cli.evaluation.report): effective lengths by RULER's and NoLiMa's definitions
(properties), and a task-set run end to end against the scripted server: every task scored at every length, the
verdicts, the baseline's numbers, and a run resumed after the server died giving the same records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, ok, run
from fake_server import FakeServer, Script
from hypothesis import given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.evaluation.client import Client, ServerError
from posenc_cli.evaluation.intervals import wilson
from posenc_cli.evaluation.plan import NOLIMA_RATIO, RULER_THRESHOLD, from_lengths, from_pick, plan_for
from posenc_cli.evaluation.probe import probe
from posenc_cli.evaluation.report import compare, effective_length, nolima_length, summarise
from posenc_cli.evaluation.ruler import TASKS
from posenc_cli.evaluation.run import Runner, read_results
from posenc_cli.evaluation.templates import load_any
from posenc_cli.evaluation.tokens import server_counter

LENGTHS = [2048, 4096, 8192]


def _run(url: str, folder: Path, plan: Any) -> None:
    client = Client(url, retries=0)
    caps = probe(client)
    runner = Runner(client, caps, plan, folder, server_counter(client, caps))
    todo, _ = runner.prepare()
    runner.run(todo)


def _records(folder: Path) -> dict[str, dict[str, Any]]:
    keep = ("answers", "reply", "score", "tokens", "task", "length")
    return {r["cell"]: {k: r.get(k) for k in keep} for r in read_results(folder)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The ruler set at 2k, 4k, 8k, 1 trial, against a scripted model reading its last 3,000 tokens (short) and one
    reading everything (long)."""
    base = tmp_path_factory.mktemp("ruler")
    plan = from_lengths(LENGTHS, load_any("ruler"), trials=1)
    out = {}
    for name, reach in (("short", 3000), ("long", 10**9)):
        with FakeServer(Script(reach=reach)) as server:
            _run(server.url, base / name, plan)
        out[name] = base / name
    return out


def test_every_task_is_scored_at_every_length(runs: dict[str, Path]) -> None:
    summary = summarise(runs["long"])
    tasks = summary["tasks"]
    assert tasks["names"] == list(TASKS)
    assert all(tasks["scores"][t][str(n)] is not None for t in TASKS for n in LENGTHS)
    average = {int(n): v for n, v in tasks["average"].items()}
    for n in LENGTHS:
        assert average[n] == round(sum(tasks["scores"][t][str(n)] for t in TASKS) / len(TASKS), 2)
    effective = tasks["effective_length"]
    assert effective["ruler"] == effective_length(average, 100 * RULER_THRESHOLD) == 8192
    assert (effective["nolima"], effective["nolima_base"]) == nolima_length(average, NOLIMA_RATIO)
    assert [t["result"] for t in summary["tests"]] == ["pass", "pass"] and summary["result"] == "pass"
    # every needle task answered from the whole prompt scores 100 (the scripted model finds every needle it sees)
    assert all(tasks["scores"][t][str(n)] == 100.0 for t in TASKS[:9] for n in LENGTHS)


def test_a_short_reach_fails_and_the_baseline_is_reported(runs: dict[str, Path]) -> None:
    summary = summarise(runs["short"])
    effective = summary["tasks"]["effective_length"]
    average = {int(n): v for n, v in summary["tasks"]["average"].items()}
    # reads its last 3,000 tokens: every 2k prompt whole, at 8k most needles are out of its reach
    assert effective["ruler"] == effective_length(average, 85.6) and effective["ruler"] in (2048, 4096)
    assert average[8192] is not None and average[8192] < 60
    assert summary["result"] == "fail"
    assert [t["measured"] for t in summary["tests"]] == [effective["ruler"], effective["nolima"]]
    with_base = summarise(runs["long"], baseline=runs["short"])
    assert with_base["tasks"]["baseline"]["effective_length"] == effective
    assert json.loads(json.dumps(with_base)) == with_base  # strict JSON


def test_each_score_comes_with_its_interval(runs: dict[str, Path]) -> None:
    tasks = summarise(runs["short"])["tasks"]
    n = tasks["prompts"]
    assert n == 1
    for t in TASKS:
        for length in map(str, LENGTHS):
            total = tasks["totals"][t][length]
            assert tasks["scores"][t][length] == round(100 * total / n, 2)
            assert tasks["intervals"][t][length] == [round(100 * x, 2) for x in wilson(total, n)]
    for length in map(str, LENGTHS):
        pooled = tasks["pooled"][length]
        # the average pools every task's prompts: one interval over len(TASKS) x trials prompts
        assert pooled == pytest.approx(sum(tasks["totals"][t][length] for t in TASKS))
        low, high = tasks["average_interval"][length]
        assert [low, high] == [round(100 * x, 2) for x in wilson(pooled, n * len(TASKS))]
        assert low <= tasks["average"][length] <= high


def test_compare_gives_each_difference_with_its_interval(runs: dict[str, Path]) -> None:
    short, long = summarise(runs["short"]), summarise(runs["long"])
    result = compare([short, long])
    me, other = short["run"], long["run"]  # unlabelled runs are named by their folders
    assert result["reference"] == me and result["level"] == 0.95
    rows = {(r["task"], r["length"]): r for r in result["tasks"]}
    assert set(rows) == {(t, n) for t in [*TASKS, "average"] for n in LENGTHS}
    for row in rows.values():
        mine, theirs = row[me], row[other]
        versus = row["versus"][other]
        assert versus["difference"] == pytest.approx(theirs["score"] - mine["score"], abs=0.011)
        low, high = versus["interval"]
        assert low <= versus["difference"] <= high
        assert versus["separated"] == (low > 0 or high < 0)
    # 44 prompts per length: at 8k the long reach beats the short one beyond the interval, at 2k they are equal
    assert rows[("average", 8192)]["versus"][other]["separated"]
    assert not rows[("average", 2048)]["versus"][other]["separated"]
    # one prompt per cell: no single task's difference is beyond its interval, whatever the scores
    assert not any(r["versus"][other]["separated"] for (t, _), r in rows.items() if t != "average")


def test_compare_refuses_runs_of_other_lengths(runs: dict[str, Path], tmp_path: Path) -> None:
    plan = from_lengths([2048], load_any("ruler"), trials=1)
    with FakeServer(Script(reach=3000)) as server:
        _run(server.url, tmp_path / "other", plan)
    result = run("eval", "compare", str(runs["short"]), str(tmp_path / "other"))
    assert_usage_error(result, "its lengths (2k) differ", "compare runs of one plan")
    shown = ok(run("eval", "compare", str(runs["short"]), str(runs["long"]))).stdout
    assert "difference from" in shown and "95% interval" in shown and " *" in shown


def test_task_runs_draw_task_by_length_scores(runs: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc_cli.plots import figures

    drawn: list[Any] = []
    original = figures.figure_bytes
    monkeypatch.setattr(figures, "figure_bytes", lambda fig, fmt: drawn.append(fig) or original(fig, fmt))
    png = tmp_path / "tasks.png"
    ok(run("eval", "compare", str(runs["short"]), str(runs["long"]), "--png", str(png)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    short = summarise(runs["short"])["tasks"]["scores"]
    for ax, name in zip(fig.axes[:2], ("short", "long"), strict=True):
        assert [t.get_text() for t in ax.get_yticklabels()] in (list(TASKS), [""] * len(TASKS))
        image = ax.get_images()[0].get_array()
        if name == "short":  # rows are tasks, columns lengths, the score / 100
            expected = [[short[t][str(n)] / 100 for n in LENGTHS] for t in TASKS]
            np.testing.assert_allclose(np.asarray(image), expected)
    assert fig.axes[0].get_ylabel() == "task"


def test_resume_after_the_server_died_gives_the_same_records(runs: dict[str, Path], tmp_path: Path) -> None:
    plan = from_lengths(LENGTHS, load_any("ruler"), trials=1)
    folder = tmp_path / "resumed"
    with FakeServer(Script(reach=3000, die_after=7)) as server, pytest.raises((ServerError, PosencError)):
        _run(server.url, folder, plan)
    assert 0 < len(list(read_results(folder))) < len(TASKS) * len(LENGTHS)
    with FakeServer(Script(reach=3000)) as server:
        _run(server.url, folder, plan)
    assert _records(folder) == _records(runs["short"])


PICK_ANSWER = {"tests": [{"kind": "niah", "length": 8192, "pass_rate": 0.9},
                         {"kind": "ruler", "length": 8192, "threshold": 0.856, "ratio": 0.85}],
               "extension": {"from": 2048, "to": 8192}, "tasks": "ruler"}


def test_a_pick_plan_runs_its_needle_tests_and_the_task_set_it_names(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PICK_ANSWER))
    plan = plan_for(plan_file=str(path))
    assert [t.kind for t in plan.tests] == ["niah", "ruler", "nolima"] and not plan.notes
    cells = plan.cells(with_loss=False)
    assert {c.kind for c in cells} == {"needle", "task"}
    assert {c.task for c in cells if c.kind == "task"} == set(TASKS)
    assert len([c for c in cells if c.kind == "needle"]) == len(plan.lengths) * len(plan.depths) * plan.trials
    assert plan.as_dict()["template"]["name"] == "needle" and plan.as_dict()["tasks"]["name"] == "ruler"
    # --template picks one of them; the other's tests are noted, not run
    ruler = plan_for(plan_file=str(path), template="ruler")
    assert [t.kind for t in ruler.tests] == ["ruler", "nolima"]
    assert any("needle at 8k" in note for note in ruler.notes)
    needle = plan_for(plan_file=str(path), template="needle")
    assert [t.kind for t in needle.tests] == ["niah"] and needle.tasks is None
    # a plan of one template keeps the fingerprint it had before plans could hold both
    assert "tasks" not in needle.as_dict()
    with pytest.raises(PosencError, match="--pass-rate is a needle test's"):
        plan_for(lengths="2k,4k", template="ruler", pass_rate=0.9)


def test_a_needle_and_task_run_reports_each_apart(tmp_path: Path) -> None:
    """One run folder, both kinds of line: the needle grid from the needle cells, the task scores from the task
    cells, each test judged on its own kind (a scripted model that reads everything passes all three)."""
    answer = PICK_ANSWER | {"tests": [t | {"length": 4096} for t in PICK_ANSWER["tests"]],  # type: ignore[operator]
                            "extension": None}  # lengths: the tests' 4k alone
    # the passkey template: the scripted model answers its wording (plan_for gives needle, tested above)
    plan = from_pick(answer, load_any("passkey"), tasks=load_any("ruler"), trials=1, depths=(0.0, 1.0))  # type: ignore[arg-type]
    with FakeServer(Script(reach=10**9)) as server:
        _run(server.url, tmp_path / "run", plan)
    kinds = {r["kind"] for r in read_results(tmp_path / "run")}
    assert kinds == {"needle", "task"}  # no loss: no test needs it, and llama-cpp-python's loss path is slow
    summary = summarise(tmp_path / "run")
    assert summary["kinds"] == ["needle", "task"]
    assert summary["by_length"]["4096"]["pass_rate"] == 1.0 and summary["by_length"]["4096"]["cells"] == 2
    assert summary["tasks"]["names"] == list(TASKS)
    assert [(t["kind"], t["result"]) for t in summary["tests"]] == [("niah", "pass"), ("ruler", "pass"),
                                                                    ("nolima", "pass")]
    shown = ok(run("eval", "report", str(tmp_path / "run")))
    assert "depth 0" in shown.stdout and "niah_single_1" in shown.stdout, shown.stdout


# ------------------------------------------------------------------------------------------- effective lengths

score_maps = st.dictionaries(st.sampled_from([512, 1024, 2048, 4096, 8192, 16384]),
                             st.one_of(st.none(), st.floats(0, 100)), min_size=1)


@given(scores=score_maps, low=st.floats(0, 100), high=st.floats(0, 100))
def test_effective_length_properties(scores: dict[int, float | None], low: float, high: float) -> None:
    low, high = min(low, high), max(low, high)
    loose, strict = effective_length(scores, low), effective_length(scores, high)
    if strict is not None:  # monotonic in the threshold
        assert loose is not None and loose >= strict
    if loose is not None:
        assert loose in scores and loose <= max(scores)  # never past the longest length run
        assert all(v is not None and v >= low for n, v in scores.items() if n <= loose)
    shortest = scores[min(scores)]
    if shortest is None or shortest < low:
        assert loose is None  # None when even the shortest fails
    nolima, base = nolima_length(scores, 0.85)
    assert base == shortest
    if nolima is not None:
        assert base is not None and all(v is not None and v >= 0.85 * base for n, v in scores.items() if n <= nolima)


def test_effective_length_examples() -> None:
    # RULER's Table 3 reading: Llama-2-7B's 4k score is the threshold; a dip below it ends the effective length
    assert effective_length({4096: 85.6, 8192: 85.59}, 85.6) == 4096
    assert effective_length({4096: 90.0, 8192: 80.0, 16384: 90.0}, 85.6) == 4096
    assert effective_length({4096: 80.0}, 85.6) is None
    assert nolima_length({1024: 80.0, 2048: 68.0, 4096: 67.9}, 0.85) == (2048, 80.0)
