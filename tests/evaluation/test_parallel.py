"""Parallel requests in `posenc eval run`, against tests/harness/fake_server.py: the same file at any concurrency,
the default taken from the probe, resume after an interrupted parallel run, and the folder lock.

A run writes each finished cell in the plan's order (a cell waits for the cells before it), so a run at
``--concurrency 4`` must leave exactly the bytes a sequential run leaves, apart from the per-cell wall time
(``seconds``), and an interrupted run must leave a prefix of that file.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_could_not_run, ok, run
from fake_server import FakeServer, Script

from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.plan import from_lengths
from posenc_cli.evaluation.run import cell_prompt
from posenc_cli.evaluation.templates import load_any, load_template

LENGTHS = (64, 128, 256)
TRIALS = 2
GRID = ("--lengths", ",".join(map(str, LENGTHS)), "--trials", str(TRIALS), "--loss", "--pass-rate", "0")
REACH = 100
PASSKEY = load_template("passkey")
PLAN = from_lengths(list(LENGTHS), PASSKEY, trials=TRIALS)
ORDER = [c.key for c in PLAN.cells(with_loss=True)]  # the plan's cells, loss requests first
# wall times, and the requests in flight beside a timed request (its time to first token)
SECONDS = re.compile(r'"(seconds|first_token_seconds|in_flight)":[0-9.eE+-]+')


def normalised(folder: Path) -> str:
    """results.jsonl with each cell's wall time blanked: the only field that depends on timing."""
    text = (folder / "results.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n")
    return SECONDS.sub(r'"\1":_', text)


def keys(folder: Path) -> list[str]:
    return [json.loads(line)["cell"] for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def summary(folder: Path) -> dict[str, Any]:
    """The report's JSON without what names the folder or measures time."""
    data: dict[str, Any] = json.loads(ok(run("eval", "report", str(folder), "--json")).stdout)
    return {k: v for k, v in data.items() if k not in ("run", "seconds", "first_token")}


def run_grid(url: str, out: Path, *extra: str) -> Any:
    return run("eval", "run", url, *GRID, "--out", str(out), *extra)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sequential") / "run"
    script = Script(reach=REACH)
    with FakeServer(script) as server:
        ok(run_grid(server.url, out, "--concurrency", "1"))
    assert script.most_in_flight == 1
    assert keys(out) == ORDER
    return out


def test_concurrency_4_writes_the_sequential_run_s_bytes(tmp_path: Path, sequential: Path) -> None:
    # completions wait 12 to 100 ms by a hash of the request: four overlap and finish out of the plan's order
    script = Script(reach=REACH, delay=0.05, jitter=True)
    with FakeServer(script) as server:
        ok(run_grid(server.url, tmp_path / "run", "--concurrency", "4"))
    assert script.most_in_flight == 4
    assert normalised(tmp_path / "run") == normalised(sequential)
    assert summary(tmp_path / "run") == summary(sequential)


def test_the_default_concurrency_is_what_the_probe_learns(tmp_path: Path) -> None:
    grid = ("--lengths", "64,128", "--trials", "2", "--depths", "0,1", "--pass-rate", "0")
    script = Script(style="llama-server", slots=3, max_model_len=300, delay=0.2)
    with FakeServer(script) as server:
        probed = json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)
        result = ok(run("eval", "run", server.url, *grid, "--out", str(tmp_path / "slots")))
    assert probed["concurrency"] == 3 and probed["concurrency_source"] == "/props total_slots (3 slots)"
    assert script.most_in_flight == 3
    assert "note: 3 requests in flight (/props total_slots (3 slots); --concurrency to change)" in result.stderr

    script = Script(style="llama-server", slots=3, max_model_len=300, delay=0.2)
    with FakeServer(script) as server:
        result = ok(run("eval", "run", server.url, *grid, "--concurrency", "1", "--out", str(tmp_path / "one")))
    assert script.most_in_flight == 1 and "in flight" not in result.stderr
    assert normalised(tmp_path / "slots") == normalised(tmp_path / "one")

    for style, want in (("vllm", 4), ("sglang", 4), ("llama-cpp-python", 1)):
        with FakeServer(Script(style=style)) as server:
            assert json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)["concurrency"] == want, style


def test_a_failed_cell_stops_the_file_before_it_and_the_rerun_fills_the_rest(tmp_path: Path,
                                                                            sequential: Path) -> None:
    """Cell 5 of the plan always gets HTTP 500; cells 6 to 8, sent beside it, finish but must not be written: the
    file is the first 5 lines of the sequential run's, and the rerun appends the rest in order."""
    index = 5
    cell = PLAN.cells(with_loss=True)[index]
    key = cell_prompt(PASSKEY, cell, bytevocab.count).key
    out = tmp_path / "run"
    script = Script(reach=REACH, delay=0.05, jitter=True, fail_text=f"the key is {key}. ")
    with FakeServer(script) as server:
        result = run_grid(server.url, out, "--concurrency", "4", "--retries", "1")
    assert_could_not_run(result, "/v1/completions", "HTTP 500")
    assert script.completions > len(ORDER[:index]) + 1  # cells after the failed one were answered, then dropped
    expected = normalised(sequential).splitlines(keepends=True)
    assert normalised(out) == "".join(expected[:index])

    script = Script(reach=REACH, delay=0.05)
    with FakeServer(script) as server:
        result = ok(run_grid(server.url, out, "--concurrency", "4"))
    assert f"{index} cells already done, {len(ORDER) - index} to run" in result.stderr
    assert normalised(out) == normalised(sequential)


def test_an_interrupted_parallel_run_resumes_without_a_duplicate_or_lost_cell(tmp_path: Path,
                                                                              sequential: Path) -> None:
    out = tmp_path / "run"
    # the server dies after 12 answers past the probe's (the probe's completions are counted on a fresh server)
    script = Script()
    with FakeServer(script) as server:
        ok(run("eval", "probe", server.url))
    served_by_probe = script.completions
    script = Script(reach=REACH, delay=0.05, jitter=True, die_after=served_by_probe + 12)
    with FakeServer(script) as server:
        result = run_grid(server.url, out, "--concurrency", "4", "--retries", "1")
    assert_could_not_run(result, "/v1/completions")
    first = normalised(out)
    written = first.count("\n")
    assert 0 < written <= 12
    assert normalised(sequential).startswith(first)  # a prefix of the plan's cells, in order

    script = Script(reach=REACH, delay=0.05)
    with FakeServer(script) as server:
        ok(run_grid(server.url, out, "--concurrency", "4"))
    assert script.completions == served_by_probe + len(ORDER) - written  # every missing cell sent once
    assert keys(out) == ORDER
    assert normalised(out) == normalised(sequential)


# the passkey grid, and RULER's task set (11 tasks at one length, several tasks in one locked folder)
RULER_GRID = ("--template", "ruler", "--lengths", "2k", "--trials", "1")
RULER_ORDER = [c.key for c in from_lengths([2048], load_any("ruler"), trials=1).cells(with_loss=False)]


# (grid, its cells in order, the scripted server's delay per request, the first run's exit code: a task run's plan
# tests the effective length at its longest length, which a server reading 100 tokens fails)
LOCKED = [(GRID, ORDER, 0.25, 0), (RULER_GRID, RULER_ORDER, 1.0, 1)]


@pytest.mark.parametrize(("grid", "order", "delay", "code"), LOCKED, ids=["passkey", "ruler"])
def test_the_lock_refuses_a_second_run_while_a_parallel_run_holds_the_folder(
        tmp_path: Path, grid: tuple[str, ...], order: list[str], delay: float, code: int) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "posenc_cli", "eval", "run"]
    with FakeServer(Script(reach=REACH, delay=delay)) as slow, FakeServer(Script(reach=REACH)) as fast:
        first = subprocess.Popen([*argv, slow.url, *grid, "--concurrency", "4", "--out", str(out)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not ((out / "results.jsonl").is_file() and (out / "results.jsonl").read_text().count("\n")):
                assert first.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            second = subprocess.run([*argv, fast.url, *grid, "--concurrency", "4", "--out", str(out)],
                                    capture_output=True, text=True, timeout=120)
            assert first.poll() is None
        finally:
            _, stderr = first.communicate(timeout=120)
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr.splitlines() == [f"error: --out {out}: process {first.pid} is using this folder; wait for "
                                          "it to finish or give another --out folder"]
    assert first.returncode == code, stderr
    assert keys(out) == order
