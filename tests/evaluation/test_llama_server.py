"""posenc eval and probe against llama.cpp's own llama-server, serving the committed passkey model.

What the issue reported about llama-server, checked on the real binary (llama.cpp as vendored by
llama-cpp-python 0.3.36, commit 0c1e570): each slot's context is capped at the model's training context unless
YaRN flags are given, ``-np N`` splits the context between slots, ``/tokenize`` leaves the BOS out, and ``echo`` gives
no prompt log-probabilities (so the loss is reported unavailable, never estimated). CI builds the binary from the
llama-cpp-python sdist and names it in ``POSENC_LLAMA_SERVER``; elsewhere ``llama-server`` on PATH is used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import llama_server
import pytest

pytestmark = pytest.mark.skipif(llama_server.llama_server_binary() is None,
                                reason="needs llama.cpp's llama-server (POSENC_LLAMA_SERVER or on PATH)")


def posenc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posenc_cli", *args], capture_output=True, text=True, timeout=600)


def probe(url: str, *extra: str, code: int = 0) -> dict[str, Any]:
    proc = posenc("eval", "probe", url, "--json", *extra)
    assert proc.returncode == code, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_each_slot_is_capped_at_the_training_context_without_yarn_flags() -> None:
    with llama_server.serve(llama_server.native_command("--ctx-size", "1024", "-np", "1")) as url:
        caps = probe(url, "--expect-ctx", "1024", code=1)
    assert caps["engine"] == "llama-server"
    assert caps["served_context"] == 256 and caps["context_source"] == "/props n_ctx per slot (1 slots)"
    assert caps["expected_context"]["served"] is False


def test_yarn_flags_from_posenc_scale_lift_the_cap_and_np_splits_the_context() -> None:
    flags = llama_server.native_scale_flags("yarn", "--factor", "4")  # ... --ctx-size 1024
    with llama_server.serve(llama_server.native_command(*flags, "-np", "1")) as url:
        one = probe(url, "--expect-ctx", "1024")
    with llama_server.serve(llama_server.native_command(*flags, "-np", "2")) as url:
        two = probe(url, "--expect-ctx", "1024", code=1)
    assert one["served_context"] == 1024 and one["expected_context"]["prompt_tokens"] == 1023
    assert two["served_context"] == 512 and "(2 slots)" in two["context_source"]


def test_tokenize_without_bos_is_calibrated_and_no_loss_is_faked(tmp_path: Path) -> None:
    flags = llama_server.native_scale_flags("yarn", "--factor", "4")
    with llama_server.serve(llama_server.native_command(*flags, "-np", "1")) as url:
        caps = probe(url)
        proc = posenc("eval", "run", url, "--lengths", "64,256,1024", "--depths", "0,0.5,1", "--trials", "2",
                      "--out", str(tmp_path / "run"), "--json")
    assert caps["tokenize"] == "llama-server" and caps["tokenize_offset"] == 1
    assert caps["prompt_logprobs"] is None
    assert caps["parameters"]["echo"].startswith(("ignored", "rejected"))
    summary = json.loads(proc.stdout)
    assert summary["loss"]["available"] is False
    assert summary["mismatched_lengths"] == []
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"needle"}
    assert all(r["served_tokens"] == r["tokens"] == r["length"] - 6 for r in records)


def test_llama_server_and_llama_cpp_python_agree_on_the_same_weights(tmp_path: Path) -> None:
    """The same GGUF and the same YaRN x4 from posenc scale on both servers: the same answers, cell by cell.

    Both run llama.cpp with a float16 KV cache, but batch differently; greedy answers may flip where the two top
    tokens are within rounding. Measured: 18 of 18 answers agree (6 differed while llama-cpp-python applied its
    default repeat_penalty of 1.1); the test allows 3.
    """
    grid = ("--lengths", "64,256,1024", "--depths", "0,0.5,1", "--trials", "2")
    flags = llama_server.native_scale_flags("yarn", "--factor", "4")
    with llama_server.serve(llama_server.native_command(*flags, "-np", "1")) as url:
        posenc("eval", "run", url, *grid, "--out", str(tmp_path / "native"), "--label", "llama-server")
    with llama_server.serve(llama_server.scale_command("yarn", "--factor", "4", "--config",
                                                      str(llama_server.FIXTURE))) as url:
        posenc("eval", "run", url, *grid, "--out", str(tmp_path / "python"), "--label", "llama-cpp-python")

    def replies(folder: Path) -> dict[str, str]:
        lines = (folder / "results.jsonl").read_text().splitlines()
        return {r["cell"]: r["reply"] for r in map(json.loads, lines) if r["kind"] == "needle"}

    native, python = replies(tmp_path / "native"), replies(tmp_path / "python")
    assert native.keys() == python.keys() and len(native) == 18
    differ = [cell for cell in native if native[cell].strip() != python[cell].strip()]
    assert len(differ) <= 3, differ
    compared = posenc("eval", "compare", str(tmp_path / "native"), str(tmp_path / "python"), "--json")
    rows = json.loads(compared.stdout)["by_length"]
    assert [set(row) for row in rows] == [{"length", "llama-server", "llama-cpp-python", "versus"}] * 3
    # the same llama.cpp behind two servers: no length's difference is beyond its 95% interval
    assert not any(row["versus"]["llama-cpp-python"]["separated"] for row in rows)
