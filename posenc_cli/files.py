"""Reading and writing model files: JSON objects from a path or stdin, LongRoPE factor lists, safe output writes.

Stdlib only. What a config *means* for positions lives in :mod:`posenc_cli.models.model_positions`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from posenc_cli.errors import CouldNotRun, PosencError

#: Deepest nesting of objects and lists posenc reads; real configs nest 4 or 5 deep (a sub-config's rope dict).
MAX_DEPTH = 64
#: Largest integer magnitude posenc reads: a 64-bit signed integer, what every engine stores a count or length in.
MAX_INT = 2**63 - 1


def parse_json(data: str | bytes, label: str) -> Any:
    """Any JSON value in ``data``; every way it is not JSON posenc can read is one PosencError naming ``label``.

    Conventions (one reader for every JSON file posenc takes):

    * bytes are decoded as :func:`json.loads` decodes them: UTF-8 (a leading byte-order mark is skipped), UTF-16 or
      UTF-32, told apart by the first bytes; bytes that are none of these are an error. (transformers opens
      config.json as UTF-8 and refuses a BOM or UTF-16; ``inspect --lint`` says so.)
    * a key given twice in one object is an error naming it. transformers' ``json.load`` silently keeps the last
      value; a hand-edited file that says two things is refused rather than read one way here and another way by a
      tool that keeps the first, and ``convert``/``scale -o`` would otherwise drop the other value silently.
    * nesting deeper than :data:`MAX_DEPTH` is an error (a real config nests 4 or 5 deep).
    * ``NaN``, ``Infinity`` and numbers past float range are read as Python's json reads them (transformers too:
      Nemotron-H ships ``Infinity`` in ``time_step_limit``), and so is transformers 5's tagged form
      ``{"__float__": "Infinity"}`` (``PretrainedConfig._decode_special_floats``). Every number posenc uses is
      checked where it is read (:func:`posenc_cli.models.value_checks.check_sizes`,
      :func:`posenc_cli.models.value_checks.check_rope_params`);
      nothing posenc prints holds one (:func:`dumps_json`), and a config it writes holds them in the tagged form
      (:func:`dumps_config`).
    """
    try:
        value = json.loads(data, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise PosencError(f"{label}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except _NotJson as exc:
        raise PosencError(f"{label}: {exc}") from None
    except RecursionError:
        raise PosencError(f"{label}: nested too deep; posenc reads JSON nested at most {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise PosencError(f"{label}: not UTF-8, UTF-16 or UTF-32 text, so not JSON") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise PosencError(f"{label}: {_one_line(str(exc))}") from None
    check_values(value, label, finite=False)
    return _decode_floats(value)


def parse_json_object(data: str | bytes, label: str) -> dict[str, Any]:
    """The JSON object in ``data`` (:func:`parse_json`); another kind of value is one PosencError naming ``label``."""
    value = parse_json(data, label)
    if not isinstance(value, dict):
        raise PosencError(f"{label}: expected a JSON object, got {_json_kind(value)}")
    return value


class _NotJson(ValueError):
    """A value Python's json module accepts but posenc refuses (raised from the parser's hook)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotJson(f"key {key!r} is given twice in one object ({_shown(out[key])} and {_shown(value)}); "
                           "keep one (transformers would silently take the last)")
        out[key] = value
    return out


def _walk(value: Any) -> Iterator[tuple[Any, str, int]]:
    """(node, where, depth) for every node of a parsed value, iteratively (no recursion limit), in file order."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, where, depth = stack.pop()
        yield node, where, depth
        if depth > MAX_DEPTH:
            continue
        if isinstance(node, dict):
            stack.extend(reversed([(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node)]))


def non_finite(value: Any) -> list[tuple[str, float]]:
    """(where, value) of every NaN or infinity in a parsed value, in file order (``time_step_limit[1]``)."""
    return [(where or "the value", node) for node, where, _ in _walk(value)
            if isinstance(node, float) and not math.isfinite(node)]


def check_values(value: Any, label: str, *, finite: bool = True) -> None:
    """Nesting at most :data:`MAX_DEPTH` deep everywhere in a parsed value; with ``finite``, also no NaN or infinity
    and no integer past 64 bits (:data:`MAX_INT`), each one PosencError naming the key. JSON is read with
    ``finite=False`` (see :func:`parse_json`); YAML and TOML settings files, whose every number a trainer reads,
    with ``finite=True`` (YAML's ``.nan``/``.inf`` and TOML's ``nan``/``inf`` are no setting a trainer runs)."""
    for node, where, depth in _walk(value):
        if depth > MAX_DEPTH:
            shown = where if len(where) <= 60 else where[:57] + "..."
            raise PosencError(f"{label}: nested too deep at {shown}; posenc reads files nested at most {MAX_DEPTH} "
                              "levels")
        if not finite:
            continue
        if isinstance(node, float) and not math.isfinite(node):
            raise PosencError(f"{label}: {where or 'the value'} = {node!r} is not a finite number; give one")
        if isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INT:
            raise PosencError(f"{label}: {where or 'the value'} = {_shown(node)} is too large; posenc reads integers "
                              "up to 2**63 - 1 (what engines store counts and lengths in)")


def _shown(value: Any) -> str:
    """``value`` for a message: its JSON text (Python's repr when it holds a NaN), at most 40 characters."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _json_kind(value: Any) -> str:
    """The JSON name of a value's kind (an array, not a Python list)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


#: transformers 5's tag for a float JSON cannot hold (``configuration_utils._FLOAT_TAG_KEY`` and its values).
FLOAT_TAG = "__float__"
_TAGGED = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _decode_floats(obj: Any) -> Any:
    """``{"__float__": "Infinity"}`` as the float it tags, everywhere (transformers 5's ``_decode_special_floats``)."""
    if isinstance(obj, dict):
        if set(obj) == {FLOAT_TAG} and isinstance(obj[FLOAT_TAG], str) and obj[FLOAT_TAG] in _TAGGED:
            return _TAGGED[obj[FLOAT_TAG]]
        return {k: _decode_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_floats(v) for v in obj]
    return obj


def _encode_floats(obj: Any) -> Any:
    """Every NaN or infinity as ``{"__float__": "NaN"}`` (transformers 5's ``_encode_special_floats``)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return {FLOAT_TAG: "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")}
    if isinstance(obj, dict):
        return {k: _encode_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode_floats(v) for v in obj]
    return obj


def dumps_config(config: Any, *, indent: int | None = 2, separators: tuple[str, str] | None = None) -> str:
    """A model config (or any record that may carry a float from one) as strict JSON text, the way transformers 5
    writes a config (``to_json_string``): a NaN or infinity (Nemotron-H's ``time_step_limit``, a server's ``-inf``
    log-probability, a diverged loss) becomes ``{"__float__": "Infinity"}``, which transformers, :func:`parse_json`
    and :func:`loads_tagged` read back as the float."""
    return dumps_json(_encode_floats(config), indent=indent, separators=separators)


def loads_tagged(text: str | bytes) -> Any:
    """``json.loads`` that reads :func:`dumps_config`'s ``{"__float__": ...}`` back as the float (files posenc
    wrote itself: an eval run's records and manifest)."""
    return _decode_floats(json.loads(text))


def dumps_json(obj: Any, *, indent: int | None = 2, separators: tuple[str, str] | None = None,
               sort_keys: bool = False) -> str:
    """``obj`` as strict JSON text (no final newline): the one writer behind everything posenc prints or writes.

    NaN and Infinity are refused (``allow_nan=False``): they are not JSON, and jq, browsers and posenc's own reader
    reject them. A value that holds one is a PosencError naming where, so nothing invalid is ever printed or written
    (a config holding one from its input goes through :func:`dumps_config` instead).
    """
    try:
        return json.dumps(obj, indent=indent, separators=separators, sort_keys=sort_keys, allow_nan=False)
    except ValueError:
        found = non_finite(obj)
        where = f"{found[0][0]} is {found[0][1]!r}" if found else "a value is NaN or Infinity"
        raise PosencError(f"cannot write the result as JSON: {where}, which JSON cannot express; set it to a finite "
                          "number (or remove it) in the input") from None


def load_json(path: str) -> dict[str, Any]:
    """Read a JSON object from ``path`` (``-`` reads stdin); every failure is one clear PosencError."""
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        return parse_json_object(stream.read() if stream is not None else sys.stdin.read(), "<stdin>")
    if Path(path).is_dir():
        raise PosencError(f"{path} is a directory; pass the config.json file inside it")
    return parse_json_object(read_bytes(path), str(Path(path)))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a regular file (or a new path) atomically; see :func:`atomic_write`."""
    atomic_write(path, lambda out, _fd: out.write(data))


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO, int], object]) -> None:
    """Write a regular file (or a new path) through a temp file in the same folder and a rename: ``write(out, fd)``
    writes the contents into the temp file (``fd``: its descriptor, for a kernel copy), then it is synced and
    renamed over ``path``.

    A symlink is followed: the file it points to is replaced and the link stays. The mode (and, where allowed, the
    owner) of a replaced file is kept. A failure at any point (an interrupt too) leaves the file as it was (absent,
    or the old contents) and removes the temp file. Anything but a regular file is refused, never replaced: a path
    a user names goes through :func:`write_output`, which writes into FIFOs and devices instead.
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
        try:
            with open(fd, "wb") as fh:
                write(fh, fd)
                fh.flush()
                os.fsync(fh.fileno())
            if old is not None:
                os.chmod(tmp, stat.S_IMODE(old.st_mode))
                if hasattr(os, "chown") and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                    with contextlib.suppress(OSError):  # only root (or a group member) may; the contents matter more
                        os.chown(tmp, old.st_uid, old.st_gid)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise write_error(shown, exc) from None


#: OS errors of a write that the device, not the path, caused: the input was fine, the work could not be done.
_DEVICE_ERRORS = frozenset({errno.ENOSPC, errno.EIO, errno.EPIPE, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})


def write_error(shown: str | os.PathLike[str], exc: OSError) -> PosencError:
    """One line for a failed write to ``shown``: :class:`CouldNotRun` (exit 3) when the device failed (full, an
    I/O error, a reader that closed a FIFO), :class:`PosencError` (exit 2) when the path is the problem (no
    permission, a read-only file system), which the user fixes by naming another."""
    kind = CouldNotRun if exc.errno in _DEVICE_ERRORS else PosencError
    return kind(f"cannot write {os.fspath(shown)}: {exc.strerror or exc}")


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
            raise write_error(os.fspath(path), exc) from None
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
            raw = parse_json(text, name)
        except PosencError as exc:
            raise PosencError(f"{exc}; give e.g. '[1.0, 1.5, 2.0]' or @file") from None
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


def read_bytes(path: str | os.PathLike[str], label: str | None = None) -> bytes:
    """The bytes of ``path``; a missing or unreadable file is one PosencError naming ``label`` (default: the path)."""
    label = str(Path(path)) if label is None else label
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise PosencError(f"{label}: no such file") from None
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None


def load_json_value(path: str) -> Any:
    """Any JSON value from a file, with the same one-line errors as :func:`load_json`."""
    return parse_json(read_bytes(path), str(Path(path)))
