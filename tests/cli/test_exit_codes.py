"""Exit codes as a shell sees them (real processes): a reader that closes stdout early is a quiet exit 0, never a
traceback or a "failed check"; a server that cannot be reached is exit 3 ("could not run"), not 2 ("bad input").
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from posenc_cli.errors import CouldNotRun, ExitCode, PosencError
from posenc_cli.evaluation.client import ServerError

POSENC = [sys.executable, "-m", "posenc_cli"]


def closed_early(argv: list[str]) -> tuple[int, str]:
    """Run ``posenc ARGV`` with its stdout a pipe whose only reader closes before anything is written.

    Closing before the first write (the child spends its start-up importing) makes every write meet the closed
    pipe, whatever the output's size; `| head -1` only does so once the pipe buffer fills.
    """
    with subprocess.Popen([*POSENC, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        return proc.wait(timeout=120), stderr


@pytest.mark.parametrize("argv", [["verify"], ["verify", "--json"], ["--version"],
                                  ["pick", "--ctx", "128k", "--head-dim", "128"]],
                         ids=["verify", "verify-json", "version", "pick"])
def test_a_reader_closing_stdout_early_is_a_quiet_exit_0(argv: list[str]) -> None:
    code, stderr = closed_early(argv)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr
    assert stderr == ""
    assert code == ExitCode.OK


def test_head_reads_the_first_line_and_verify_still_exits_0() -> None:
    """The shell pipeline itself: `posenc verify | head -1`, each side's status."""
    proc = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" verify | head -1; echo "status ${PIPESTATUS[*]}"',
                           "sh", *POSENC], capture_output=True, text=True, timeout=120)
    first, status = proc.stdout.splitlines()
    assert "posenc verify" in first
    assert status == "status 0 0", proc.stderr
    assert "Traceback" not in proc.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("command", ["probe", "run"])
def test_an_unreachable_server_is_exit_3_with_one_error_line(tmp_path: Path, command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    extra = ["--lengths", "64", "--out", str(tmp_path / "run")] if command == "run" else []
    proc = subprocess.run([*POSENC, "eval", command, url, "--retries", "0", *extra], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == ExitCode.COULD_NOT_RUN == 3, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and url.removesuffix("/v1") in lines[0], lines
    assert "connection refused" in lines[0]


def test_could_not_run_is_still_a_posenc_error() -> None:
    """Code that catches PosencError (one error line) keeps catching server failures."""
    assert issubclass(ServerError, CouldNotRun) and issubclass(CouldNotRun, PosencError)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3]
