"""Token counters for building prompts of an exact length: the server's own tokenizer, or a local one.

A counter returns the number of tokens the server will see for a prompt text, BOS included: the server's
tokenize count plus the offset :func:`posenc_cli.evaluation.probe.probe` measured against ``usage.prompt_tokens``.
A local tokenizer is ``bytes`` (the tiny passkey model's vocabulary, :mod:`posenc_cli.evaluation.bytevocab`) or a
Hugging
Face ``tokenizer.json`` (a file, or a model folder holding one), read with the ``tokenizers`` package. Every
request's ``usage.prompt_tokens`` is checked against the count either way, so a wrong local tokenizer shows as
mismatched cells instead of silently wrong lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.client import Client
from posenc_cli.evaluation.probe import Capabilities

Counter = Callable[[str], int]


def server_counter(client: Client, caps: Capabilities) -> Counter:
    if caps.tokenize is None:
        raise PosencError(f"{caps.base_url} has no tokenize endpoint posenc knows; give --tokenizer (bytes, or a "
                          "tokenizer.json or model folder)")
    style, model, offset = caps.tokenize, caps.model, caps.tokenize_offset or 0

    def count(text: str) -> int:
        return len(client.tokenize(style, model, text)) + offset

    return count


def local_counter(spec: str) -> Counter:
    if spec == "bytes":
        return bytevocab.count
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise PosencError(f"--tokenizer {spec!r}: not 'bytes', a tokenizer.json, or a folder holding one")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PosencError("--tokenizer with a tokenizer.json needs the `tokenizers` package "
                          "(pip install tokenizers)") from None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the tokenizers package raises its own exception types
        raise PosencError(f"--tokenizer {spec!r}: cannot read it ({str(exc).splitlines()[0][:120]})") from None

    def count_local(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=True).ids)

    return count_local
