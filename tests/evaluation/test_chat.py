"""`posenc eval run --api chat` against tests/harness/fake_server.py: the prompt goes through /v1/chat/completions,
whose fixed template (fake_server.CHAT_OPEN + content + CHAT_CLOSE) the server counts in ``usage.prompt_tokens``.

The probe measures that template's tokens the way it measures a BOS (usage of the same text on both endpoints), and a
cell of length L is then L tokens of context as the server counts them, template included: every expectation below is
computed from the template's text with the byte vocabulary, not read back from posenc.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clihelpers import assert_usage_error, ok, run
from fake_server import CHAT_CLOSE, CHAT_OPEN, FakeServer, Script

from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.plan import Cell
from posenc_cli.evaluation.run import cell_prompt
from posenc_cli.evaluation.templates import load_template

PASSKEY = load_template("passkey")
TEMPLATE_TOKENS = len(bytevocab.encode(CHAT_OPEN + CHAT_CLOSE, bos=False))  # 31 bytes, one token each
REACH = 100
GRID = ("--lengths", "128,192,256", "--trials", "2", "--pass-rate", "0")


def results(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def test_probe_measures_the_chat_template_s_tokens() -> None:
    with FakeServer(Script(style="vllm")) as server:
        caps = json.loads(ok(run("eval", "probe", server.url, "--api", "chat", "--json")).stdout)
        table = ok(run("eval", "probe", server.url, "--api", "chat")).stdout
        plain = json.loads(ok(run("eval", "probe", server.url, "--json")).stdout)
    assert caps["api"] == "chat" and caps["chat_offset"] == TEMPLATE_TOKENS == 31
    assert caps["parameters"]["chat temperature=0"] == "honoured"
    assert f"+{TEMPLATE_TOKENS} tokens around one user message" in table
    assert plain["api"] == "completions" and plain["chat_offset"] is None
    # two chat requests, and no streamed probe request (chat requests go whole: no time to first token)
    assert caps["requests"] == plain["requests"] + 2 - 1


def test_a_chat_run_counts_the_template_in_every_length(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = Script(reach=REACH, style="vllm")
    with FakeServer(script) as server:
        summary = json.loads(ok(run("eval", "run", server.url, *GRID, "--api", "chat", "--loss", "--out", str(out),
                                    "--json")).stdout)
        text = ok(run("eval", "report", str(out))).stdout
    assert summary["api"] == {"name": "chat", "endpoint": "/v1/chat/completions", "template_tokens": 31}
    assert "api: chat, /v1/chat/completions (each length includes the chat template's 31 tokens)" in text
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["api"] == "chat" and manifest["server"]["chat_offset"] == 31
    records = results(out)
    needles = [r for r in records if r["kind"] == "needle"]
    assert len(needles) == 3 * 5 * 2 and summary["mismatched_lengths"] == []

    def chat_count(text: str) -> int:
        return len(bytevocab.encode(CHAT_OPEN + text + CHAT_CLOSE))

    passed = 0
    for record in needles:
        # the prompt is built so that, wrapped in the template, it takes the cell's length less the answer's room
        assert record["tokens"] == record["served_tokens"] == record["length"] - PASSKEY.max_tokens
        cell = Cell("needle", record["length"], record["depth"], record["trial"])
        prompt = cell_prompt(PASSKEY, cell, chat_count)
        assert chat_count(prompt.text) == record["tokens"] and prompt.key == record["key"]
        templated_tail = prompt.text[prompt.needle_char:] + CHAT_CLOSE
        expected = len(bytevocab.encode(templated_tail, bos=False)) <= REACH
        assert record["passed"] is expected, record["cell"]
        passed += expected
    assert 0 < passed < len(needles)  # the reach rule splits the grid: the verdicts are not all alike
    loss = [r for r in records if r["kind"] == "loss"]
    assert loss and all(r["tokens"] == r["served_tokens"] == r["length"] - 1 for r in loss)  # raw completions


def test_a_chat_cell_as_long_as_the_window_is_served(tmp_path: Path) -> None:
    """The server's window is exactly the longest length: counted without the template, every prompt would be 31
    tokens too long and refused."""
    with FakeServer(Script(style="vllm", max_model_len=256)) as server:
        summary = json.loads(ok(run("eval", "run", server.url, "--lengths", "256", "--trials", "2", "--depths", "0,1",
                                    "--pass-rate", "0", "--api", "chat", "--no-loss", "--out", str(tmp_path / "run"),
                                    "--json")).stdout)
    assert summary["refused"] == 0 and summary["by_length"]["256"]["cells"] == 4
    assert all(r["served_tokens"] + PASSKEY.max_tokens == 256 for r in results(tmp_path / "run"))


def test_a_server_without_chat_is_one_error_naming_the_option(tmp_path: Path) -> None:
    script = Script(chat=False)
    with FakeServer(script) as server:
        result = run("eval", "run", server.url, *GRID, "--api", "chat", "--out", str(tmp_path / "run"))
        probed = run("eval", "probe", server.url, "--api", "chat")
    assert_usage_error(result, "--api chat", "HTTP 404", "--api completions")
    assert_usage_error(probed, "--api chat", "HTTP 404")
    assert not (tmp_path / "run").exists()


def test_an_unknown_api_and_a_resume_with_another_api_are_refused(tmp_path: Path) -> None:
    with FakeServer(Script(reach=REACH)) as server:
        assert_usage_error(run("eval", "run", server.url, *GRID, "--api", "responses", "--out", str(tmp_path / "x")),
                           "--api 'responses'", "completions, chat")
        ok(run("eval", "run", server.url, *GRID, "--out", str(tmp_path / "run")))
        before = (tmp_path / "run" / "results.jsonl").read_bytes()
        result = run("eval", "run", server.url, *GRID, "--api", "chat", "--out", str(tmp_path / "run"))
    assert_usage_error(result, "another setup", "API 'completions', now 'chat'")
    assert (tmp_path / "run" / "results.jsonl").read_bytes() == before
