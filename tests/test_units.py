"""Context lengths use binary multiples (k = 1024, M = 1024**2); token budgets use decimal ones."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.units import MAX_LENGTH, check_finite, format_length, parse_length, parse_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4k", 4 * 1024),
        ("128k", 128 * 1024),
        ("1M", 1024 * 1024),
        ("131072", 131072),
        ("1.5k", 1536),
        ("4K", 4096),
        ("2m", 2 * 1024 * 1024),
        (" 32k ", 32 * 1024),
        ("0.5k", 512),
        ("1", 1),
        (4096, 4096),
    ],
)
def test_parse_length_accepts(text: str | int, expected: int) -> None:
    assert parse_length(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "abc", "0", "0k", "-1k", "-5", "1e999", "1e3", "128kk", "12.5.3k", "1.3", "0.1k", "k", "4 k k",
     "4G", "inf", "nan", "1,024", "2T"],
)
def test_parse_length_rejects(text: str) -> None:
    with pytest.raises(PosencError) as info:
        parse_length(text, name="--max-position")
    message = str(info.value)
    assert "--max-position" in message
    assert repr(text) in message


def test_parse_length_rejects_non_positive_ints_and_huge_values() -> None:
    for bad in (0, -3, MAX_LENGTH + 1):
        with pytest.raises(PosencError):
            parse_length(bad)
    assert parse_length(MAX_LENGTH) == MAX_LENGTH
    with pytest.raises(PosencError):
        parse_length("9" * 400)
    with pytest.raises(PosencError, match="too large"):
        parse_length("1048577M")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500M", 500_000_000),
        ("2B", 2_000_000_000),
        ("1T", 1_000_000_000_000),
        ("0", 0),
        ("none", 0),
        ("None", 0),
        ("1.5B", 1_500_000_000),
        ("2.01B", 2_010_000_000),
        ("0.29B", 290_000_000),
        ("10K", 10_000),
        ("123", 123),
        ("2e9", 2_000_000_000),  # scientific notation, as training budgets are often written (issue 35)
        ("1.5E12", 1_500_000_000_000),
        ("1e18", 10**18),
    ],
)
def test_parse_tokens_accepts(text: str, expected: int) -> None:
    assert parse_tokens(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1B", "", "1e-3", "2.5e0", "2e9K", "1e19", "1e", "e9", "2Q", "1.5",
                                  "0.5K.5", "9" * 400])
def test_parse_tokens_rejects(text: str) -> None:
    with pytest.raises(PosencError) as info:
        parse_tokens(text, name="--budget")
    assert "--budget" in str(info.value)


@given(st.integers(1, 999), st.integers(0, 99))
@example(2, 1)  # float arithmetic gave 2009999999
@example(256, 27)
def test_parse_tokens_decimal_is_exact(whole: int, hundredths: int) -> None:
    # "w.hhB" is exactly w.hh * 10^9 tokens; no float truncation such as 2.01B -> 2009999999
    assert parse_tokens(f"{whole}.{hundredths:02d}B") == whole * 10**9 + hundredths * 10**7


@given(st.integers(1, 10**6), st.integers(0, 12))
def test_parse_tokens_scientific_is_exact(mantissa: int, exponent: int) -> None:
    assert parse_tokens(f"{mantissa}e{exponent}") == mantissa * 10**exponent
    assert parse_tokens(f"{mantissa}e{exponent}") == parse_tokens(f"{mantissa}E+{exponent}")


@pytest.mark.parametrize(("text", "note"), [
    ("128000", "128000 tokens is 125k; 128k is 131,072"),
    ("32000", "32000 tokens is 31.25k; 32k is 32,768"),
    ("1000000", "1000000 tokens is 976.5625k; 1M is 1,048,576"),
    ("128k", None), ("131072", None), ("5120", None), ("999", None), ("128001", None),
])
def test_a_round_decimal_length_gets_a_note(text: str, note: str | None) -> None:
    from posenc_cli.units import decimal_length_note

    assert decimal_length_note(text, parse_length(text)) == note


@pytest.mark.parametrize(("n", "text"), [(131072, "128k"), (1048576, "1M"), (5000, "5000"), (1536, "1536"),
                                         (4096, "4k"), (3 * 1024**2, "3M"), (1, "1")])
def test_format_length(n: int, text: str) -> None:
    assert format_length(n) == text


@given(st.integers(1, MAX_LENGTH))
def test_format_length_round_trips(n: int) -> None:
    text = format_length(n)
    assert parse_length(text) == n
    assert len(text) <= len(str(n))


def test_check_finite() -> None:
    assert check_finite(2.5, "--factor") == 2.5
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(PosencError, match="--factor"):
            check_finite(bad, "--factor")
    with pytest.raises(PosencError, match="--factor"):
        check_finite(0.0, "--factor", positive=True)


@pytest.mark.parametrize(("text", "expected"), [
    ("24GiB", 24 * 2**30), ("24GB", 24 * 10**9), ("24 gib", 24 * 2**30), ("512MiB", 512 * 2**20),
    ("1.5GiB", 3 * 2**29), ("80GB", 8 * 10**10), ("8000000000", 8 * 10**9), ("1TiB", 2**40), ("2KB", 2000),
    ("1PiB", 2**50), ("3.81GiB", 381 * 2**30 // 100), ("1.0000000001KiB", 1024),
    (4096, 4096),
])
def test_parse_size_reads_binary_and_decimal_units(text: str | int, expected: int) -> None:
    from posenc_cli.units import parse_size

    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["24G", "1.3", "0", "-1GiB", "2PiB", "1e9", "GiB", "", "0.0001KiB", "1.5EiB"])
def test_parse_size_rejects(text: str) -> None:
    from posenc_cli.units import parse_size

    with pytest.raises(PosencError):
        parse_size(text)


@given(st.integers(1, 2**50))
def test_format_size_is_within_half_a_unit_of_the_bytes(n: int) -> None:
    from posenc_cli.units import format_size

    number, unit = format_size(n).split()
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert abs(float(number) * scale - n) <= 0.005 * scale + 0.5
