"""Chat endpoints and parallel requests against llama.cpp's own llama-server, serving the committed passkey model.

The passkey GGUF carries no ``tokenizer.chat_template``; llama-server (llama.cpp as vendored by llama-cpp-python
0.3.36) then falls back to ChatML, and ``--chat-template`` gives another. With ChatML the byte vocabulary spells
``<|im_start|>user\\n`` ... ``<|im_end|>\\n<|im_start|>assistant\\n`` byte by byte (50 tokens, which the tiny model
never saw: it answers nothing useful); the runs that compare answers use the template ``Q: {content}`` (3 tokens),
after which it answers as it does on raw completions.

The server is started with ``-np 4`` (four slots, each with a quarter of ``--ctx-size``) and the YaRN x4 flags
``posenc scale`` prints, so that slots reach 1k and the answers are a mix of right and wrong keys: a run at the
probed concurrency (4) must write the same file as a run at 1. Measured: 48 of 48 cells identical in both APIs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_server
import pytest

from posenc_cli.evaluation import bytevocab

pytestmark = pytest.mark.skipif(llama_server.llama_server_binary() is None,
                                reason="needs llama.cpp's llama-server (POSENC_LLAMA_SERVER or on PATH)")

Q_TEMPLATE = "{%- for message in messages -%}{{- 'Q: ' + message.content -}}{%- endfor -%}"
CHATML = ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
GRID = ("--lengths", "64,256,512,1024", "--depths", "0,0.5,1", "--trials", "4")
# what differs between two runs of one grid: wall times, and the requests in flight beside a timed one
SECONDS = re.compile(r'"(seconds|first_token_seconds|in_flight)":[0-9.eE+-]+')


def posenc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posenc_cli", *args], capture_output=True, text=True, timeout=600)


def normalised(folder: Path) -> str:
    return SECONDS.sub(r'"\1":_', (folder / "results.jsonl").read_text(encoding="utf-8"))


def run(url: str, out: Path, *extra: str) -> dict[str, Any]:
    proc = posenc("eval", "run", url, *GRID, "--out", str(out), "--json", *extra)
    assert proc.returncode == 3, proc.stderr  # no test in the plan: "not run"
    summary: dict[str, Any] = json.loads(proc.stdout)
    summary["stderr"] = proc.stderr
    return summary


@pytest.fixture(scope="module")
def four_slots() -> Iterator[str]:
    flags = llama_server.native_scale_flags("yarn", "--factor", "4")  # ... --ctx-size 1024
    argv = llama_server.native_command(*flags, "--ctx-size", "4096", "-np", "4", "--jinja", "--chat-template",
                                       Q_TEMPLATE)
    with llama_server.serve(argv) as url:
        yield url


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_four_requests_in_flight_write_the_sequential_run_s_file(four_slots: str, tmp_path: Path, api: str) -> None:
    probed = json.loads(posenc("eval", "probe", four_slots, "--api", api, "--json").stdout)
    assert probed["concurrency"] == 4 and probed["concurrency_source"] == "/props total_slots (4 slots)"
    assert probed["served_context"] == 1024
    one = run(four_slots, tmp_path / "one", "--api", api, "--concurrency", "1")
    default = run(four_slots, tmp_path / "default", "--api", api)
    assert "note: 4 requests in flight" in default["stderr"] and "in flight" not in one["stderr"]
    assert normalised(tmp_path / "one") == normalised(tmp_path / "default")
    rates = [v["pass_rate"] for v in one["by_length"].values()]
    assert any(0 < r < 1 for r in rates), rates  # right and wrong answers both: the comparison can tell
    records = [json.loads(line) for line in (tmp_path / "one" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 48 and one["mismatched_lengths"] == []
    assert all(r["served_tokens"] == r["tokens"] == r["length"] - 6 for r in records)
    if api == "chat":
        assert probed["chat_offset"] == len("Q: ") and one["api"]["template_tokens"] == 3


def test_the_chatml_fallback_is_counted_in_every_length(tmp_path: Path) -> None:
    # -np 1: the one slot is capped at the model's 256-token training context (no YaRN flags)
    argv = llama_server.native_command("--ctx-size", "256", "-np", "1", "--chat-template", "chatml")
    with llama_server.serve(argv) as url:
        caps = json.loads(posenc("eval", "probe", url, "--api", "chat", "--expect-ctx", "256", "--json").stdout)
        proc = posenc("eval", "run", url, "--api", "chat", "--lengths", "128,256", "--depths", "0,1", "--trials", "2",
                      "--out", str(tmp_path / "run"), "--json")
    wrapper = len(bytevocab.encode("".join(CHATML), bos=False))
    assert caps["chat_offset"] == wrapper == 50
    assert caps["concurrency"] == 1
    summary = json.loads(proc.stdout)
    assert summary["mismatched_lengths"] == [] and summary["refused"] == 0  # 256 with the template fits the slot
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 8
    assert all(r["served_tokens"] == r["tokens"] == r["length"] - 6 for r in records)


def test_a_plan_past_the_slot_window_is_refused_before_sending(tmp_path: Path) -> None:
    """-c 2048 across -np 2 slots, no YaRN flags: each slot is 1024, capped at the GGUF's 256 (llama-server's
    n_ctx_slot()); a 1k plan is refused before any cell, with both fixes, and the dry run shows the same window."""
    argv = llama_server.native_command("--ctx-size", "2048", "-np", "2")
    with llama_server.serve(argv) as url:
        dry = posenc("eval", "run", "--dry-run", url, "--lengths", "128,1k", "--json")
        proc = posenc("eval", "run", url, "--lengths", "128,1k", "--out", str(tmp_path / "run"))
    assert proc.returncode == 3 and not (tmp_path / "run").exists(), proc.stderr
    assert proc.stderr.startswith("error: 1024 tokens: past the 256 the server serves per request (/props n_ctx per "
                                  "slot (2 slots))"), proc.stderr
    assert ("caps a slot at the GGUF's trained context (256): serve a GGUF scaled to 1024 (posenc scale ... --target "
            "1024 -o NEW.gguf), started with at least -c 2048 (-c is split across the -np 2 slots)") in proc.stderr
    assert dry.returncode == 3, dry.stderr
    planned = json.loads(dry.stdout)
    assert (planned["served_context"], planned["window"]) == (256, "refused")
    assert planned["requests"] == 2 * 5 * 4  # two lengths x 5 depths x 4 trials, no loss (this build ignores echo)
