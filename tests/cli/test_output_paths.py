"""Where `-o`, `--output`, `--in-place` and `--png` write: `-` is stdout, FIFOs and devices are written into (never
replaced), a symlink's target is replaced atomically with the link kept, directories and sockets are refused, and a
failed write leaves a regular file as it was.

These run as root in CI: the original bug (`-o /dev/stdout` replacing the /dev/stdout symlink with a regular file)
needed root to show, and the tests that touch /dev check that its entries are still what they were.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_could_not_run, assert_usage_error, ok, run, write_json

from posenc_cli.files import output_kind, write_output

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
QWEN = CORPUS / "qwen2.5-7b-instruct.json"
SCALE = ("scale", "yarn", "--config", str(QWEN), "--factor", "4")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and /dev are POSIX")


@functools.cache
def _patched_text() -> str:
    """What `scale ... -o FILE` writes, taken from a plain write to a new regular file."""
    with tempfile.TemporaryDirectory() as folder:
        ok(run(*SCALE, "-o", str(Path(folder) / "plain.json")))
        return (Path(folder) / "plain.json").read_text()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dash_is_stdout_and_no_file_named_dash(in_tmp: Path) -> None:
    result = ok(run(*SCALE, "-o", "-"))
    assert result.stdout == _patched_text()
    patched = json.loads(result.stdout)
    assert patched["rope_scaling"]["rope_type"] == "yarn" and patched["rope_scaling"]["factor"] == 4.0
    assert patched["architectures"] == ["Qwen2ForCausalLM"]  # the whole config, not just the scaling
    assert result.stderr.splitlines()[-1] == "wrote <stdout>"
    assert list(in_tmp.iterdir()) == []

    converted = ok(run("convert", str(QWEN), "--to", "v5", "-o", "-"))
    assert "rope_parameters" in json.loads(converted.stdout)
    assert list(in_tmp.iterdir()) == []


def test_plot_to_stdout_is_png_bytes(in_tmp: Path) -> None:
    result = ok(run("plot", "sinusoidal", "--max-len", "16", "--d-model", "8", "-o", "-"))
    assert result.stdout_bytes.startswith(PNG_SIGNATURE)
    assert list(in_tmp.iterdir()) == []
    assert_usage_error(run("plot", "sinusoidal", "-o", "-", "--json"), "-o -", "--json")


def test_in_place_on_stdin_is_refused(in_tmp: Path) -> None:
    assert_usage_error(run("scale", "yarn", "--config", "-", "--factor", "4", "--in-place",
                           input=QWEN.read_text()), "--in-place", "stdin")
    assert list(in_tmp.iterdir()) == []


@posix_only
def test_a_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            received.append(fh.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    result = ok(run(*SCALE, "-o", str(fifo)))
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert received == [_patched_text().encode()]
    assert result.stderr.splitlines()[-1] == f"wrote {fifo}"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left beside it


@posix_only
def test_a_plot_into_a_fifo_without_a_suffix_is_png(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    thread = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    thread.start()
    ok(run("plot", "sinusoidal", "--max-len", "16", "--d-model", "8", "-o", str(fifo)))
    thread.join(timeout=30)
    assert received and received[0].startswith(PNG_SIGNATURE)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@posix_only
def test_dev_null_and_a_symlink_to_it_stay_what_they_are(tmp_path: Path) -> None:
    # checked first: were this "file", the run below would replace /dev/null itself (as root)
    assert output_kind("/dev/null") == "stream"
    before = os.lstat("/dev/null")
    ok(run(*SCALE, "-o", "/dev/null"))
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    ok(run(*SCALE, "-o", str(link)))
    ok(run("plot", "sinusoidal", "--max-len", "16", "--d-model", "8", "-o", str(link)))
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_symlink_to_a_regular_file_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    target = real / "out.json"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "out.json"
    link.symlink_to(target)
    ok(run(*SCALE, "-o", str(link)))
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text() == _patched_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in real.iterdir()) == ["out.json"]  # the temp file was made beside the target

    # --in-place through a symlinked config.json: the file it points to is rewritten, the link stays
    cfg = Path(write_json(real, json.loads(QWEN.read_text()), "model.json"))
    cfg_link = tmp_path / "config.json"
    cfg_link.symlink_to(cfg)
    ok(run("scale", "yarn", "--config", str(cfg_link), "--factor", "4", "--in-place"))
    assert cfg_link.is_symlink()
    assert json.loads(cfg.read_text())["rope_scaling"]["rope_type"] == "yarn"


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "made.json")
    ok(run("convert", str(QWEN), "--to", "v5", "-o", str(link)))
    assert link.is_symlink() and "rope_parameters" in json.loads((tmp_path / "made.json").read_text())


def test_a_directory_is_refused_by_every_writer(tmp_path: Path) -> None:
    folder = tmp_path / "sub"
    folder.mkdir()
    for args in (SCALE + ("-o", str(folder)), ("convert", str(QWEN), "--to", "v5", "-o", str(folder)),
                 ("plot", "sinusoidal", "-o", str(folder))):
        assert_usage_error(run(*args), str(folder), "a directory", "- for stdout")
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert_usage_error(run(*SCALE, "-o", str(link)), str(link), "a directory")
    assert list(folder.iterdir()) == [] and link.is_symlink()


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")
def test_a_socket_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a short relative name: Unix socket paths are limited to about 100 bytes
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
        assert_usage_error(run(*SCALE, "-o", "sock"), "sock", "a socket")
        assert stat.S_ISSOCK(os.lstat("sock").st_mode)


def test_a_failed_write_through_a_symlink_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Works as root too: the rename fails after the temp file was written."""
    import posenc_cli.files as config_module

    target = tmp_path / "real.json"
    target.write_text("old contents\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)

    expected = _patched_text()

    def boom(src: Any, dst: Any) -> None:
        assert Path(src).read_text() == expected  # the temp file was fully written before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_module.os, "replace", boom)
    assert_could_not_run(run(*SCALE, "-o", str(link)), str(link), "No space left")  # the device failed: exit 3
    assert target.read_text() == "old contents\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    """The temp file is made with O_EXCL and 0o666: a new output must not end up 0o600 like a mkstemp file."""
    old = os.umask(0o022)
    try:
        write_output(tmp_path / "new.json", b"{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


@posix_only
@pytest.mark.parametrize("redirect", ["pipe", "file"])
def test_dev_stdout_in_a_real_process(tmp_path: Path, redirect: str) -> None:
    """`-o /dev/stdout` as the shell runs it: a pipe, or `> file`, which must keep its inode (not be replaced)."""
    assert output_kind("/dev/stdout") != "file"  # else the run below would replace /dev/stdout (as root)
    before = os.lstat("/dev/stdout")
    argv = [sys.executable, "-m", "posenc_cli", *SCALE, "-o", "/dev/stdout"]
    if redirect == "pipe":
        proc = subprocess.run(argv, capture_output=True, timeout=120)
        written = proc.stdout
    else:
        out = tmp_path / "out.json"
        with open(out, "wb") as fh:
            inode = os.fstat(fh.fileno()).st_ino
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, timeout=120)
        assert out.stat().st_ino == inode
        written = out.read_bytes()
    assert proc.returncode == 0, proc.stderr
    assert written == _patched_text().encode()
    assert proc.stderr.decode().splitlines()[-1] == "wrote <stdout>"
    after = os.lstat("/dev/stdout")
    assert stat.S_ISLNK(after.st_mode) == stat.S_ISLNK(before.st_mode) and after.st_ino == before.st_ino
