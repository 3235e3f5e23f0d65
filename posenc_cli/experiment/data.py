"""Data for the two tasks: a byte corpus split into train and held-out parts, and copy-task sequences.

The default corpus is one every Python installation has offline: the standard library's own ``.py`` files
(``sysconfig.get_paths()["stdlib"]``, site-packages excluded), sorted by relative path, concatenated in that fixed
order until about N bytes are read. Every tenth file is held out, so train and held-out text come from
different files of the same kind. ``--text FILE`` replaces the corpus with the user's file (same split).
"""

from __future__ import annotations

import math
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch  # noqa: TID253 - this package is imported only by `posenc experiment`
from torch import Tensor  # noqa: TID253

from posenc_cli.errors import PosencError

HELD_OUT_FRACTION = 0.1
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True)
class Corpus:
    train: bytes
    held_out: bytes
    source: str  # "python stdlib <dir>" or the --text path
    files: int  # files read (1 for --text)


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files in a fixed order (sorted relative POSIX paths)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    found = [p for p in base.rglob("*.py") if not (_SKIP_DIRS & set(p.relative_to(base).parts[:-1]))]
    return sorted(found, key=lambda p: p.relative_to(base).as_posix())


def load_corpus(limit: int, text: str | None = None) -> Corpus:
    """About ``limit`` bytes of text, split deterministically into train and held-out parts.

    stdlib corpus: files in sorted order until ``limit`` bytes are read; every tenth file (the 10th, 20th, ...) is
    held out, so the held-out text is unseen files of the same kind. ``--text``: its first ``limit`` bytes, the last
    tenth held out.
    """
    if text is not None:
        try:
            data = Path(text).read_bytes()[:limit]
        except OSError as exc:
            raise PosencError(f"--text {text}: cannot read it ({exc.strerror or exc})") from None
        cut = len(data) - int(len(data) * HELD_OUT_FRACTION)
        return Corpus(data[:cut], data[cut:], text, 1)
    root = Path(sysconfig.get_paths()["stdlib"])
    train: list[bytes] = []
    held: list[bytes] = []
    size = files = 0
    for path in stdlib_files(root):
        try:
            chunk = path.read_bytes()
        except OSError:
            continue
        files += 1
        (held if files % round(1 / HELD_OUT_FRACTION) == 0 else train).append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return Corpus(b"".join(train), b"".join(held), f"python {sysconfig.get_python_version()} stdlib ({root})",
                  files)


def unigram_bits_per_byte(train: bytes, held_out: bytes) -> float:
    """Cross-entropy (bits per byte) of ``held_out`` under the train split's byte frequencies (add-one smoothed)."""
    counts = Counter(train)
    total = len(train) + 256
    logs = {b: math.log2((counts.get(b, 0) + 1) / total) for b in range(256)}
    return -sum(logs[b] for b in held_out) / len(held_out)


def lm_batch(data: Tensor, length: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random windows of ``length + 1`` bytes: inputs and next-byte targets, each ``(batch_size, length)``."""
    starts = torch.randint(0, data.numel() - length - 1, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(length + 1)
    windows = data[idx]
    return windows[:, :-1], windows[:, 1:]


def lm_eval_windows(data: Tensor, length: int, budget: int) -> tuple[Tensor, Tensor]:
    """Non-overlapping windows over the first ``budget`` held-out bytes (the same bytes at every length)."""
    n = min(budget, data.numel() - 1) // length
    if n < 1:
        raise PosencError(f"the held-out text has {data.numel()} bytes; evaluating at length {length} needs at "
                          f"least {length + 1}: use a longer --text or shorter --eval-lens")
    idx = torch.arange(n)[:, None] * length + torch.arange(length + 1)
    windows = data[idx]
    return windows[:, :-1], windows[:, 1:]


# --- copy task --------------------------------------------------------------------------------------------------

IGNORE = -100  # cross_entropy's ignore_index: positions that are not part of a copy


def copy_vocab(symbols: int) -> tuple[int, int, int]:
    """(vocab size, separator id, start id): symbols are ``0 .. symbols-1``."""
    return symbols + 2, symbols, symbols + 1


def _strings(count: int, n: int, symbols: int, generator: torch.Generator) -> Tensor:
    """``count`` strings of ``n`` symbols, distinct when ``n <= symbols`` (then the copy is fixed by content)."""
    if n <= symbols:
        return torch.rand(count, symbols, generator=generator).argsort(dim=1)[:, :n]
    return torch.randint(0, symbols, (count, n), generator=generator)


def copy_example(n: int, strings: Tensor, symbols: int) -> tuple[Tensor, Tensor]:
    """``[start, x_1..x_n, sep, x_1..x_n]`` (length ``2n + 2``) and per-token labels: the copied symbols, else IGNORE.

    Labels sit on the token they name; the model at position ``t`` is scored against the label at ``t + 1``.
    """
    count = strings.shape[0]
    _, sep, start = copy_vocab(symbols)
    tokens = torch.cat([torch.full((count, 1), start), strings, torch.full((count, 1), sep), strings], dim=1)
    labels = torch.full_like(tokens, IGNORE)
    labels[:, n + 2:] = strings
    return tokens, labels


def _shift(labels: Tensor, length: int) -> Tensor:
    """Targets for the first ``length`` positions: the label of the next token (IGNORE past the end)."""
    pad = torch.full((*labels.shape[:-1], max(0, length + 1 - labels.shape[-1])), IGNORE, dtype=labels.dtype)
    return torch.cat([labels, pad], dim=-1)[..., 1: length + 1]


def copy_train_batch(length: int, batch_size: int, symbols: int,
                     generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Rows of ``length`` tokens packed with copy examples of random lengths ``n = 1 .. length/2 - 1``.

    Varying ``n`` makes position alone insufficient (the copy offset changes from example to example); the last
    example of a row is cut to fill it exactly (its cut part is not scored).
    """
    rows_t: list[Tensor] = []
    rows_y: list[Tensor] = []
    n_max = length // 2 - 1
    for _ in range(batch_size):
        parts_t: list[Tensor] = []
        parts_y: list[Tensor] = []
        used = 0
        while used < length:
            n = int(torch.randint(1, n_max + 1, (1,), generator=generator))
            t, y = copy_example(n, _strings(1, n, symbols, generator), symbols)
            parts_t.append(t[0])
            parts_y.append(y[0])
            used += t.shape[1]
        rows_t.append(torch.cat(parts_t)[:length])
        rows_y.append(_shift(torch.cat(parts_y), length))
    return torch.stack(rows_t), torch.stack(rows_y)


def copy_eval_batch(length: int, count: int, symbols: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``count`` single examples filling ``length`` exactly (``n = length/2 - 1``): inputs and targets."""
    n = length // 2 - 1
    tokens, labels = copy_example(n, _strings(count, n, symbols, generator), symbols)
    return tokens, _shift(labels, length)
