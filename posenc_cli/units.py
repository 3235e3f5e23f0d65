"""Parsing of context lengths ("128k") and token budgets ("2B"), stdlib only.

Context lengths use binary multiples because that is how context windows are quoted:
``k`` = 1024, ``M`` = 1024**2 (so ``128k`` = 131072, ``1M`` = 1048576). Token budgets
use decimal multiples because that is how datasets are counted: ``500M`` = 5e8, ``2B`` = 2e9.
"""

from __future__ import annotations

import math
import re

from posenc_cli.errors import PosencError

_NUMBER = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<suffix>[A-Za-z]?)\s*$")
# a token count may also be written in scientific notation (2e9, 1.5e12), as training budgets often are
_TOKENS = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)(?:[eE](?P<exp>[+-]?\d{1,3}))?\s*(?P<suffix>[A-Za-z]?)\s*$")

_LENGTH_SUFFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024**2, "M": 1024**2}
_TOKEN_SUFFIX: dict[str, int] = {"": 1, "k": 10**3, "K": 10**3, "m": 10**6, "M": 10**6, "b": 10**9, "B": 10**9,
                 "t": 10**12, "T": 10**12}

#: Longest context length (positions) any option or library call accepts: 2**31 = 2048M. The longest shipped window
#: is 10M (Llama 4 Scout), so this leaves 200x headroom, and it is the most a position index can reach in the engines
#: posenc configures: llama.cpp's llama_pos is int32 (positions 0 .. 2**31 - 1), and vLLM/SGLang compare
#: max_model_len with int32 limits. A longer max_position_embeddings would be a config no engine can serve.
MAX_LENGTH = 1 << 31


def parse_length(text: str | int, *, name: str = "length") -> int:
    """Parse a positive context length: ``4096``, ``4k``, ``128k``, ``1M``, ``1.5k``.

    The result must be a whole number of positions (``1.5k`` = 1536 is fine, ``1.3`` is not).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        match = _NUMBER.match(str(text))
        if not match or match["suffix"] not in _LENGTH_SUFFIX:
            raise PosencError(
                f"{name} {str(text)!r} is not a length; use a positive whole number, optionally with k (x1024) "
                "or M (x1024^2), e.g. 4096, 32k, 128k, 1M"
            )
        value = float(match["num"]) * _LENGTH_SUFFIX[match["suffix"]]
    if not math.isfinite(value) or value != int(value):
        raise PosencError(f"{name} {str(text)!r} is not a whole number of positions")
    if value < 1:
        raise PosencError(f"{name} {str(text)!r} must be at least 1")
    if value > MAX_LENGTH:
        raise PosencError(f"{name} {str(text)!r} is too large; allowed 1 to {MAX_LENGTH} ({format_length(MAX_LENGTH)})")
    return int(value)


#: Largest token budget: 1e18 is a million times the biggest pre-training runs (~1e13 tokens) and fits an int64.
MAX_TOKENS = 10**18


def parse_tokens(text: str, *, name: str = "budget") -> int:
    """Parse a token budget: ``0``, ``none``, ``500M``, ``2B``, ``1T``, ``1.5B`` (decimal multiples), or scientific
    notation (``2e9``, ``1.5e12``); exact, whole numbers of tokens only."""
    if str(text).strip().lower() in {"none", "0"}:
        return 0
    match = _TOKENS.match(str(text))
    if not match or match["suffix"] not in _TOKEN_SUFFIX or (match["exp"] and match["suffix"]):
        raise PosencError(
            f"{{{name}}} {str(text)!r} is not a token count; use 0 or none, a number with K, M, B or T (decimal), "
            "or in scientific notation, e.g. 500M, 2B, 2e9", name)
    # exact integer arithmetic on the decimal digits: float would turn 2.01B into 2009999999
    whole, _, fraction = match["num"].partition(".")
    exponent = int(match["exp"] or 0) - len(fraction)
    numerator: int = int((whole or "0") + fraction) * _TOKEN_SUFFIX[match["suffix"]] * 10 ** max(exponent, 0)
    denominator: int = 10 ** max(-exponent, 0)
    if numerator > MAX_TOKENS * denominator:
        raise PosencError(f"{{{name}}} {str(text)!r} is too large; allowed 0 to {MAX_TOKENS:.0e} "
                          f"({format_tokens(MAX_TOKENS)})", name)
    if numerator % denominator:
        raise PosencError(f"{{{name}}} {str(text)!r} is not a whole number of tokens", name)
    return numerator // denominator


def decimal_length_note(text: str | int, value: int) -> str | None:
    """A note for a length written as a plain round number (``128000``) where the binary multiple (``128k``) may
    have been meant: windows are quoted in binary multiples, so ``128000 tokens is 125k; 128k is 131,072``. None
    for anything else (``128k``, ``131072``, ``5000``)."""
    if not str(text).strip().isdigit() or value < 1000 or value % 1000:
        return None
    if value % 10**6 == 0:
        meant = f"{value // 10**6}M", value // 10**6 * 1024**2
    else:
        meant = f"{value // 1000}k", value // 1000 * 1024
    spelled = format_length(value)
    spelled = spelled if spelled != str(value) else f"{value / 1024:.10g}k"
    return f"{value} tokens is {spelled}; {meant[0]} is {meant[1]:,}"


def format_length(n: int) -> str:
    """Shortest exact spelling of a length: 131072 -> '128k', 1048576 -> '1M', 5000 -> '5000'."""
    if n >= 1024**2 and n % 1024**2 == 0:
        return f"{n // 1024**2}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


def format_number(x: float) -> str:
    """A number as a flag value or file-name part: whole numbers without a decimal point, others exactly (repr)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def format_tokens(n: int) -> str:
    """Human spelling of a token count: 2000000000 -> '2B'."""
    for div, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= div:
            value = n / div
            return f"{value:g}{suffix}"
    return str(n)


def check_int(value: int, name: str, minimum: int, maximum: int) -> int:
    """``value`` if it is a whole number in [minimum, maximum]; else one PosencError naming it and the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise PosencError(f"{name} {value!r} is out of range; allowed {minimum:,} to {maximum:,}")
    return value


def check_number(value: float, name: str, minimum: float, maximum: float, *, strict: bool = True) -> float:
    """``value`` if finite and in (minimum, maximum] (``strict``) or [minimum, maximum]; else one PosencError."""
    low = "greater than" if strict else "at least"
    allowed = f"a finite number {low} {minimum:g} and at most {maximum:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PosencError(f"{name} {value!r} is not allowed; use {allowed}")
    if (value <= minimum if strict else value < minimum) or value > maximum:
        raise PosencError(f"{name} {value:g} is out of range; use {allowed}")
    return float(value)


def check_finite(value: float, name: str, *, positive: bool = False) -> float:
    """Reject NaN and infinities (and, if asked, values <= 0) with a message naming the option."""
    if not math.isfinite(value):
        raise PosencError(f"{name} must be a finite number, got {value}")
    if positive and value <= 0:
        raise PosencError(f"{name} must be greater than 0, got {value:g}")
    return float(value)


_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[A-Za-z]*)\s*$")
#: memory sizes: binary units (KiB, MiB, GiB, TiB: powers of 2) and decimal ones (KB, MB, GB, TB: powers of 10), as
#: device makers (GB) and allocators (GiB) quote them; a bare number is bytes
_SIZE_UNIT = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "pib": 1024**5,
              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
#: largest memory size accepted: 1 PiB (a rack of accelerators is a few hundred TiB)
MAX_SIZE = 1 << 50


def parse_size(text: str | int, *, name: str = "size") -> int:
    """A memory size in bytes: ``24GiB`` = 24 x 2**30, ``24GB`` = 24 x 10**9, ``512MiB``, ``1.5GiB``, ``8000000000``
    (bytes); units are case-insensitive, a space between number and unit is allowed; a fraction with a unit is
    rounded down to whole bytes, a bare number must be whole. ``24G`` is refused: a bare G is GiB to llama.cpp's and
    Ollama's users and GB to a card's box."""
    if isinstance(text, int) and not isinstance(text, bool):
        value, scale, fraction = int(text), 1, ""
    else:
        match = _SIZE.match(str(text))
        if not match or match["unit"].lower() not in _SIZE_UNIT:
            raise PosencError(
                f"{{{name}}} {str(text)!r} is not a memory size; use bytes or a number with KiB, MiB, GiB, TiB, PiB "
                "(powers of 2) or KB, MB, GB, TB, PB (powers of 10), e.g. 24GiB, 80GB, 512MiB", name)
        whole, _, fraction = match["num"].partition(".")
        value, scale = int((whole or "0") + fraction), _SIZE_UNIT[match["unit"].lower()]
    numerator: int = value * scale
    denominator: int = 10 ** len(fraction)
    if numerator % denominator and scale == 1:
        raise PosencError(f"{{{name}}} {str(text)!r} is not a whole number of bytes", name)
    size = numerator // denominator  # 3.81GiB is 4,090,956,349.44 bytes: the whole bytes in it
    if size < 1 or size > MAX_SIZE:
        raise PosencError(f"{{{name}}} {str(text)!r} is out of range; allowed 1 byte to 1 PiB", name)
    return size


def format_size(n: int) -> str:
    """Bytes in GiB with two decimals (``17179869184`` -> ``16.00 GiB``); below 1 GiB in MiB, below 1 MiB in KiB."""
    for unit, div in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"
