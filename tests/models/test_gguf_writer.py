"""The streaming GGUF rewriter (posenc_cli.models.gguf.writer) on GGUFs built by tests/harness/gguf_files.py:
the layout it writes, every untouched byte copied, memory independent of the file's size, and outputs refused
cleanly (the input, a directory, a read-only folder, a terminal) with the input never changed. The rope proofs on
GGUFs made by llama.cpp's converter are in test_gguf_scaled.py."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_files import file_hash, make_gguf, tensor_bytes

from posenc_cli.errors import CouldNotRun, PosencError
from posenc_cli.models.gguf.header import FLOAT32, STRING, UINT32, read_header
from posenc_cli.models.gguf.metadata import read_gguf
from posenc_cli.models.gguf.writer import Edit, rewrite

ROOT = Path(__file__).resolve().parents[2]
FACTORS = [1.0 + i / 8 for i in range(64)]


def _small(tmp_path: Path, alignment: int = 32) -> Path:
    return make_gguf(tmp_path / "in.gguf", {"token_embd.weight": 1000, "rope_freqs.weight": FACTORS,
                                            "blk.0.attn_q.weight": [0.5] * 77, "output.weight": 333},
                     alignment=alignment)


def _edit() -> Edit:
    return Edit(set_keys={"llama.context_length": (UINT32, 262144), "llama.rope.scaling.type": (STRING, "yarn"),
                          "llama.rope.scaling.factor": (FLOAT32, 32.0)},
                delete_keys={"llama.rope.freq_base"}, tensors={"rope_freqs.weight": None})


@pytest.mark.parametrize("alignment", [32, 64, 4096])
def test_the_rewrite_has_the_new_keys_and_every_other_byte(tmp_path: Path, alignment: int) -> None:
    src = _small(tmp_path, alignment)
    before = file_hash(src)
    out = tmp_path / "out.gguf"
    assert rewrite(src, str(out), _edit()) == str(out)
    assert file_hash(src) == before
    fields = read_header(out, "out", lambda _k: True).fields
    assert fields["llama.context_length"] == 262144 and fields["llama.rope.scaling.type"] == "yarn"
    assert "llama.rope.freq_base" not in fields
    assert fields["tokenizer.ggml.tokens"] == [f"t{i}" for i in range(300)]  # copied as raw bytes, read back
    header = read_header(out, "out", lambda _k: False)
    assert header.alignment == alignment and header.data_offset % alignment == 0
    assert all(t.offset % alignment == 0 for t in header.tensor_infos)
    old, new = tensor_bytes(src), tensor_bytes(out)
    assert set(new) == set(old) - {"rope_freqs.weight"}
    assert all(new[name] == old[name] for name in new)
    # the file ends where its last tensor (padded) ends: nothing left over
    last = header.tensor_infos[-1]
    end = header.data_offset + last.offset + last.nbytes
    assert out.stat().st_size == end + (-end % alignment)


def test_a_replaced_tensor_keeps_its_place_and_an_added_one_comes_last(tmp_path: Path) -> None:
    src = _small(tmp_path)
    out = tmp_path / "out.gguf"
    new = [2.0] * 64
    rewrite(src, str(out), Edit(tensors={"rope_freqs.weight": new, "rope_factors_long.weight": [3.0] * 64}))
    header = read_header(out, "out", lambda _k: False, ("rope_freqs.weight", "rope_factors_long.weight"))
    assert header.tensor_names == ["token_embd.weight", "rope_freqs.weight", "blk.0.attn_q.weight",
                                   "output.weight", "rope_factors_long.weight"]
    assert header.tensors == {"rope_freqs.weight": new, "rope_factors_long.weight": [3.0] * 64}
    old, got = tensor_bytes(src), tensor_bytes(out)
    assert all(got[n] == old[n] for n in ("token_embd.weight", "blk.0.attn_q.weight", "output.weight"))
    assert read_gguf(out).rope_freqs == new


def test_an_empty_edit_reproduces_the_file(tmp_path: Path) -> None:
    src = _small(tmp_path)
    out = tmp_path / "out.gguf"
    rewrite(src, str(out), Edit())
    assert file_hash(out) == file_hash(src)


# ------------------------------------------------------------------------------------- outputs refused or streamed


def _refused(call: object, *needles: str) -> str:
    with pytest.raises(PosencError) as info:
        call()  # type: ignore[operator]
    text = str(info.value)
    assert "\n" not in text and all(n in text for n in needles), text
    return text


def test_the_input_is_never_the_output(tmp_path: Path) -> None:
    src = _small(tmp_path)
    before = file_hash(src)
    (tmp_path / "link.gguf").symlink_to(src)
    os.link(src, tmp_path / "hard.gguf")
    for dest in (src, tmp_path / "link.gguf", tmp_path / "hard.gguf", tmp_path / "." / "in.gguf"):
        _refused(lambda d=dest: rewrite(src, str(d), _edit()), "it is the input GGUF")
    assert file_hash(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.gguf", "in.gguf", "link.gguf"]


def test_a_directory_or_a_missing_folder_is_refused(tmp_path: Path) -> None:
    src = _small(tmp_path)
    _refused(lambda: rewrite(src, str(tmp_path), _edit()), "a directory")
    _refused(lambda: rewrite(src, str(tmp_path / "no" / "out.gguf"), _edit()), "does not exist")


def test_a_truncated_input_is_one_error_and_nothing_is_written(tmp_path: Path) -> None:
    src = _small(tmp_path)
    data = src.read_bytes()
    for cut in (10, 200, len(data) - 100):
        bad = tmp_path / "cut.gguf"
        bad.write_bytes(data[:cut])
        _refused(lambda b=bad: rewrite(b, str(tmp_path / "out.gguf"), _edit()), "not a readable GGUF file",
                 "truncated")
        assert not (tmp_path / "out.gguf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_existing_output_is_replaced_atomically_with_its_mode(tmp_path: Path) -> None:
    src = _small(tmp_path)
    out = tmp_path / "out.gguf"
    out.write_bytes(b"old")
    out.chmod(0o640)
    rewrite(src, str(out), _edit())
    assert out.stat().st_mode & 0o777 == 0o640
    assert read_header(out, "out", lambda _k: False).tensor_count == 3


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX only")
def test_a_read_only_folder_is_one_error_line_exit_2_and_the_input_is_unchanged(tmp_path: Path) -> None:
    """A folder the user cannot write into (mode 555; as root, which writes anywhere, the immutable attribute):
    one error line, exit 2 (the path is the problem: files.write_error), nothing left behind, the input as it was."""
    src = _small(tmp_path)
    before = file_hash(src)
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.getuid() != 0:
        folder.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: no folder root cannot write into")
    try:
        argv = ["scale", "yarn", "--target", "64k", "--config", str(src), "-o", str(folder / "new.gguf")]
        done = subprocess.run([sys.executable, "-m", "posenc_cli", *argv], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    finally:
        if os.getuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[-1].startswith(f"error: cannot write {folder / 'new.gguf'}: "), lines
    assert any(why in lines[-1] for why in ("Permission denied", "Operation not permitted")), lines
    assert not any(line.startswith("error:") for line in lines[:-1]) and "Traceback" not in done.stderr
    assert done.stdout == "" and list(folder.iterdir()) == [] and file_hash(src) == before


def test_a_full_device_is_exit_3(tmp_path: Path) -> None:
    """/dev/full: every write fails with ENOSPC, the device's failure, not the path's."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    src = _small(tmp_path)
    with pytest.raises(CouldNotRun, match="cannot write /dev/full"):
        rewrite(src, "/dev/full", _edit())


def test_dash_streams_to_a_pipe_and_refuses_a_terminal(tmp_path: Path) -> None:
    src = _small(tmp_path)
    argv = ["scale", "yarn", "--target", "64k", "--config", str(src), "-o", "-"]
    done = subprocess.run([sys.executable, "-m", "posenc_cli", *argv], capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    piped = tmp_path / "piped.gguf"
    piped.write_bytes(done.stdout)
    filed = tmp_path / "filed.gguf"
    done = subprocess.run([sys.executable, "-m", "posenc_cli", *argv[:-1], str(filed)], capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0 and file_hash(piped) == file_hash(filed)
    pty = pytest.importorskip("pty")
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout is a terminal
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "posenc_cli", *argv])
    text = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        text += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 2
    assert b"error: a GGUF is binary: not written to a terminal" in text and b"GGUF\x03" not in text


# ----------------------------------------------------------------------------------------- memory, not file size

PROBE = r"""
import resource, sys
from posenc_cli.models.gguf.header import STRING
from posenc_cli.models.gguf.writer import Edit, rewrite
rewrite(sys.argv[1], sys.argv[2], Edit(set_keys={"llama.rope.scaling.type": (STRING, "linear")},
        tensors={"rope_freqs.weight": [2.0] * 64}))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peak_kib(src: Path, dest: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, str(src), dest], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.parametrize("to", ["file", "stream"])
def test_peak_memory_does_not_grow_with_the_file(tmp_path: Path, to: str) -> None:
    """16 MiB and 1 GiB GGUFs (sparse): the write's peak RSS differs by less than 16 MiB, 1/128 of the size
    difference (measured: within 1 MiB; one copy chunk is 4 MiB). ``stream``: to /dev/null (reads and writes of
    bounded chunks), ``file``: a new file (the kernel's copy_file_range)."""
    peaks = []
    for n in (1 << 22, 1 << 28):  # float32 elements: 16 MiB, 1 GiB
        src = make_gguf(tmp_path / f"in-{n}.gguf", {"token_embd.weight": n, "rope_freqs.weight": FACTORS,
                                                    "output.weight": 4096})
        dest = "/dev/null" if to == "stream" else str(tmp_path / f"out-{n}.gguf")
        peaks.append(_peak_kib(src, dest))
        if to == "file":
            assert 0 < Path(dest).stat().st_size - src.stat().st_size <= 128  # one key more
            Path(dest).unlink()
        src.unlink()
    print("peak RSS KiB", to, peaks)
    assert abs(peaks[1] - peaks[0]) < 16 * 1024, peaks


def test_the_header_layout_matches_struct_records(tmp_path: Path) -> None:
    """The key/value ranges the header reader gives are the records themselves: re-reading one gives its key."""
    src = _small(tmp_path)
    header = read_header(src, "in", lambda _k: False)
    data = src.read_bytes()
    for key, start, end, _ in header.kv_ranges:
        (length,) = struct.unpack_from("<Q", data, start)
        assert data[start + 8:start + 8 + length].decode() == key and end > start + 8 + length
    assert json.dumps([k for k, *_ in header.kv_ranges])  # plain strings


def test_a_reader_closing_the_pipe_early_is_a_quiet_exit_0(tmp_path: Path) -> None:
    """``-o - | head -c 4``: the reader leaves, as for every command's stdout (no error line, no traceback). The
    README's converter-made twin (about 250 KB) is larger than a pipe's buffer, so the writer meets the closed pipe."""
    src = ROOT / "docs" / "examples" / "llama-3.1-twin.gguf"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-m", "posenc_cli", "scale", "yarn", "--target", "512k", "--config",
                           str(src), "-o", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as child:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.read(4) == b"GGUF"
        child.stdout.close()
        err = child.stderr.read().decode()
        code = child.wait(timeout=120)
    assert code == 0 and "error" not in err and "Traceback" not in err, err
