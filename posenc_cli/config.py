"""Reading and writing model files: JSON objects from a path or stdin, LongRoPE factor lists, atomic writes.

Stdlib only. What a config *means* for positions lives in :mod:`posenc_cli.models`.
"""

from __future__ import annotations

import json
import os
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
    """Write ``data`` to ``path`` through a temp file in the same folder and a rename.

    A failure at any point leaves ``path`` as it was (absent, or the old contents) and removes the temp file.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise PosencError(f"cannot write {target}: folder {folder} does not exist")
    if target.is_dir():
        raise PosencError(f"cannot write {target}: it is a directory")
    tmp = folder / f".{target.name}.posenc-{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PosencError(f"cannot write {target}: {exc.strerror or exc}") from None


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
