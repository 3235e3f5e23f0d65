"""A streaming GGUF rewriter in the standard library: new metadata and small rope tensors, every other byte copied.

:func:`rewrite` reads the input's layout with :mod:`posenc_cli.models.gguf.header` (each key/value record's byte range,
each tensor-info record) and writes a new file:

* the header re-encoded: magic, the input's version, the new tensor and key counts;
* every key/value the :class:`Edit` does not touch copied as the input's raw bytes (a tokenizer's arrays are never
  decoded); a key set by the edit replaces the old record in place, a new key follows the last ``{arch}.`` key (or
  comes last); a deleted key is left out;
* the tensor-info records re-encoded with offsets recomputed in the input's order (each aligned to
  ``general.alignment``, 32 when absent, as gguf-py and llama.cpp write them); a replaced tensor keeps its place, an
  added one comes last, a dropped one is left out. Replaced and added tensors are F32, one dimension;
* the data of every other tensor copied byte for byte, in bounded chunks (``os.copy_file_range`` between regular
  files, else reads of :data:`CHUNK` bytes), runs of tensors whose relative placement is unchanged in one copy.

So the memory used does not grow with the file: the header's key/value records are copied through the same bounded
loop, and only the edited values are built in memory. A tensor of a ggml type the header reader's table does not
know is copied as the bytes up to the next tensor's data (or the file's end).

Where it goes (``dest``), as :func:`posenc_cli.files.write_output` decides for any ``-o``: a regular file or a new path
is written to a temp file in the destination's folder and renamed over it (``os.replace``: a failure leaves the
destination as it was, and the temp file is removed); ``-`` (or this process's stdout) streams the file to stdout
when stdout is not a terminal (a pipe or a redirect: ``posenc scale ... -o - > new.gguf``), and is refused on a
terminal; an existing FIFO or character device is opened and written into. A directory, a socket or a block device
is refused, and so is the input itself (the same path, or another name of the same inode): the input is only ever
opened for reading. A write that fails because of the path (no permission, a read-only file system) is one
:class:`PosencError` (exit 2); one that fails because of the device (full, an I/O error) is
:class:`~posenc_cli.errors.CouldNotRun` (exit 3): :func:`posenc_cli.files.write_error`, as for every write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from posenc_cli.errors import PosencError
from posenc_cli.files import atomic_write, output_kind, write_error
from posenc_cli.models.gguf.header import (
    BOOL,
    FLOAT32,
    FLOAT64,
    INT32,
    INT64,
    MAGIC,
    STRING,
    UINT32,
    UINT64,
    GgufHeader,
    TensorInfo,
    parse_header,
)

__all__ = ["CHUNK", "Edit", "rewrite"]

CHUNK = 1 << 22  # bytes per read/write of a copy (4 MiB)
F32_TYPE = 0  # ggml type of the tensors the edit writes
_SCALAR_CODECS = {UINT32: "<I", INT32: "<i", FLOAT32: "<f", UINT64: "<Q", INT64: "<q", FLOAT64: "<d", BOOL: "<?"}


@dataclass
class Edit:
    """What :func:`rewrite` changes: keys set (name -> (GGUF value type, value); a scalar or a string), keys deleted,
    and tensors replaced or added (name -> float values, written F32 with one dimension) or dropped (None)."""

    set_keys: dict[str, tuple[int, Any]] = field(default_factory=dict)
    delete_keys: set[str] = field(default_factory=set)
    tensors: dict[str, list[float] | None] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.set_keys or self.delete_keys or self.tensors)


def encode_kv(key: str, vtype: int, value: Any) -> bytes:
    """One key/value record: the key (u64 length, UTF-8), the value type (u32), the value."""
    raw = key.encode("utf-8")
    head = struct.pack("<Q", len(raw)) + raw + struct.pack("<I", vtype)
    if vtype == STRING:
        text = str(value).encode("utf-8")
        return head + struct.pack("<Q", len(text)) + text
    codec = _SCALAR_CODECS.get(vtype)
    if codec is None:  # arrays and 8/16-bit types: no rope key needs them
        raise PosencError(f"writing GGUF key {key}: value type {vtype} is not supported by posenc's writer")
    return head + struct.pack(codec, value)


def _encode_info(name: str, dims: Sequence[int], ggml_type: int, offset: int) -> bytes:
    raw = name.encode("utf-8")
    return (struct.pack("<Q", len(raw)) + raw + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", ggml_type, offset))


def _align(n: int, alignment: int) -> int:
    return n + (-n % alignment)


@dataclass
class _Plan:
    """The output, in order: header pieces (bytes, or (start, end) ranges of the input) and data segments."""

    header: list[bytes | tuple[int, int]]
    data: list[bytes | tuple[int, int] | int]  # new bytes, an input range to copy, or that many zero bytes
    size: int = 0


def _sizes(header: GgufHeader, file_size: int) -> dict[str, int]:
    """Each tensor's data size; a type the table does not know: the bytes up to the next tensor's data."""
    order = sorted(header.tensor_infos, key=lambda t: t.offset)
    ends = [t.offset for t in order[1:]] + [file_size - header.data_offset]
    return {t.name: (t.nbytes if t.nbytes >= 0 else end - t.offset) for t, end in zip(order, ends, strict=True)}


def _plan(header: GgufHeader, edit: Edit, file_size: int, arch: str | None) -> _Plan:
    for name, values in edit.tensors.items():
        if values is not None and not values:
            raise PosencError(f"writing GGUF tensor {name}: no values")
    kvs: list[bytes | tuple[int, int]] = []
    pending = dict(edit.set_keys)
    last_arch = -1
    for key, start, end, _ in header.kv_ranges:
        if key in edit.delete_keys:
            continue
        if key in pending:
            kvs.append(encode_kv(key, *pending.pop(key)))
        else:
            kvs.append((start, end))
        if arch and key.startswith(arch + "."):
            last_arch = len(kvs)
    new = [encode_kv(k, t, v) for k, (t, v) in pending.items()]
    at = last_arch if last_arch >= 0 else len(kvs)
    kvs[at:at] = new
    sizes = _sizes(header, file_size)
    existing = {t.name for t in header.tensor_infos}
    tensors: list[tuple[TensorInfo, bytes | None]] = []  # info (new offset filled below), new data or None: copy
    for info in header.tensor_infos:
        if info.name in edit.tensors:
            values = edit.tensors[info.name]
            if values is None:
                continue
            tensors.append((TensorInfo(info.name, (len(values),), F32_TYPE, 0, 4 * len(values)),
                            struct.pack(f"<{len(values)}f", *values)))
        else:
            tensors.append((info._replace(nbytes=sizes[info.name]), None))
    for name, values in edit.tensors.items():
        if values is not None and name not in existing:
            tensors.append((TensorInfo(name, (len(values),), F32_TYPE, 0, 4 * len(values)),
                            struct.pack(f"<{len(values)}f", *values)))
    infos: list[bytes] = []
    data: list[bytes | tuple[int, int] | int] = []
    offset = 0
    for info, raw in tensors:
        offset = _align(offset, header.alignment)
        infos.append(_encode_info(info.name, info.dims, info.ggml_type, offset))
        if raw is not None:
            data.append(raw)
        else:
            src = header.data_offset + info.offset
            data.append((src, src + info.nbytes))
        offset += info.nbytes
        pad = -offset % header.alignment
        if pad:
            data.append(pad)
            offset += pad
    head = MAGIC + struct.pack("<IQQ", header.version, len(tensors), len(kvs))
    pieces: list[bytes | tuple[int, int]] = [head, *kvs, *infos]
    size = sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in pieces)
    pieces.append(bytes(-size % header.alignment))
    return _Plan(pieces, _merged(data), size + (-size % header.alignment) + offset)


def _merged(data: list[bytes | tuple[int, int] | int]) -> list[bytes | tuple[int, int] | int]:
    """Adjacent input ranges (a tensor, its padding, the next tensor at the same relative place) as one copy; zero
    padding that the input holds at the same place becomes part of the copy too."""
    out: list[bytes | tuple[int, int] | int] = []
    for piece in data:
        last = out[-1] if out else None
        if isinstance(piece, tuple) and isinstance(last, tuple) and last[1] == piece[0]:
            out[-1] = (last[0], piece[1])
        elif (isinstance(piece, tuple) and len(out) >= 2 and isinstance(last, int)
              and isinstance(out[-2], tuple) and out[-2][1] + last == piece[0]):
            prev = out[-2]
            assert isinstance(prev, tuple)
            out[-2:] = [(prev[0], piece[1])]
        else:
            out.append(piece)
    return out


def rewrite(source: str | os.PathLike[str], dest: str, edit: Edit, *, label: str | None = None) -> str:
    """Write the GGUF at ``source`` with ``edit`` applied to ``dest`` (see the module docstring); returns the name
    to report (``<stdout>`` for ``-``)."""
    label = os.fspath(source) if label is None else label
    kind = output_kind(dest)
    try:
        src = open(source, "rb")  # noqa: SIM115 - closed below, after the whole copy
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    with src:
        st = os.fstat(src.fileno())
        _not_the_input(dest, kind, st)
        header = parse_header(src, st.st_size, label, lambda key: key == "general.architecture")
        arch = header.fields.get("general.architecture")
        plan = _plan(header, edit, st.st_size, arch if isinstance(arch, str) else None)
        if kind == "stdout":
            return _to_stdout(src, plan, label)
        if kind == "stream":
            return _to_stream(src, plan, dest, label)
        return _to_file(src, plan, dest, label)


def _not_the_input(dest: str, kind: str, st: os.stat_result) -> None:
    if kind == "stdout":
        return
    try:
        out = os.stat(dest)
    except OSError:
        return
    if (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino):
        raise PosencError(f"cannot write {dest}: it is the input GGUF (give another path; posenc never writes over "
                          "the file it reads)")


def _to_stdout(src: IO[bytes], plan: _Plan, label: str) -> str:
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        raise PosencError("cannot write a GGUF to this stdout (a text-only stream): give -o NEW.gguf")
    terminal = False
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no real descriptor: not a terminal
        terminal = os.isatty(buffer.fileno())
    if terminal:
        raise PosencError("a GGUF is binary: not written to a terminal; give -o NEW.gguf, or redirect stdout "
                          "(-o - > NEW.gguf)")
    sys.stdout.flush()
    try:
        _emit(src, buffer, plan, label, None)
        buffer.flush()
    except BrokenPipeError:
        raise  # the reader closed the pipe: a quiet exit 0, as for every command's stdout (cli/app.py)
    except OSError as exc:
        raise write_error("<stdout>", exc) from None
    return "<stdout>"


def _to_stream(src: IO[bytes], plan: _Plan, dest: str, label: str) -> str:
    try:
        fd = os.open(dest, os.O_WRONLY | getattr(os, "O_BINARY", 0))  # no O_CREAT (files.write_output)
        with open(fd, "wb") as out:
            _emit(src, out, plan, label, None)
    except OSError as exc:
        raise write_error(dest, exc) from None
    return dest


def _to_file(src: IO[bytes], plan: _Plan, dest: str, label: str) -> str:
    atomic_write(dest, lambda out, fd: _emit(src, out, plan, label, fd))
    return dest


def _emit(src: IO[bytes], out: IO[bytes], plan: _Plan, label: str, out_fd: int | None) -> None:
    """Write the plan: new bytes as they are, input ranges copied in bounded chunks, zero padding."""
    for piece in _pieces(plan):
        if isinstance(piece, bytes):
            out.write(piece)
        elif isinstance(piece, int):
            out.write(bytes(piece))
        else:
            _copy(src, out, piece[0], piece[1] - piece[0], label, out_fd)


def _pieces(plan: _Plan) -> Iterable[bytes | tuple[int, int] | int]:
    yield from plan.header
    yield from plan.data


def _copy(src: IO[bytes], out: IO[bytes], start: int, length: int, label: str, out_fd: int | None) -> None:
    """``length`` bytes of the input from ``start`` to ``out``: the kernel's copy between two regular files
    (``os.copy_file_range``), else reads and writes of at most :data:`CHUNK` bytes."""
    if out_fd is not None and hasattr(os, "copy_file_range") and length > CHUNK:
        out.flush()
        if _kernel_copy(src.fileno(), out_fd, start, length, label):
            out.seek(0, os.SEEK_END)
            return
    src.seek(start)
    left = length
    while left:
        chunk = src.read(min(CHUNK, left))
        if not chunk:
            raise PosencError(f"{label}: the file ended while its tensor data was copied (it changed while posenc "
                              "read it)")
        out.write(chunk)
        left -= len(chunk)


def _kernel_copy(src_fd: int, out_fd: int, start: int, length: int, label: str) -> bool:
    """``os.copy_file_range`` of the whole range; False (nothing written) when the kernel or file system has no such
    copy (another device, an old kernel), so the caller falls back to reads and writes."""
    done = 0
    out_pos = os.lseek(out_fd, 0, os.SEEK_END)
    while done < length:
        try:
            n = os.copy_file_range(src_fd, out_fd, min(1 << 30, length - done), start + done, out_pos + done)
        except OSError as exc:
            if done == 0 and exc.errno in _NO_KERNEL_COPY:
                return False
            raise
        if n == 0:
            raise PosencError(f"{label}: the file ended while its tensor data was copied (it changed while posenc "
                              "read it)")
        done += n
    os.lseek(out_fd, out_pos + done, os.SEEK_SET)
    return True


_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM})
