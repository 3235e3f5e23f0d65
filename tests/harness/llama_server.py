"""Start and stop llama.cpp's servers on 127.0.0.1 (a helper module, not a test).

Two servers run the same llama.cpp: llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``,
from the engines extra) and llama.cpp's own ``llama-server`` binary (built from the llama.cpp sources vendored in
the llama-cpp-python sdist; CI builds it and names it in ``POSENC_LLAMA_SERVER``, else ``llama-server`` on PATH).
Server commands come from ``posenc scale --engine llama-cpp-python`` / ``--engine llama.cpp`` (or plain flags for
an unscaled run), so the tests serve exactly what posenc tells users to run. One thread, quiet; the port is a free
one picked by the OS; :func:`serve` waits until ``/v1/models`` answers and kills the process group on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "passkey" / "passkey.gguf"


def available() -> bool:
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError:
        return False
    return True


def scale_command(*args: str, model: Path = FIXTURE) -> list[str]:
    """``posenc scale ARGS --engine llama-cpp-python`` for ``model``, as an argv list."""
    out = subprocess.run([sys.executable, "-m", "posenc_cli", "scale", *args, "--engine", "llama-cpp-python"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    argv = shlex.split(out.stdout.strip())
    assert argv[:3] == ["python", "-m", "llama_cpp.server"], argv
    argv[0] = sys.executable
    argv[argv.index("--model") + 1] = str(model)
    return argv


def llama_server_binary() -> str | None:
    """llama.cpp's ``llama-server``: ``$POSENC_LLAMA_SERVER``, else the one on PATH, else None."""
    named = os.environ.get("POSENC_LLAMA_SERVER")
    if named:
        if not os.access(named, os.X_OK):  # named and missing is a broken setup, not a reason to skip
            raise RuntimeError(f"POSENC_LLAMA_SERVER={named} is not an executable")
        return named
    return shutil.which("llama-server")


def native_command(*flags: str, model: Path = FIXTURE) -> list[str]:
    """``llama-server -m MODEL FLAGS``; flags as ``posenc scale --engine llama.cpp`` prints them."""
    binary = llama_server_binary()
    assert binary is not None
    return [binary, "-m", str(model), "-t", "1", *flags]


def native_scale_flags(*args: str, model: Path = FIXTURE) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "posenc_cli", "scale", *args, "--config", str(model), "--engine",
                          "llama.cpp"], capture_output=True, text=True, check=True, cwd=REPO)
    return shlex.split(out.stdout.strip())


def plain_command(n_ctx: int, model: Path = FIXTURE) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--rope_scaling_type", "0",
            "--n_ctx", str(n_ctx)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(argv: list[str], *, timeout: float = 60.0, threads: str = "1") -> Iterator[str]:
    """Run the server command ``argv`` on a free loopback port; yields its base URL (``http://127.0.0.1:P/v1``).

    ``threads``: llama.cpp's threads (one in the tests, which share the machine)."""
    port = _free_port()
    if Path(argv[0]).name.startswith("llama-server"):
        full = [*argv, "--host", "127.0.0.1", "--port", str(port), "--log-disable"]
    else:
        full = [*argv, "--host", "127.0.0.1", "--port", str(port), "--n_threads", threads, "--n_threads_batch",
                threads, "--seed", "0", "--verbose", "False"]
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    proc = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{Path(argv[0]).name} exited {proc.returncode}: "
                                   f"{proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{Path(argv[0]).name} did not start in time") from None
                time.sleep(0.2)
        yield url + "/v1"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
