"""eval's workflows (posenc_cli.evaluation.workflows) without the CLI: a run against the scripted server reported
with the exit status it earns and its stderr lines in order, the limits checked with the field they are about."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run
from fake_server import FakeServer, Script

from posenc_cli.errors import CouldNotRun, ExitCode, PosencError
from posenc_cli.evaluation.run import read_results
from posenc_cli.evaluation.workflows import (
    MAX_RETRIES,
    Server,
    compare_runs,
    connect,
    dry_run_plan,
    probe_server,
    report_run,
    run_plan,
)


@contextlib.contextmanager
def counting(seen: list[int], total: int) -> Iterator[Callable[[Any], None]]:
    seen.append(total)
    yield lambda state: seen.append(state.done)


@pytest.mark.parametrize(("server", "field"), [
    (Server("http://127.0.0.1:9/v1", timeout=0.0), "timeout"),
    (Server("http://127.0.0.1:9/v1", timeout=float("nan")), "timeout"),
    (Server("http://127.0.0.1:9/v1", retries=MAX_RETRIES + 1), "retries"),
])
def test_the_limits_name_their_field(server: Server, field: str) -> None:
    with pytest.raises(PosencError) as caught:
        connect(server)
    assert caught.value.fields == (field,) and str(caught.value).startswith(f"{field} ")
    assert caught.value.render(lambda f: "--" + f).startswith(f"--{field} ")


def test_a_run_reports_in_order_and_earns_its_status(tmp_path: Path) -> None:
    notes: list[str] = []
    seen: list[int] = []
    with FakeServer(Script()) as fake:
        server = Server(fake.url, retries=0)
        probed = probe_server(server, note=notes.append)
        judged = run_plan(server, tmp_path / "run", lengths="64", trials=1, pass_rate=0.0, template="passkey",
                          note=notes.append, progress=lambda total: counting(seen, total))
    assert probed.code == ExitCode.OK and probed.result["loss"] == probed.loss.as_dict()
    assert seen[0] == len(seen) - 1 > 0 and seen[-1] == seen[0]  # opened with the cells to run, each reported
    assert judged.result["result"] == "pass" and judged.code == ExitCode.OK
    assert judged.result["api"] == {"name": "completions", "endpoint": "/v1/completions"}
    assert judged == report_run(tmp_path / "run", note=notes.append)
    assert all(line.startswith("note: ") for line in notes), notes
    with pytest.raises(PosencError, match="two or more"):
        compare_runs([tmp_path / "run"], note=notes.append)
    result = compare_runs([tmp_path / "run", tmp_path / "run"], note=notes.append)
    assert json.loads(json.dumps(result))["runs"][0]["label"]


def test_a_png_on_stdout_is_refused_before_anything_is_drawn(tmp_path: Path) -> None:
    with FakeServer(Script()) as fake:
        run_plan(Server(fake.url, retries=0), tmp_path / "run", lengths="64", trials=1, pass_rate=0.0,
                 template="passkey", note=lambda _: None, progress=lambda total: counting([], total))
    with pytest.raises(PosencError) as caught:
        report_run(tmp_path / "run", png=Path("-"), note=lambda _: None)
    assert caught.value.fields == ("png",)


def _quiet(_: str) -> None:
    pass


@pytest.mark.parametrize("style", ["vllm", "llama-cpp-python"])
def test_a_dry_run_counts_what_the_run_sends_and_sends_nothing(tmp_path: Path, style: str) -> None:
    """The requests and prompt tokens a dry run prints are those of the run's lines (vLLM: loss requests too);
    the dry run itself sends what a probe sends and writes nothing."""
    grid = {"lengths": "64,128,256", "trials": 2, "template": "passkey", "depths": "0,1"}
    with FakeServer(Script(style=style, max_model_len=256)) as fake:
        probe_server(Server(fake.url, retries=0), note=_quiet)
        probed = dict(fake.script.counts), fake.script.completions
    with FakeServer(Script(style=style, max_model_len=256)) as fake:
        planned = dry_run_plan(Server(fake.url, retries=0), note=_quiet, **grid)  # type: ignore[arg-type]
        assert (dict(fake.script.counts), fake.script.completions) == probed
        run_plan(Server(fake.url, retries=0), tmp_path / "run", note=_quiet,
                 progress=lambda total: counting([], total), **grid)  # type: ignore[arg-type]
    records = list(read_results(tmp_path / "run"))
    reported = 256 if style == "vllm" else None  # llama-cpp-python reports no window over HTTP
    assert planned.code == ExitCode.OK and planned.result["window"] == ("fits" if reported else "unknown")
    assert planned.result["requests"] == len(records)
    assert planned.result["prompt_tokens"] == sum(r["tokens"] for r in records)
    assert planned.result["served_context"] == reported
    for row in planned.result["grid"]:
        at = [r for r in records if r["length"] == row["length"]]
        assert (row["needle"], row["loss"]) == (sum(r["kind"] == "needle" for r in at),
                                                sum(r["kind"] == "loss" for r in at))
    assert any(row["loss"] for row in planned.result["grid"]) == (style == "vllm")


def test_a_dry_run_without_a_server_says_the_window_is_unknown(tmp_path: Path) -> None:
    planned = dry_run_plan(None, lengths="64,1k", trials=1, template="passkey", depths="0.5", note=_quiet)
    assert planned.code == ExitCode.OK
    assert (planned.result["served_context"], planned.result["window"]) == (None, "unknown")
    assert [row["needle"] for row in planned.result["grid"]] == [1, 1]
    assert planned.result["prompt_tokens"] == (64 - 6) + (1024 - 6) + planned.result["grid"][1]["loss"] * 1023


@pytest.mark.parametrize(("script", "fix"), [
    (Script(style="vllm", max_model_len=128), "start vLLM with --max-model-len 256"),
    (Script(style="sglang", max_model_len=128), "start SGLang with --context-length 256"),
    (Script(style="llama-server", max_model_len=128), "start llama-server with -c 256"),
    (Script(style="llama-server", max_model_len=128, slots=4),
     "start llama-server with -c 1024 (-c is split across the -np 4 slots), or with --kv-unified, or -np 1"),
    (Script(style="llama-server", max_model_len=128, slots=2, n_ctx_train=128),
     "caps a slot at the GGUF's trained context (128): serve a GGUF scaled to 256 (posenc scale ... --target 256 -o "
     "NEW.gguf), started with at least -c 512 (-c is split across the -np 2 slots)"),
])
def test_lengths_past_the_served_window_are_refused_before_sending(tmp_path: Path, script: Script, fix: str) -> None:
    with FakeServer(script) as fake:
        with pytest.raises(CouldNotRun) as caught:
            run_plan(Server(fake.url, retries=0), tmp_path / "run", lengths="64,128,256", trials=1,
                     template="passkey", note=_quiet, progress=lambda total: counting([], total))
        sent = fake.script.completions
        planned = dry_run_plan(Server(fake.url, retries=0), lengths="64,128,256", trials=1, template="passkey",
                               note=_quiet)
    message = str(caught.value)
    assert message.startswith("256 tokens: past the 128 the server serves per request") and fix in message, message
    assert message.endswith("nothing was sent") and not (tmp_path / "run").exists()
    assert planned.code == ExitCode.COULD_NOT_RUN and planned.result["window"] == "refused"
    assert fix in planned.result["why"]
    with FakeServer(Script(style=script.style, max_model_len=128, slots=script.slots)) as fake:
        probe_server(Server(fake.url, retries=0), note=_quiet)
        assert fake.script.completions == sent  # the run sent the probe's requests and no cell


def test_a_length_at_the_served_window_is_sent(tmp_path: Path) -> None:
    with FakeServer(Script(style="llama-server", max_model_len=128, slots=2)) as fake:
        judged = run_plan(Server(fake.url, retries=0), tmp_path / "run", lengths="64,128", trials=1,
                          template="passkey", pass_rate=0.5, note=_quiet,
                          progress=lambda total: counting([], total))
    assert judged.code == ExitCode.OK and judged.result["by_length"]["128"]["refused"] == 0


@pytest.mark.parametrize("usage", [True, False])
def test_time_to_first_token_is_recorded_where_streaming_keeps_the_length_check(tmp_path: Path, usage: bool) -> None:
    """Streamed retrieval requests when the server reports the usage while streaming: each line's
    first_token_seconds (at least the server's delay before its first chunk) with the requests in flight beside it,
    and its prompt length still checked; else sent whole, and the report says why."""
    with FakeServer(Script(style="vllm", stream_usage=usage, delay=0.05)) as fake:
        judged = run_plan(Server(fake.url, retries=0), tmp_path / "run", lengths="64,128", trials=1, depths="0,1",
                          template="passkey", pass_rate=0.5, concurrency=2, loss=False, note=_quiet,
                          progress=lambda total: counting([], total))
    records = list(read_results(tmp_path / "run"))
    assert len(records) == 4 and all(r["length_ok"] and r["served_tokens"] == r["tokens"] for r in records)
    first = judged.result["first_token"]
    if usage:
        assert all(r["first_token_seconds"] >= 0.05 and r["in_flight"] == 2 for r in records)
        assert first["measured"] and first["in_flight"] == [2]
        assert {n: v["requests"] for n, v in first["by_length"].items()} == {"64": 2, "128": 2}
        for n, v in first["by_length"].items():
            mine = sorted(r["first_token_seconds"] for r in records if r["length"] == int(n))
            assert v["median"] == round(sum(mine) / 2, 4) and v["max"] == mine[-1]
    else:
        assert not any("first_token_seconds" in r for r in records)
        assert not first["measured"] and "no usage when streaming" in first["why"]
    shown = ok(run("eval", "report", str(tmp_path / "run"))).stdout
    assert ("time to first token by length, median (2 in flight): 64 " if usage else
            "time to first token: not measured: the server reports no usage when streaming") in shown, shown


def test_ollama_runs_through_its_native_api_with_num_ctx(tmp_path: Path) -> None:
    """--api ollama: /api/generate with options.num_ctx (the plan's longest length by default), the window capped
    at the GGUF's context_length from /api/show, prompt_eval_count as the served length."""
    with FakeServer(Script(style="ollama", n_ctx_train=1024)) as fake:
        server = Server(fake.url, tokenizer="bytes", api="ollama", retries=0)
        judged = run_plan(server, tmp_path / "run", lengths="64,256", trials=1, depths="0,1", template="passkey",
                          pass_rate=0.5, note=_quiet, progress=lambda total: counting([], total))
    records = list(read_results(tmp_path / "run"))
    assert judged.code == ExitCode.OK and judged.result["engine"] == "ollama"
    assert judged.result["api"] == {"name": "ollama", "endpoint": "/api/generate"}
    assert all(r["served_tokens"] == r["tokens"] and r["passed"] for r in records) and len(records) == 4
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["server"]["served_context"] == 256 and manifest["server"]["trained_context"] == 1024
    assert judged.result["loss"]["available"] is False


def test_ollama_past_num_ctx_or_past_the_gguf_is_refused_with_the_fix(tmp_path: Path) -> None:
    with FakeServer(Script(style="ollama", n_ctx_train=1024)) as fake:
        with pytest.raises(CouldNotRun, match=r"past the 128 .*send num_ctx 256 \(--num-ctx 256"):
            run_plan(Server(fake.url, tokenizer="bytes", api="ollama", retries=0, num_ctx=128), tmp_path / "a",
                     lengths="64,256", trials=1, template="passkey", note=_quiet,
                     progress=lambda total: counting([], total))
        with pytest.raises(CouldNotRun, match=r"Ollama serves only the GGUF's window \(1024\): serve a GGUF scaled "
                                              r"to 2048 \(posenc scale .* --engine ollama -o NEW.gguf\)"):
            run_plan(Server(fake.url, tokenizer="bytes", api="ollama", retries=0), tmp_path / "b",
                     lengths="64,2k", trials=1, template="passkey", note=_quiet,
                     progress=lambda total: counting([], total))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

