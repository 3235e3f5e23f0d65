"""`posenc eval` through the real CLI against tests/harness/fake_server.py: results on disk, resume, refusals, the
faults a
served model shows (refused connections, HTTP 500, cut bodies, dropped connections, deaths, slow answers), echo
support, engine detection, the API key, the figures and bad input.

The fake server's model answers a passkey prompt correctly when the needle starts at most ``reach`` tokens before
the prompt's end, so every expected pass is computed here from where the needle sits in the rebuilt prompt.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_could_not_run, assert_usage_error, ok, run, write_json
from fake_server import FakeServer, Script

from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.client import Client, ServerError
from posenc_cli.evaluation.plan import DEFAULT_DEPTHS, Cell, from_lengths
from posenc_cli.evaluation.run import cell_prompt, read_results
from posenc_cli.evaluation.templates import load_template

LENGTHS = (64, 128, 256)
TRIALS = 2
# --loss: the fake server answers as llama-cpp-python, whose loss a run leaves out unless a test needs it or asked
GRID = ("--lengths", ",".join(map(str, LENGTHS)), "--trials", str(TRIALS), "--loss")
REACH = 100  # the fake model finds needles at most this many tokens before the end
PASSKEY = load_template("passkey")
PLAN = from_lengths(list(LENGTHS), PASSKEY, trials=TRIALS)
NEEDLE_CELLS = {c.key for c in PLAN.cells(with_loss=False)}
ALL_CELLS = {c.key for c in PLAN.cells(with_loss=True)}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STABLE = ("cell", "kind", "length", "depth", "trial", "tokens", "reached_depth", "key", "reply", "passed",
          "served_tokens", "length_ok", "logprobs")


def lines(folder: Path) -> list[str]:
    """results.jsonl's lines; every one must be complete, valid JSON."""
    text = (folder / "results.jsonl").read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n")
    out = text.splitlines()
    for line in out:
        json.loads(line)
    return out


def records(folder: Path) -> dict[str, dict[str, Any]]:
    """The finished cells of a run folder by key, each cell written once."""
    found: dict[str, dict[str, Any]] = {}
    for line in lines(folder):
        record = json.loads(line)
        assert record["cell"] not in found, record["cell"]
        found[record["cell"]] = record
    return found


def stable(folder: Path) -> dict[str, dict[str, Any]]:
    """The fields of each cell that do not depend on timing."""
    return {k: {f: r.get(f) for f in STABLE} for k, r in records(folder).items()}


def generated(record: dict[str, Any]) -> int:
    """Tokens a cell leaves for the answer: its prompt is its length minus these."""
    return PASSKEY.max_tokens if record["kind"] == "needle" else 1


def needle_distance(record: dict[str, Any]) -> int:
    """Tokens from the needle's start to the prompt's end, in the prompt the cell was built from."""
    cell = Cell(record["kind"], record["length"], record["depth"], record["trial"])
    prompt = cell_prompt(PASSKEY, cell, bytevocab.count)
    assert prompt.tokens == record["tokens"] and prompt.key == record["key"]
    assert prompt.text[prompt.needle_char:].startswith(f"the key is {prompt.key}. ")
    return len(bytevocab.encode(prompt.text[prompt.needle_char:], bos=False))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def probe_json(url: str, *args: str, code: int = 0) -> dict[str, Any]:
    result = run("eval", "probe", url, "--json", *args)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@functools.cache
def probe_completions() -> int:
    """Completions a probe sends before a run's first cell (measured on a fresh server, not assumed)."""
    script = Script()
    with FakeServer(script) as server:
        probe_json(server.url)
    assert script.completions > 0
    return script.completions


def run_grid(url: str, out: Path, *extra: str) -> Any:
    return run("eval", "run", url, *GRID, "--out", str(out), *extra)


# --- a clean run -------------------------------------------------------------------------------------------------


def test_clean_run_records_every_cell_and_the_reach_rule(tmp_path: Path) -> None:
    script = Script(reach=REACH)
    out = tmp_path / "run"
    with FakeServer(script) as server:
        result = run_grid(server.url, out, "--json")
    assert result.exit_code == 3, (result.stdout, result.stderr)  # no test in a bare --lengths plan: "not run"
    assert result.stderr == ""
    summary = json.loads(result.stdout)
    assert summary["result"] == "not run" and summary["tests"] == []

    found = records(out)
    assert set(found) == ALL_CELLS
    needles = [r for r in found.values() if r["kind"] == "needle"]
    losses = [r for r in found.values() if r["kind"] == "loss"]
    assert len(needles) == len(DEFAULT_DEPTHS) * len(LENGTHS) * TRIALS
    assert len(losses) == PLAN.loss_trials >= 1
    assert script.completions == probe_completions() + len(found)
    for record in found.values():
        assert record["tokens"] == record["length"] - generated(record) == record["served_tokens"], record["cell"]
        assert record["length_ok"] is True
    for record in losses:
        assert record["length"] == max(LENGTHS)
        assert len(record["logprobs"]) == record["tokens"]  # one per prompt token, BOS included

    rates = {}
    for n in LENGTHS:
        row = [r for r in needles if r["length"] == n]
        for record in row:
            assert record["passed"] is (needle_distance(record) <= REACH), record["cell"]
        rates[n] = sum(needle_distance(r) <= REACH for r in row) / len(row)
        assert summary["by_length"][str(n)]["pass_rate"] == pytest.approx(rates[n])
    assert 0 < rates[max(LENGTHS)] < 1  # the reach rule splits the longest length: the threshold test below bites

    # --pass-rate judges the longest length: at the measured rate it passes, just above it fails
    with FakeServer(Script(reach=REACH)) as server:
        passing = ok(run_grid(server.url, tmp_path / "pass", "--pass-rate", str(rates[max(LENGTHS)]), "--json"))
        failing = run_grid(server.url, tmp_path / "fail", "--pass-rate", str(rates[max(LENGTHS)] + 0.05), "--json")
    assert json.loads(passing.stdout)["result"] == "pass"
    assert failing.exit_code == 1, (failing.stdout, failing.stderr)
    assert json.loads(failing.stdout)["tests"][0]["result"] == "fail"
    ok(run("eval", "report", str(tmp_path / "pass"), "--json"))
    again = run("eval", "report", str(tmp_path / "fail"), "--json")
    assert again.exit_code == 1
    assert json.loads(again.stdout)["tests"][0]["measured"] == pytest.approx(rates[max(LENGTHS)])


# --- resume and refusals -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the grid (with a trivial pass-rate test, so a finished run exits 0)."""
    out = tmp_path_factory.mktemp("clean") / "run"
    with FakeServer(Script(reach=REACH)) as server:
        ok(run_grid(server.url, out, "--pass-rate", "0"))
    return out


def test_a_run_that_dies_resumes_with_only_the_missing_cells(tmp_path: Path, clean_run: Path) -> None:
    done = 7
    out = tmp_path / "run"
    with FakeServer(Script(reach=REACH, die_after=probe_completions() + done)) as server:
        result = run_grid(server.url, out, "--pass-rate", "0", "--retries", "1")
    assert_could_not_run(result, "/v1/completions")
    first = lines(out)
    assert len(first) == done
    assert all(json.loads(line)["cell"] in ALL_CELLS for line in first)

    script = Script(reach=REACH)
    with FakeServer(script) as server:
        result = ok(run_grid(server.url, out, "--pass-rate", "0"))
    assert f"{done} cells already done, {len(ALL_CELLS) - done} to run" in result.stderr
    assert script.completions == probe_completions() + len(ALL_CELLS) - done
    assert lines(out)[:done] == first  # appended, never rewritten
    assert stable(out) == stable(clean_run)

    script = Script(reach=REACH)
    with FakeServer(script) as server:
        ok(run_grid(server.url, out, "--pass-rate", "0"))
    assert script.completions == probe_completions()  # nothing left to send


def test_a_torn_last_line_is_ignored_and_its_cell_sent_again(tmp_path: Path, clean_run: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_bytes((clean_run / "manifest.json").read_bytes())
    whole = (clean_run / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    kept = 5
    torn = whole[kept][: len(whole[kept]) // 2]
    (out / "results.jsonl").write_text("".join(whole[:kept]) + torn, encoding="utf-8")

    script = Script(reach=REACH)
    with FakeServer(script) as server:
        ok(run_grid(server.url, out, "--pass-rate", "0"))
    assert script.completions == probe_completions() + len(ALL_CELLS) - kept
    text = (out / "results.jsonl").read_text(encoding="utf-8")
    assert text.startswith("".join(whole[:kept]) + torn)
    valid = stable(clean_run)
    resumed = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            assert line == torn  # the torn fragment stays on a line of its own and is skipped
            continue
        resumed[record["cell"]] = {f: record.get(f) for f in STABLE}
    assert resumed == valid

    script = Script(reach=REACH)
    with FakeServer(script) as server:
        ok(run_grid(server.url, out, "--pass-rate", "0"))
    assert script.completions == probe_completions()  # the re-sent cell's line was kept


def test_another_plan_in_the_same_folder_is_refused(tmp_path: Path, clean_run: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    for name in ("manifest.json", "results.jsonl"):
        (out / name).write_bytes((clean_run / name).read_bytes())
    before = {name: (out / name).read_bytes() for name in ("manifest.json", "results.jsonl")}
    script = Script(reach=REACH)
    with FakeServer(script) as server:
        result = run("eval", "run", server.url, "--lengths", "64,128", "--trials", str(TRIALS), "--pass-rate", "0",
                      "--out", str(out))
    assert_usage_error(result, "another plan", str(out))
    assert {name: (out / name).read_bytes() for name in before} == before
    assert script.completions == probe_completions()  # no cell was sent


# --- one process per run folder -----------------------------------------------------------------------------------


def start_run(url: str, out: Path) -> subprocess.Popen[str]:
    """`posenc eval run` in its own process (the lock is per process: in-process runs would share it)."""
    return subprocess.Popen([sys.executable, "-m", "posenc_cli", "eval", "run", url, *GRID, "--pass-rate", "0",
                             "--retries", "0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_lines(out: Path, proc: subprocess.Popen[str], n: int = 1) -> None:
    """Until ``proc`` has appended ``n`` results: past the manifest, so it holds the folder."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        path = out / "results.jsonl"
        if path.is_file() and path.read_text(encoding="utf-8").count("\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the first run wrote no result in 60 s")


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # the holder's server answers slowly, so it is still sending cells when the second process arrives
    probes = probe_completions()
    fast_script = Script(reach=REACH)
    with FakeServer(Script(reach=REACH, delay=0.25)) as slow, FakeServer(fast_script) as fast:
        first = start_run(slow.url, out)
        try:
            wait_for_lines(out, first)
            second = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", fast.url, *GRID,
                                     "--pass-rate", "0", "--out", str(out)], capture_output=True, text=True,
                                    timeout=120)
            assert first.poll() is None  # the refusal below happened while the first still held the folder
        finally:
            stdout, stderr = first.communicate(timeout=120)
    assert second.returncode == 2, (second.stdout, second.stderr)
    assert second.stdout == "" and "Traceback" not in second.stderr
    assert second.stderr.splitlines() == [f"error: --out {out}: process {first.pid} is using this folder; wait for "
                                          "it to finish or give another --out folder"]
    assert first.returncode == 0, stderr
    assert set(records(out)) == ALL_CELLS  # every cell exactly once: the second appended nothing
    assert fast_script.completions == probes  # and sent nothing past its probe


def test_a_killed_run_leaves_no_lock_that_blocks_the_rerun(tmp_path: Path, clean_run: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(Script(reach=REACH, delay=0.25)) as slow:
        holder = start_run(slow.url, out)
        try:
            wait_for_lines(out, holder, 2)
        finally:
            holder.kill()  # SIGKILL: no handler, no cleanup, the lock file stays behind
            holder.communicate(timeout=60)
    assert holder.returncode == -9
    assert (out / ".posenc.lock").read_text().strip() == str(holder.pid)
    done = len({r["cell"] for r in read_results(out)})
    assert 2 <= done < len(ALL_CELLS)
    script = Script(reach=REACH)
    with FakeServer(script) as server:
        result = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", server.url, *GRID,
                                 "--pass-rate", "0", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"{done} cells already done" in result.stderr
    assert stable(out) == stable(clean_run)


# --- faults ------------------------------------------------------------------------------------------------------


def test_connection_refused_is_one_error_line_and_fast(tmp_path: Path) -> None:
    out = tmp_path / "run"
    started = time.perf_counter()
    result = run("eval", "run", f"http://127.0.0.1:{free_port()}/v1", "--lengths", "64", "--out", str(out),
                 "--retries", "1")
    assert time.perf_counter() - started < 10
    assert_could_not_run(result, "connection refused", "after 2 attempts")
    assert not out.exists()


def test_http_500s_are_retried(tmp_path: Path, clean_run: Path) -> None:
    script = Script(reach=REACH, fail_first=2)
    with FakeServer(script) as server:
        ok(run_grid(server.url, tmp_path / "run", "--pass-rate", "0", "--retries", "3"))
    assert script.counts["all"] == script.completions + 2
    assert stable(tmp_path / "run") == stable(clean_run)

    script = Script(reach=REACH, fail_first=2)
    with FakeServer(script) as server:
        result = run_grid(server.url, tmp_path / "short", "--pass-rate", "0", "--retries", "1")
    assert_could_not_run(result, "HTTP 500", "scripted failure", "after 2 attempts")
    assert script.completions == 0


@pytest.mark.parametrize("fault", ["truncate_first", "drop_first"])
def test_a_cut_body_or_a_dropped_connection_is_retried(tmp_path: Path, clean_run: Path, fault: str) -> None:
    script = Script(reach=REACH)
    setattr(script, fault, 1)
    with FakeServer(script) as server:
        ok(run_grid(server.url, tmp_path / "run", "--pass-rate", "0", "--retries", "1"))
    assert script.counts["all"] == script.completions + 1
    assert stable(tmp_path / "run") == stable(clean_run)

    script = Script(reach=REACH)
    setattr(script, fault, 2)
    with FakeServer(script) as server:
        result = run_grid(server.url, tmp_path / "short", "--pass-rate", "0", "--retries", "1")
    assert_could_not_run(result, "not complete JSON" if fault == "truncate_first" else "connection dropped")


def test_client_timeout_after_retries() -> None:
    script = Script(delay=0.4)
    with FakeServer(script) as server:
        waits: list[float] = []
        client = Client(server.url, timeout=0.05, retries=2, sleep=waits.append)
        with pytest.raises(ServerError, match="after 3 attempts") as caught:
            client.complete("tiny", "the key is 12345. what is the key? the key is ", max_tokens=6)
        assert "0.05 s" in str(caught.value) or "timed out" in str(caught.value)
        assert client.requests == 3
        assert waits == [0.5, 1.0]  # exponential back-off, injected so it costs nothing here
        patient = Client(server.url, timeout=5, retries=0, sleep=waits.append)
        assert patient.complete("tiny", "the key is 12345. what is the key? the key is ", max_tokens=6).text == "12345"


def test_echo_rejected_means_no_loss_and_a_regression_test_not_run(tmp_path: Path) -> None:
    pick = write_json(tmp_path, {"tests": [{"kind": "niah", "length": 64, "pass_rate": 0.0},
                                           {"kind": "regression", "length": 64, "margin": 0.02}]}, "pick.json")
    script = Script(echo="reject")
    with FakeServer(script) as server:
        caps = probe_json(server.url)
        human = ok(run("eval", "probe", server.url))
        result = run("eval", "run", server.url, "--plan", pick, "--template", "passkey", "--trials", "1",
                     "--out", str(tmp_path / "run"))
    assert caps["prompt_logprobs"] is None
    assert caps["parameters"]["echo"].startswith("rejected")
    assert "unavailable" in human.stdout and "rejected" in human.stdout
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "per-position loss unavailable" in result.stderr
    found = records(tmp_path / "run")
    assert found and all(r["kind"] == "needle" for r in found.values())

    report = run("eval", "report", str(tmp_path / "run"), "--json")
    assert report.exit_code == 3
    summary = json.loads(report.stdout)
    assert summary["loss"]["available"] is False
    verdicts = {t["kind"]: t["result"] for t in summary["tests"]}
    assert verdicts == {"niah": "pass", "regression": "not run"}
    assert summary["result"] == "not run"
    text = run("eval", "report", str(tmp_path / "run"))
    assert text.exit_code == 3 and "per-position loss: unavailable" in text.stdout
    assert_usage_error(run("eval", "report", str(tmp_path / "run"), "--loss-png", str(tmp_path / "loss.png")),
                       "--loss-png", "no run has prompt log-probabilities")
    assert not (tmp_path / "loss.png").exists()


def test_echo_ignored_is_reported_as_ignored() -> None:
    with FakeServer(Script(echo="ignore")) as server:
        caps = probe_json(server.url)
    assert caps["prompt_logprobs"] is None
    assert caps["parameters"]["echo"].startswith("ignored")


def test_concurrency_gives_the_same_cells_and_verdicts(tmp_path: Path) -> None:
    verdicts = {}
    for n in (1, 4):
        with FakeServer(Script(reach=REACH)) as server:
            ok(run_grid(server.url, tmp_path / f"c{n}", "--pass-rate", "0", "--concurrency", str(n)))
        found = records(tmp_path / f"c{n}")
        assert set(found) == ALL_CELLS
        verdicts[n] = {k: r.get("passed") for k, r in found.items()}
    assert verdicts[1] == verdicts[4]


def test_api_key_is_sent_and_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-posenc-test-0123456789abcdef"
    monkeypatch.setenv("POSENC_EVAL_TEST_KEY", secret)
    script = Script(reach=REACH)
    with FakeServer(script) as server:
        results = [ok(run_grid(server.url, tmp_path / "run", "--pass-rate", "0", "--api-key-env",
                               "POSENC_EVAL_TEST_KEY", "--json")),
                   ok(run("eval", "probe", server.url, "--api-key-env", "POSENC_EVAL_TEST_KEY", "--json"))]
    assert script.authorization and set(script.authorization) == {f"Bearer {secret}"}
    for name in ("manifest.json", "results.jsonl"):
        assert secret not in (tmp_path / "run" / name).read_text(encoding="utf-8")
    for result in results:
        assert secret not in result.stdout + result.stderr

    monkeypatch.delenv("POSENC_EVAL_TEST_KEY")
    script = Script()
    with FakeServer(script) as server:
        ok(run("eval", "probe", server.url, "--api-key-env", "POSENC_EVAL_TEST_KEY"))
    assert set(script.authorization) == {None}


# --- engine styles -----------------------------------------------------------------------------------------------


def test_vllm_style_is_detected_and_its_context_checked() -> None:
    with FakeServer(Script(style="vllm", max_model_len=512)) as server:
        caps = probe_json(server.url)
        served = probe_json(server.url, "--expect-ctx", "512")  # exactly the window: prompt 511 + 1 generated
        refused = probe_json(server.url, "--expect-ctx", "513", code=1)
    assert caps["engine"] == "vllm"
    assert caps["served_context"] == 512 and "max_model_len" in caps["context_source"]
    assert caps["tokenize"] == "vllm" and caps["tokenize_offset"] == 0
    assert caps["prompt_logprobs"] == "echo"
    assert served["expected_context"]["served"] is True
    assert served["expected_context"]["prompt_tokens"] == 511
    assert refused["expected_context"]["served"] is False
    assert "context window of 512" in refused["expected_context"]["message"]


def test_llama_server_style_is_detected_and_its_bos_calibrated(tmp_path: Path) -> None:
    with FakeServer(Script(style="llama-server", max_model_len=300)) as server:
        caps = probe_json(server.url)
        served = probe_json(server.url, "--expect-ctx", "200")
        refused = probe_json(server.url, "--expect-ctx", "400", code=1)
        ok(run("eval", "run", server.url, "--lengths", "64,128", "--trials", "1", "--pass-rate", "0",
               "--out", str(tmp_path / "run")))
    assert caps["engine"] == "llama-server"
    assert caps["tokenize"] == "llama-server"
    assert caps["tokenize_offset"] == 1  # /tokenize leaves the BOS out; usage.prompt_tokens counts it
    assert caps["served_context"] == 300 and "/props n_ctx per slot" in caps["context_source"]
    assert served["expected_context"] == {"tokens": 200, "reported": 300, "built_tokens": 199, "served": True,
                                          "prompt_tokens": 199}
    assert refused["expected_context"]["served"] is False
    for record in records(tmp_path / "run").values():
        assert record["tokens"] == record["length"] - generated(record) == record["served_tokens"], record["cell"]


# --- report and compare ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    out = []
    for label, reach in (("alpha", REACH), ("beta", 10**9)):
        with FakeServer(Script(reach=reach)) as server:
            ok(run_grid(server.url, base / label, "--pass-rate", "0", "--label", label))
        out.append(base / label)
    return out[0], out[1]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > len(PNG_SIGNATURE) and data.startswith(PNG_SIGNATURE), path


def test_report_and_compare_write_pngs(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    alpha, beta = two_runs
    result = ok(run("eval", "report", str(alpha), "--png", str(tmp_path / "a.png"), "--loss-png",
                    str(tmp_path / "a-loss.png")))
    assert "alpha" in result.stdout
    assert_png(tmp_path / "a.png")
    assert_png(tmp_path / "a-loss.png")

    result = ok(run("eval", "compare", str(alpha), str(beta), "--png", str(tmp_path / "c.png"), "--loss-png",
                    str(tmp_path / "c-loss.png")))
    assert "alpha" in result.stdout and "beta" in result.stdout
    assert_png(tmp_path / "c.png")
    assert_png(tmp_path / "c-loss.png")
    data = json.loads(ok(run("eval", "compare", str(alpha), str(beta), "--json")).stdout)
    assert [r["label"] for r in data["runs"]] == ["alpha", "beta"]
    longest = next(row for row in data["by_length"] if row["length"] == max(LENGTHS))
    assert longest["alpha"] < longest["beta"] == 1.0

    assert_usage_error(run("eval", "compare", str(alpha)), "two or more", "got 1")


def test_a_png_on_stdout_is_refused_it_holds_the_summary(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    alpha, beta = two_runs
    assert_usage_error(run("eval", "report", str(alpha), "--png", "-"), "--png -", "stdout")
    assert_usage_error(run("eval", "compare", str(alpha), str(beta), "--loss-png", "-", "--json"),
                       "--loss-png -", "stdout")
    link = tmp_path / "null.png"
    link.symlink_to(os.devnull)
    result = ok(run("eval", "report", str(alpha), "--png", str(link)))  # a device is written into, not replaced
    assert f"wrote {link}" in result.stderr and link.is_symlink() and Path(os.devnull).is_char_device()


def test_matplotlib_loads_only_for_a_png(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from posenc_cli.cli import app\n"
        "r = CliRunner().invoke(app, ['eval', 'report', sys.argv[1]])\n"
        "before = 'matplotlib' in sys.modules\n"
        "r2 = CliRunner().invoke(app, ['eval', 'report', sys.argv[1], '--png', sys.argv[2]])\n"
        "print(r.exit_code, before, r2.exit_code, 'matplotlib' in sys.modules)\n"
    )
    png = tmp_path / "h.png"
    done = subprocess.run([sys.executable, "-c", code, str(two_runs[0]), str(png)], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["0", "False", "0", "True"], done.stderr
    assert_png(png)


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Any:
    with FakeServer(Script()) as fake:
        yield fake


@pytest.mark.parametrize(("args", "needles"), [
    (("--lengths", "4"), ("--lengths", "4")),
    (("--lengths", "64", "--depths", "2"), ("--depths", "2")),
    (("--lengths", "64", "--depths", "x"), ("--depths", "'x'")),
    (("--lengths", "64", "--trials", "0"), ("--trials 0",)),
    (("--lengths", "64", "--concurrency", "0"), ("--concurrency 0",)),
    (("--lengths", "64", "--timeout", "0"), ("--timeout 0",)),
    (("--lengths", "64", "--pass-rate", "1.5"), ("--pass-rate 1.5",)),
    (("--lengths", "64", "--template", "nosuch"), ("nosuch",)),
    (("--plan", "PLAN", "--lengths", "64"), ("--plan", "--lengths")),
    ((), ("exactly one of",)),
    (("--plan", "NOTJSON"), ("not valid JSON", "notjson.txt")),
])
def test_bad_run_input(tmp_path: Path, server: FakeServer, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    plan = write_json(tmp_path, {"tests": [{"kind": "niah", "length": 64, "pass_rate": 0.5}]}, "plan.json")
    (tmp_path / "notjson.txt").write_text("lengths: 64\n", encoding="utf-8")
    real = [plan if a == "PLAN" else str(tmp_path / "notjson.txt") if a == "NOTJSON" else a for a in args]
    out = tmp_path / "run"
    assert_usage_error(run("eval", "run", server.url, *real, "--out", str(out)), *needles)
    assert not out.exists()


def test_bad_url_and_missing_manifest(tmp_path: Path) -> None:
    assert_usage_error(run("eval", "run", "ftp://x", "--lengths", "64", "--out", str(tmp_path / "run")), "ftp://x")
    assert_usage_error(run("eval", "probe", "ftp://x"), "ftp://x")
    assert_usage_error(run("eval", "report", str(tmp_path)), str(tmp_path), "manifest.json")


# --- other engines and plan sources --------------------------------------------------------------------------------


def test_sglang_style_gives_the_loss_through_generate(tmp_path: Path) -> None:
    """SGLang's /generate (return_logprob, logprob_start_len 0) is used when echo gives no prompt logprobs."""
    with FakeServer(Script(style="sglang", echo="ignore", max_model_len=4096)) as server:
        caps = probe_json(server.url)
        ok(run("eval", "run", server.url, "--lengths", "64,256", "--depths", "0,1", "--trials", "1",
               "--pass-rate", "0", "--out", str(tmp_path / "run")))
    assert caps["engine"] == "sglang" and caps["served_context"] == 4096
    assert caps["prompt_logprobs"] == "sglang" and "ignored" in caps["parameters"]["echo"]
    losses = [r for r in records(tmp_path / "run").values() if r["kind"] == "loss"]
    assert losses and all(len(r["logprobs"]) == r["served_tokens"] == r["tokens"] for r in losses)
    summary = json.loads(run("eval", "report", str(tmp_path / "run"), "--json").stdout)
    assert summary["loss"]["available"] is True
    # the scripted model's loss is 1 nat per token up to position 100, then 1 + log2(position / 100)
    first = summary["loss"]["curve"][0]
    assert first["loss"] == pytest.approx(1.0)


def test_plan_from_a_model_config_through_the_cli(tmp_path: Path) -> None:
    config = write_json(tmp_path, {
        "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 8192,
        "rope_theta": 10000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 2048}})
    with FakeServer(Script()) as server:
        result = run("eval", "run", server.url, "--config", config, "--template", "passkey", "--depths", "0.5",
                     "--trials", "1", "--out", str(tmp_path / "run"), "--json")
    assert result.exit_code == 3  # the regression test needs a baseline run: "not run"
    summary = json.loads(result.stdout)
    # YaRN ramp edge 2048/32, half the original, the original, the midpoint, the native window
    assert summary["lengths"] == [64, 1024, 2048, 4096, 8192]
    assert {(t["kind"], t["length"]) for t in summary["tests"]} == {("niah", 8192), ("regression", 1024)}


def test_plan_from_pick_on_stdin(tmp_path: Path) -> None:
    answer = ok(run("pick", "--ctx", "1k", "--trained-ctx", "256", "--json")).stdout
    with FakeServer(Script()) as server:
        result = run("eval", "run", server.url, "--plan", "-", "--template", "passkey", "--depths", "0",
                     "--trials", "1", "--out", str(tmp_path / "run"), "--json", input=answer)
    summary = json.loads(result.stdout)
    tests = {t["kind"]: t for t in json.loads(answer)["tests"] if t["kind"] != "text"}
    assert summary["tests"][0]["length"] == tests["niah"]["length"] == 1024
    assert max(summary["lengths"]) == 1024 and min(summary["lengths"]) == 128  # half the original 256


def test_a_length_shorter_than_the_template_is_refused_before_any_request(tmp_path: Path) -> None:
    script = Script()
    with FakeServer(script) as server:
        probe_requests = probe_completions()
        message = assert_usage_error(run("eval", "run", server.url, "--lengths", "40,256",
                                         "--out", str(tmp_path / "run")), "length 40", "passkey")
    assert "fixed text" in message
    assert script.completions == probe_requests  # nothing past the probe was sent


@pytest.mark.parametrize("tokenizer", ["bytes", "hf"])
def test_a_local_tokenizer_builds_the_same_prompts(tmp_path: Path, tokenizer: str) -> None:
    spec = tokenizer
    if tokenizer == "hf":
        pytest.importorskip("tokenizers")
        spec = str(Path(__file__).resolve().parents[1] / "fixtures" / "passkey" / "hf")
    with FakeServer(Script()) as server:
        ok_or_not_run = run("eval", "run", server.url, "--lengths", "64,128", "--depths", "0,1", "--trials", "1",
                            "--tokenizer", spec, "--out", str(tmp_path / "run"))
    assert ok_or_not_run.exit_code == 3 and "error" not in ok_or_not_run.stderr  # no test: "not run"
    for record in records(tmp_path / "run").values():
        assert record["length_ok"] is True and record["served_tokens"] == record["tokens"]
        assert record["tokens"] == record["length"] - generated(record)


def test_a_custom_template_file(tmp_path: Path) -> None:
    template = tmp_path / "mine.yaml"
    template.write_text("version: 1\nname: mine\nfiller: ['la la la. ']\nneedle: 'the key is {key}. '\n"
                        "question: 'so the key is '\nkey: {digits: 3}\nmatch: digits\nmax_tokens: 4\n")
    with FakeServer(Script()) as server:
        run("eval", "run", server.url, "--lengths", "64", "--depths", "0.5", "--trials", "2", "--template",
            str(template), "--out", str(tmp_path / "run"))
    needles = [r for r in records(tmp_path / "run").values() if r["kind"] == "needle"]
    assert len(needles) == 2 and all(len(r["key"]) == 3 and r["passed"] for r in needles)
    assert all(r["tokens"] == 64 - 4 for r in needles)


# --- what a review found: servers that answer oddly ----------------------------------------------------------------


def test_echo_answered_with_a_500_means_no_loss_not_a_failed_probe(tmp_path: Path) -> None:
    """Some llama-server versions answer echo with HTTP 500 ("Only no echo is supported")."""
    with FakeServer(Script(style="llama-server", echo="fail", max_model_len=4096)) as server:
        caps = probe_json(server.url)
        result = run("eval", "run", server.url, "--lengths", "64", "--depths", "0", "--trials", "1",
                     "--pass-rate", "0", "--out", str(tmp_path / "run"))
    assert caps["prompt_logprobs"] is None and caps["parameters"]["echo"].startswith("rejected: ")
    assert "HTTP 500" in caps["parameters"]["echo"]
    ok(result)
    assert {r["kind"] for r in records(tmp_path / "run").values()} == {"needle"}


def test_llama_server_tokenize_is_not_mistaken_for_vllm_s() -> None:
    """llama-server answers /tokenize without `content` with 200 and no tokens: never taken as a count."""
    with FakeServer(Script(style="llama-server", max_model_len=4096)) as server:
        caps = probe_json(server.url)
    assert caps["tokenize"] == "llama-server" and caps["tokenize_offset"] == 1


def test_prompts_past_the_served_context_are_refusals_and_the_run_goes_on(tmp_path: Path) -> None:
    # a server that enforces a window it does not report (llama-cpp-python's); one that reports it is refused
    # before sending (tests/evaluation/test_workflows.py)
    script = Script(max_model_len=200)
    with FakeServer(script) as server:
        result = run("eval", "run", server.url, "--lengths", "64,128,256", "--depths", "0,1", "--trials", "1",
                     "--pass-rate", "0.5", "--loss", "--out", str(tmp_path / "run"), "--json")
        assert result.exit_code == 1  # every prompt at 256 refused: 0 < 0.5
        summary = json.loads(result.stdout)
        assert summary["by_length"]["256"] == {"pass_rate": 0.0, "passed": 0, "interval": [0.0, 0.6576], "cells": 2,
                                               "planned": 2, "refused": 2, "mismatched": 0}
        assert summary["by_length"]["128"]["refused"] == 0
        assert "refused 2" in summary["tests"][0]["why"]
        # a rerun sends the refused cells again (the server may have been restarted with a longer context)
        before = script.completions
        run("eval", "run", server.url, "--lengths", "64,128,256", "--depths", "0,1", "--trials", "1",
            "--pass-rate", "0.5", "--loss", "--out", str(tmp_path / "run"))
    refused = [json.loads(line) for line in lines(tmp_path / "run") if '"refused"' in line]
    assert len(refused) == 2 * 3  # two needles and the loss request at 256, in each run (appended, never rewritten)
    assert script.completions - before == probe_completions()  # the refused three are the rerun's only cells


def test_the_api_key_does_not_follow_a_redirect(monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = Script()
    with FakeServer(elsewhere) as other:
        with FakeServer(Script(redirect_models=other.url.removesuffix("/v1") + "/v1/models")) as server:
            client = Client(server.url, api_key="sk-secret", retries=0)
            assert client.models()[0]["id"] == "tiny"  # followed to the other server
    assert elsewhere.authorization == [None]


def test_credentials_in_the_url_are_refused() -> None:
    assert_usage_error(run("eval", "probe", "http://user:sk-secret@127.0.0.1:9/v1"), "credentials")


def test_a_body_that_is_not_utf8_is_one_error_line(tmp_path: Path) -> None:
    with FakeServer(Script(bad_utf8=True)) as server:
        result = run("eval", "probe", server.url, "--retries", "0")
    assert_could_not_run(result, "not complete JSON")


def test_resuming_against_another_served_context_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(Script(style="vllm", max_model_len=4096)) as server:
        run("eval", "run", server.url, "--lengths", "64", "--depths", "0", "--trials", "1", "--out", str(out))
    before = (out / "results.jsonl").read_bytes()
    with FakeServer(Script(style="vllm", max_model_len=8192)) as server:
        message = assert_usage_error(run("eval", "run", server.url, "--lengths", "64", "--depths", "0", "--trials",
                                         "1", "--out", str(out)), "another setup")
    assert "served context 4096, now 8192" in message
    assert (out / "results.jsonl").read_bytes() == before


@pytest.mark.parametrize(("args", "needle"), [
    (("--depths", "0.5,0.5"), "appears twice"),
    (("--lengths", ","), "no length"),
])
def test_more_bad_grids(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    grid = {"--lengths": "64", "--depths": "0"} | dict(zip(args[::2], args[1::2], strict=True))
    flat = [x for kv in grid.items() for x in kv]
    with FakeServer(Script()) as server:
        assert_usage_error(run("eval", "run", server.url, *flat, "--out", str(tmp_path / "run")), needle)


def test_out_that_is_a_file_is_one_error_line(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("mine")
    with FakeServer(Script()) as server:
        assert_usage_error(run("eval", "run", server.url, "--lengths", "64", "--out", str(target)), "--out")
    assert target.read_text() == "mine"


def GRID_ARGS(url: str, out: Path) -> list[str]:  # noqa: N802 - reads like the GRID constant
    return ["eval", "run", url, *GRID, "--out", str(out)]


def test_a_baseline_from_another_template_is_refused(tmp_path: Path, clean_run: Path) -> None:
    other = tmp_path / "mine.yaml"
    other.write_text("version: 1\nname: mine\nfiller: ['la la la. ']\nneedle: 'the key is {key}. '\n"
                     "question: 'so the key is '\nkey: {digits: 3}\nmatch: digits\nmax_tokens: 4\n")
    with FakeServer(Script()) as server:
        run(*GRID_ARGS(server.url, tmp_path / "base"), "--template", str(other))
    assert_usage_error(run("eval", "report", str(clean_run), "--baseline", str(tmp_path / "base")),
                       "another template")


def test_an_unknown_model_id_names_what_the_server_serves(tmp_path: Path) -> None:
    with FakeServer(Script()) as server:
        assert_usage_error(run("eval", "run", server.url, "--lengths", "64", "--model", "nosuch",
                               "--out", str(tmp_path / "run")), "--model 'nosuch'", "tiny")
    assert not (tmp_path / "run").exists()
