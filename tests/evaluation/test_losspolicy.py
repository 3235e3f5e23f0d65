"""The loss a run can leave out: ``--loss/--no-loss``, ``--loss-max-length`` and the automatic skip, through the real
CLI against tests/harness/fake_server.py (llama-cpp-python style: the engine whose loss path is known slow; vLLM
style: one
that is not), and what probe, the run's stderr, its results file and the report say about the choice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json
from fake_server import FakeServer, Script
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.evaluation import MAX_EVAL_LENGTH, MIN_EVAL_LENGTH
from posenc_cli.evaluation.losspolicy import SLOW_LOSS_PATHS, choose
from posenc_cli.evaluation.plan import Plan, PlanTest
from posenc_cli.evaluation.probe import Capabilities
from posenc_cli.evaluation.templates import load_template
from posenc_cli.units import format_length

GRID = ("--lengths", "64,128,256", "--depths", "0,1", "--trials", "1", "--template", "passkey")
SLOW = SLOW_LOSS_PATHS["llama-cpp-python"]


def results(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def loss_lengths(folder: Path) -> list[int]:
    return sorted(r["length"] for r in results(folder) if r["kind"] == "loss")


def report(folder: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(run("eval", "report", str(folder), "--json").stdout)
    return summary


def test_the_slow_engine_skips_the_loss_when_no_test_needs_it(tmp_path: Path) -> None:
    script = Script()
    with FakeServer(script) as server:
        result = ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--out", str(tmp_path / "run")))
    assert loss_lengths(tmp_path / "run") == []
    assert len(results(tmp_path / "run")) == 3 * 2  # every needle cell, nothing else
    note = [line for line in result.stderr.splitlines() if "per-position loss" in line]
    assert len(note) == 1 and note[0].startswith("note: per-position loss off: no test of the plan needs it")
    assert "--loss to measure it" in note[0]
    summary = report(tmp_path / "run")
    loss = summary["loss"]
    assert loss["available"] is True and loss["measured"] is False and loss["mode"] == "off"
    assert loss["lengths"] == [] and loss["curve"] == []
    text = ok(run("eval", "report", str(tmp_path / "run")))
    assert "per-position loss: not measured (no test of the plan needs it" in text.stdout
    assert_usage_error(run("eval", "report", str(tmp_path / "run"), "--loss-png", str(tmp_path / "l.png")),
                       "--loss-png", "left the loss out")


def test_an_engine_not_known_slow_measures_the_loss_without_a_test(tmp_path: Path) -> None:
    with FakeServer(Script(style="vllm")) as server:
        result = ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--out", str(tmp_path / "run")))
    assert loss_lengths(tmp_path / "run") == [256]
    assert "per-position loss" not in result.stderr  # measured as planned: nothing to say
    loss = report(tmp_path / "run")["loss"]
    assert loss["measured"] is True and loss["mode"] == "on" and loss["lengths"] == [256] and loss["cap"] is None


def test_loss_forces_it_on_the_slow_engine_within_its_default_cap(tmp_path: Path) -> None:
    assert 256 < SLOW.cap  # the grid's longest length is below the cap: nothing is shortened
    with FakeServer(Script()) as server:
        ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--loss", "--out", str(tmp_path / "run")))
    records = [r for r in results(tmp_path / "run") if r["kind"] == "loss"]
    assert [r["length"] for r in records] == [256] and len(records[0]["logprobs"]) == records[0]["tokens"] == 255
    loss = report(tmp_path / "run")["loss"]
    assert loss["mode"] == "on" and loss["cap"] == SLOW.cap and loss["lengths"] == [256]
    text = ok(run("eval", "report", str(tmp_path / "run")))
    assert "per-position loss measured at 256;" in text.stdout


def test_a_test_that_needs_the_loss_gets_it_capped_by_default_on_the_slow_engine(tmp_path: Path) -> None:
    longest = 2 * SLOW.cap
    pick = write_json(tmp_path, {"tests": [{"kind": "regression", "length": 64, "margin": 0.5},
                                           {"kind": "niah", "length": longest, "pass_rate": 0.0}]}, "pick.json")
    with FakeServer(Script()) as server:
        result = run("eval", "run", server.url, "--plan", pick, "--template", "passkey", "--depths", "0",
                     "--trials", "1", "--out", str(tmp_path / "run"))
    assert result.exit_code == 3, (result.stdout, result.stderr)  # the regression test has no baseline: not run
    # the curve's request at the longest length goes at the cap; the regression test's own length is kept
    assert loss_lengths(tmp_path / "run") == [64, SLOW.cap]
    cap = format_length(SLOW.cap)
    assert f"note: per-position loss capped at {cap} (requests at 64, {cap}): {SLOW.why}" in result.stderr
    served = [r for r in results(tmp_path / "run") if r["kind"] == "loss"]
    assert all(r["served_tokens"] == r["tokens"] == r["length"] - 1 for r in served)
    summary = report(tmp_path / "run")
    assert summary["loss"]["mode"] == "capped" and summary["loss"]["cap"] == SLOW.cap
    assert summary["loss"]["planned"] == [64, SLOW.cap] and summary["loss"]["measured"] is True
    assert max(b["to"] for b in summary["loss"]["curve"]) <= SLOW.cap + SLOW.cap // 2  # bins stop near the cap
    needles = [r for r in results(tmp_path / "run") if r["kind"] == "needle"]
    assert {r["length"] for r in needles} == {64, longest}  # the needles still go to the longest length
    text = run("eval", "report", str(tmp_path / "run")).stdout
    assert f"capped at {cap}" in text


def test_the_cap_flag_shortens_the_loss_and_a_test_past_it_is_not_run(tmp_path: Path) -> None:
    pick = write_json(tmp_path, {"tests": [{"kind": "niah", "length": 256, "pass_rate": 0.0},
                                           {"kind": "perplexity", "length": 256, "baseline": 64, "margin": 0.5}]},
                      "pick.json")
    with FakeServer(Script(style="vllm")) as server:
        result = run("eval", "run", server.url, "--plan", pick, "--template", "passkey", "--depths", "0",
                     "--trials", "1", "--loss-max-length", "128", "--out", str(tmp_path / "run"), "--json")
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert loss_lengths(tmp_path / "run") == [128]
    assert "capped at 128 (requests at 128): --loss-max-length; tests at 256 are not run" in result.stderr
    summary = json.loads(result.stdout)
    verdict = next(t for t in summary["tests"] if t["kind"] == "perplexity")
    assert verdict["result"] == "not run" and "capped at 128" in verdict["why"]
    assert summary["loss"]["lengths"] == [128] and summary["loss"]["cap"] == 128


def test_no_loss_leaves_out_a_loss_a_test_needs_and_says_so(tmp_path: Path) -> None:
    pick = write_json(tmp_path, {"tests": [{"kind": "niah", "length": 128, "pass_rate": 0.0},
                                           {"kind": "regression", "length": 64, "margin": 0.02}]}, "pick.json")
    with FakeServer(Script(style="vllm")) as server:
        result = run("eval", "run", server.url, "--plan", pick, "--template", "passkey", "--depths", "0",
                     "--trials", "1", "--no-loss", "--out", str(tmp_path / "run"), "--json")
    assert result.exit_code == 3
    assert "note: per-position loss off: --no-loss" in result.stderr
    assert loss_lengths(tmp_path / "run") == []
    summary = json.loads(result.stdout)
    verdicts = {t["kind"]: t for t in summary["tests"]}
    assert verdicts["niah"]["result"] == "pass"
    assert verdicts["regression"]["result"] == "not run"
    assert verdicts["regression"]["why"] == "the run left the loss out (--no-loss)"


def test_resuming_with_other_loss_flags_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(Script(style="vllm")) as server:
        ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--no-loss", "--out", str(out)))
        before = (out / "results.jsonl").read_bytes()
        assert_usage_error(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--out", str(out)),
                           "another setup", "loss requests at [], now [256]")
        ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--no-loss", "--out", str(out)))
    assert (out / "results.jsonl").read_bytes() == before  # nothing to add: the same choice, every cell done


@pytest.mark.parametrize(("style", "flags", "mode", "cap"), [
    ("llama-cpp-python", (), "auto", SLOW.cap),
    ("llama-cpp-python", ("--loss",), "capped", SLOW.cap),
    ("llama-cpp-python", ("--loss-max-length", "1k"), "capped", 1024),
    ("llama-cpp-python", ("--no-loss",), "off", None),
    ("vllm", (), "on", None),
    ("vllm", ("--loss-max-length", "64k"), "capped", 65536),
])
def test_probe_shows_the_choice_a_run_would_make(style: str, flags: tuple[str, ...], mode: str,
                                                 cap: int | None) -> None:
    with FakeServer(Script(style=style)) as server:
        result = ok(run("eval", "probe", server.url, "--json", *flags))
        human = ok(run("eval", "probe", server.url, *flags))
    loss = json.loads(result.stdout)["loss"]
    assert loss["mode"] == mode and loss["cap"] == cap and loss["lengths"] == []
    row = next(line for line in human.stdout.splitlines() if "loss in a run" in line)
    assert mode in row
    if style == "llama-cpp-python" and not flags:
        assert "sent only when a test needs it" in " ".join(human.stdout.split())


def test_probe_without_prompt_logprobs_says_unavailable() -> None:
    with FakeServer(Script(echo="reject")) as server:
        loss = json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)["loss"]
    assert loss["mode"] == "unavailable" and "no prompt log-probabilities" in loss["why"]


@pytest.mark.parametrize(("flags", "needles"), [
    (("--loss-max-length", "4"), ("--loss-max-length 4", f"allowed {MIN_EVAL_LENGTH} to",
                                  format_length(MAX_EVAL_LENGTH))),
    (("--loss-max-length", "32M"), ("--loss-max-length 32M", "allowed")),
    (("--loss-max-length", "x"), ("--loss-max-length 'x'", "is not a length")),
    (("--loss-max-length", "1.3"), ("--loss-max-length '1.3'", "whole number")),
    (("--no-loss", "--loss-max-length", "1k"), ("--loss-max-length 1k", "--no-loss")),
])
@pytest.mark.parametrize("command", ["run", "probe"])
def test_bad_loss_flags_are_one_error_line_before_any_request(tmp_path: Path, command: str,
                                                             flags: tuple[str, ...], needles: tuple[str, ...]) -> None:
    script = Script()
    with FakeServer(script) as server:
        args = [*GRID, "--out", str(tmp_path / "run")] if command == "run" else []
        assert_usage_error(run("eval", command, server.url, *args, *flags), *needles)
    assert script.completions == 0
    assert not (tmp_path / "run").exists()


# --- the choice itself, over many plans --------------------------------------------------------------------------

lengths_st = st.lists(st.integers(MIN_EVAL_LENGTH, 1 << 16), min_size=1, max_size=5, unique=True)


@settings(max_examples=300, deadline=None)
@given(lengths=lengths_st, regression=st.lists(st.integers(MIN_EVAL_LENGTH, 1 << 16), max_size=2),
       engine=st.sampled_from(["llama-cpp-python", "vllm", "sglang"]), want=st.sampled_from([None, True, False]),
       cap=st.one_of(st.none(), st.integers(MIN_EVAL_LENGTH, 1 << 16)))
def test_the_choice_never_passes_the_cap_and_keeps_what_fits(lengths: list[int], regression: list[int], engine: str,
                                                            want: bool | None, cap: int | None) -> None:
    if want is False:
        cap = None  # the CLI refuses the pair (tested above)
    # as from_pick builds it: a test's length is one of the plan's lengths
    plan = Plan(tuple(sorted(set(lengths) | set(regression))), (0.5,), 1, load_template("passkey"),
                tuple(PlanTest("regression", n, 0.02) for n in regression))
    caps = Capabilities("http://127.0.0.1:1", "m", engine, None, "", None, None, "echo", "echo")
    choice = choose(plan, caps, want, cap)
    limit = cap if cap is not None else SLOW_LOSS_PATHS[engine].cap if engine in SLOW_LOSS_PATHS else None
    if want is False:
        assert choice.mode == "off" and choice.lengths == ()
        return
    if want is None and cap is None and engine in SLOW_LOSS_PATHS and not regression:
        assert choice.mode == "off" and choice.lengths == () and "--loss" in choice.why
        return
    assert choice.lengths and list(choice.lengths) == sorted(set(choice.lengths))
    if limit is not None:
        assert max(choice.lengths) <= limit
        assert choice.cap == limit
    wanted = plan.loss_lengths
    # every wanted length that fits is kept as it is; the curve goes to the longest length the cap allows
    assert {n for n in wanted if limit is None or n <= limit} <= set(choice.lengths)
    capped = limit is not None and max(wanted) > limit
    assert (choice.mode == "capped") == capped
    assert max(choice.lengths) == (limit if capped else max(plan.lengths))


def test_a_misaligned_echo_is_no_loss(tmp_path: Path) -> None:
    """llama-cpp-python serving a model without a BOS echoes one value per prompt token, each one position off:
    the probe says so and a run measures no loss, even with --loss."""
    with FakeServer(Script(echo="no-bos")) as server:
        caps = json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)
        result = ok(run("eval", "run", server.url, *GRID, "--pass-rate", "0", "--loss", "--out",
                        str(tmp_path / "run")))
    assert caps["prompt_logprobs"] is None and caps["parameters"]["echo"].startswith("misaligned")
    assert caps["loss"]["mode"] == "unavailable" and "one position off" in caps["loss"]["why"]
    assert "per-position loss unavailable" in result.stderr and "no BOS" in result.stderr
    assert loss_lengths(tmp_path / "run") == []
    with FakeServer(Script(style="vllm", echo="no-bos")) as server:  # vLLM's echo keeps every token, aligned
        assert json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)["prompt_logprobs"] == "echo"
