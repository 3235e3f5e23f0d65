"""Reading and writing model files: JSON objects from a path or stdin, LongRoPE factor lists, safe output writes.

Stdlib only. What a config *means* for positions lives in :mod:`posenc_cli.models`.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError


def parse_json_object(text: str, label: str) -> dict[str, Any]:
    """The JSON object in ``text``; malformed JSON or another kind of value is one PosencError naming ``label``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PosencError(f"{label}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise PosencError(f"{label}: expected a JSON object, got {type(data).__name__}")
    return data


def load_json(path: str) -> dict[str, Any]:
    """Read a JSON object from ``path`` (``-`` reads stdin); every failure is one clear PosencError."""
    if path == "-":
        return parse_json_object(sys.stdin.read(), "<stdin>")
    if Path(path).is_dir():
        raise PosencError(f"{path} is a directory; pass the config.json file inside it")
    return parse_json_object(read_text(path), str(Path(path)))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a regular file (or a new path) through a temp file in the same folder and a rename.

    A symlink is followed: the file it points to is replaced and the link stays. The mode (and, where allowed, the
    owner) of a replaced file is kept. A failure at any point leaves the file as it was (absent, or the old
    contents) and removes the temp file. Anything but a regular file is refused, never replaced: a path a user
    names goes through :func:`write_output`, which writes into FIFOs and devices instead.
    """
    shown = Path(path)
    target = Path(os.path.realpath(path))
    folder = target.parent
    if not folder.is_dir():
        missing = folder if os.path.islink(path) else shown.parent  # a dangling link: the folder it points into
        raise PosencError(f"cannot write {shown}: folder {missing} does not exist")
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise PosencError(f"cannot write {shown}: {exc.strerror or exc}") from None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise PosencError(f"cannot write {shown}: it is {_kind(old.st_mode)}, not a regular file")
    # a random name opened with O_EXCL: never follows a link planted at the temp path, never shares it with
    # another writer; 0o666 lets the umask decide a new file's mode, as open() would
    tmp = folder / f".{target.name}.posenc-{os.getpid()}-{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with open(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if hasattr(os, "chown") and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):  # only root (or a group member) may; the contents matter more
                    os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PosencError(f"cannot write {shown}: {exc.strerror or exc}") from None


#: What ``-`` means wherever posenc takes an output path.
STDOUT = "-"


def output_kind(path: str | os.PathLike[str]) -> str:
    """How :func:`write_output` would write ``path``, checked without writing anything.

    ``"stdout"`` (``-``, or a path that is this process's stdout such as ``/dev/stdout``), ``"stream"`` (an
    existing FIFO or character device, or a ``/dev/fd``/``/proc`` descriptor path: opened and written into) or
    ``"file"`` (a regular file, a symlink to one, or a new path: replaced atomically). A directory, a socket or a
    block device is one PosencError.
    """
    text = os.fspath(path)
    if text == STDOUT:
        return "stdout"
    try:
        st = os.stat(text)
    except FileNotFoundError:
        return "file"
    except OSError as exc:
        raise PosencError(f"cannot write {text}: {exc.strerror or exc}") from None
    if _is_stdout(st):
        return "stdout"
    if stat.S_ISREG(st.st_mode):
        # /dev/stdout of a shell's `> file` resolves to that file: replacing it would leave the shell's descriptor
        # on the unlinked old file, so a descriptor path is always written into
        return "stream" if _through_descriptor(text) else "file"
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return "stream"
    raise PosencError(f"cannot write {text}: it is {_kind(st.st_mode)}; give a file path, a FIFO or device, "
                      f"or {STDOUT} for stdout")


def write_output(path: str | os.PathLike[str], data: bytes) -> str:
    """Write ``data`` where a user asked (``-o``, ``--output``, ``--in-place``, ``--png``); returns the name to
    report (``<stdout>`` for ``-``).

    ``-`` and the process's own stdout go to ``sys.stdout.buffer``; an existing FIFO or character device
    (``/dev/null``, a terminal, a symlink to one) is opened and written into, never renamed over or unlinked;
    a regular file, a symlink to one or a new path is replaced atomically (:func:`atomic_write_bytes`).
    Directories, sockets and block devices are refused (:func:`output_kind`).
    """
    kind = output_kind(path)
    if kind == "stdout":
        sys.stdout.flush()  # text already written through sys.stdout comes first
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text-only stream (some embedders): the bytes as UTF-8 text, which JSON is
            sys.stdout.write(data.decode("utf-8", errors="surrogateescape"))
        else:
            buffer.write(data)
            buffer.flush()
        return "<stdout>"
    if kind == "stream":
        try:
            # no O_CREAT: if the FIFO vanished since the check, fail rather than leave a regular file in its place
            fd = os.open(path, os.O_WRONLY | getattr(os, "O_BINARY", 0))
            with open(fd, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise PosencError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
        return os.fspath(path)
    atomic_write_bytes(path, data)
    return os.fspath(path)


def write_output_text(path: str | os.PathLike[str], text: str) -> str:
    """:func:`write_output` for UTF-8 text."""
    return write_output(path, text.encode("utf-8"))


def _is_stdout(st: os.stat_result) -> bool:
    try:
        out = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real descriptor (a test runner's capture, a closed stream)
        return False
    return (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino)


def _through_descriptor(path: str) -> bool:
    """Whether ``path`` or a link on its way names an open descriptor (``/dev/fd/N``, ``/proc/.../fd/N``)."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if current.startswith(("/dev/fd/", "/proc/")):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    return "not a regular file"


def parse_factor_list(text: str, name: str) -> list[float]:
    """A LongRoPE factor list from a JSON list (``[1.0, 1.1, ...]``) or ``@file`` holding one."""
    if text.startswith("@"):
        raw: Any = load_json_value(text[1:])
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PosencError(f"{name} is not a JSON list ({exc.msg}); give e.g. '[1.0, 1.5, 2.0]' or @file") from None
    if not isinstance(raw, list):
        raise PosencError(f"{name} must be a JSON list of numbers, got {type(raw).__name__}")
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise PosencError(f"{name}[{i}] = {v!r} is not a number")
    return [float(v) for v in raw]


def read_text(path: str | os.PathLike[str], label: str | None = None, *, kind: str = "file",
              error: type[PosencError] = PosencError) -> str:
    """The UTF-8 text of ``path``; a missing or unreadable file is one ``error`` naming ``label`` (default: the path).

    ``kind`` names what was expected in the "no such ..." message (``file``, ``rules file``).
    """
    label = str(Path(path)) if label is None else label
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{label}: no such {kind}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot read it ({exc.__class__.__name__})") from None


def load_json_value(path: str) -> Any:
    """Any JSON value from a file, with the same one-line errors as :func:`load_json`."""
    p = Path(path)
    text = read_text(p)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PosencError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
