"""GGUF files for the writer's tests, built with the standard library: a llama-like header and tensors of any size,
the large ones sparse (a hole the file system stores as nothing), so a multi-GB file costs no disk and no time.

Independent of posenc's own encoder (models.gguf.writer): the layout is the GGUF spec's, written out here, so a
writer bug cannot hide behind the same bug in the generator. ``tensor_bytes`` hashes one tensor's data.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

STRING, UINT32, FLOAT32, ARRAY = 8, 4, 6, 9


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value: Any) -> bytes:
    if isinstance(value, str):
        return _string(key) + struct.pack("<I", STRING) + _string(value)
    if isinstance(value, list):  # an array of strings (a tokenizer's)
        body = b"".join(_string(v) for v in value)
        return _string(key) + struct.pack("<IIQ", ARRAY, STRING, len(value)) + body
    if isinstance(value, float):
        return _string(key) + struct.pack("<If", FLOAT32, value)
    return _string(key) + struct.pack("<II", UINT32, value)


def make_gguf(path: Path, tensors: dict[str, int | list[float]], *, alignment: int = 32,
              extra: dict[str, Any] | None = None) -> Path:
    """A llama GGUF at ``path``: llama metadata (plus ``extra``), then the tensors in order, each F32: a list is
    written as its values, an int N is N float32 zeros left as a hole (sparse)."""
    kvs: dict[str, Any] = {"general.architecture": "llama", "general.alignment": alignment,
                           "llama.context_length": 8192, "llama.embedding_length": 256, "llama.block_count": 1,
                           "llama.attention.head_count": 2, "llama.rope.freq_base": 500000.0,
                           "tokenizer.ggml.tokens": [f"t{i}" for i in range(300)], **(extra or {})}
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(_kv(k, v) for k, v in kvs.items())
    offset = 0
    infos, layout = [], []
    for name, spec in tensors.items():
        n = spec if isinstance(spec, int) else len(spec)
        offset += -offset % alignment
        infos.append(_string(name) + struct.pack("<IQIQ", 1, n, 0, offset))
        layout.append((offset, spec))
        offset += 4 * n
    head += b"".join(infos)
    head += bytes(-len(head) % alignment)
    with open(path, "wb") as fh:
        fh.write(head)
        for off, spec in layout:
            if isinstance(spec, list):
                fh.seek(len(head) + off)
                fh.write(struct.pack(f"<{len(spec)}f", *spec))
        fh.truncate(len(head) + offset + (-offset % alignment))
    return path


def tensor_bytes(path: Path) -> dict[str, str]:
    """name -> sha256 of each tensor's data (offsets from posenc's header reader; the converted tests use gguf-py's)."""
    from posenc_cli.models.gguf.header import read_header

    header = read_header(path, str(path), lambda _k: False)
    out = {}
    with open(path, "rb") as fh:
        for info in header.tensor_infos:
            fh.seek(header.data_offset + info.offset)
            digest = hashlib.sha256()
            left = info.nbytes
            while left:
                chunk = fh.read(min(left, 1 << 22))
                digest.update(chunk)
                left -= len(chunk)
            out[info.name] = digest.hexdigest()
    return out


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
