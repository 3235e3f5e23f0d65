"""Reduced precision: the three loss modes against an independent rounding oracle, collision search against brute
force, dtype honesty of every reported intermediate, and ``verify --dtype bfloat16|float16`` / ``--config``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from clihelpers import assert_usage_error, ok, run, write_json

from posenc_cli.rope import precision
from posenc_cli.rope import verify as core
from posenc_cli.rope.encodings import rope_inv_freq

pytestmark = pytest.mark.numeric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def bf16_round(x: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Round float32 values to bfloat16 (nearest, ties to even) by bit arithmetic: no ml_dtypes involved."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def low_round(x: npt.NDArray[Any], dtype: str) -> npt.NDArray[np.float32]:
    if dtype == "bfloat16":
        return bf16_round(x)
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


INV = rope_inv_freq(64, 10000.0, dtype=np.float32).astype(np.float32)


@pytest.mark.parametrize("dtype", precision.HALF_DTYPES)
@pytest.mark.parametrize("mode", precision.LOSS_MODES)
def test_each_mode_rounds_where_it_says(dtype: str, mode: str) -> None:
    """Each mode against a plain re-statement with an independent bfloat16 rounding: equal to the last bit,
    except that cos/sin of one float32 angle may differ by an ulp between libms, which a half-precision rounding
    turns into at most one ulp of the half dtype."""
    pos = np.arange(0, 70000, 37, dtype=np.int64)
    cos, sin = precision.rotation(pos, INV, mode, dtype, attention_factor=1.25)
    if mode == "positions":
        angles = low_round(pos.astype(np.float32), dtype)[:, None] * INV
    elif mode == "angles":
        with np.errstate(over="ignore", invalid="ignore"):
            angles = low_round(low_round(pos.astype(np.float32), dtype)[:, None] * low_round(INV, dtype), dtype)
    else:
        angles = pos.astype(np.float32)[:, None] * INV
    with np.errstate(invalid="ignore"):
        want_cos = low_round(np.cos(angles) * np.float32(1.25), dtype)
        want_sin = low_round(np.sin(angles) * np.float32(1.25), dtype)
    got_cos, got_sin = cos.astype(np.float32), sin.astype(np.float32)
    ulp = 1.25 * precision.eps(dtype)
    for got, want in ((got_cos, want_cos), (got_sin, want_sin)):
        finite = np.isfinite(want)
        assert np.array_equal(np.isfinite(got), finite)
        assert np.all(np.abs(got[finite] - want[finite]) <= ulp)
        assert np.mean(got[finite] == want[finite]) > 0.999  # a differing ulp is rare, not the rule


def brute_first_identical(inv: npt.NDArray[np.float32], mode: str, dtype: str, top: int) -> int | None:
    pos = np.arange(top, dtype=np.int64)
    c, s = precision.rotation(pos, inv, mode, dtype)
    for p in range(1, top):
        if np.array_equal(c[p], c[p - 1]) and np.array_equal(s[p], s[p - 1]):
            return p
    return None


@pytest.mark.parametrize("dtype", precision.HALF_DTYPES)
@pytest.mark.parametrize("mode", precision.LOSS_MODES)
def test_first_identical_matches_brute_force(dtype: str, mode: str) -> None:
    inv = INV[::8].copy()
    top = 5000
    assert precision.first_identical(inv, mode, dtype, top) == brute_first_identical(inv, mode, dtype, top)


@pytest.mark.parametrize(("dtype", "first"), [("bfloat16", 257), ("float16", 2049)])
def test_positions_merge_where_the_significand_runs_out(dtype: str, first: int) -> None:
    # bfloat16 keeps 8 significant bits, float16 11: 2**8 + 1 and 2**11 + 1 round down to their neighbour
    assert precision.first_identical(INV, "positions", dtype, 1 << 20) == first


def test_float32_positions_merge_at_two_to_the_24() -> None:
    inv = np.array([1.0], dtype=np.float32)
    start = (1 << 24) - 8
    pos = np.arange(start, start + 16, dtype=np.int64)
    c, _ = precision.rotation(pos, inv, "positions", "float32")
    same = [int(p) for p, a, b in zip(pos[1:], c[1:, 0], c[:-1, 0], strict=True) if a == b]
    assert same[0] == (1 << 24) + 1


def test_table_mode_does_not_grow_with_position_but_angles_do() -> None:
    rng = np.random.default_rng(0)
    grid, cols = precision.measure(INV, [("table", "bfloat16"), ("angles", "bfloat16")], max_position=1 << 17,
                                   tolerance=precision.default_tolerance("bfloat16"), trials=8, rng=rng)
    table, angles = cols
    early = [e for p, e in zip(grid, table.errors, strict=True) if p < 1000]
    late = [e for p, e in zip(grid, table.errors, strict=True) if p > 10000]
    # a cached table costs half an ulp of bfloat16 per entry, at every position alike
    assert max(late) < 4 * max(early) < precision.eps("bfloat16")
    assert angles.exceeds_from is not None and angles.exceeds_from < 1000
    assert max(angles.errors) > 10 * max(table.errors)


def test_float16_overflow_is_an_infinite_error_not_a_pass() -> None:
    rng = np.random.default_rng(0)
    _, cols = precision.measure(INV, [("positions", "float16")], max_position=1 << 17, tolerance=1e-3, trials=4,
                                rng=rng)
    assert cols[0].errors[-1] == float("inf")  # positions past 65504 are inf in float16
    assert cols[0].exceeds_from is not None


@pytest.mark.parametrize("dtype", precision.DTYPE_NAMES)
def test_every_reported_intermediate_has_the_checked_dtype(dtype: str) -> None:
    seen: list[tuple[str, str]] = []
    core.run(core.VerifySettings(dtype=dtype, max_position=1 << 14, trials=4),
             trace=lambda label, values: seen.append((label, values.dtype.name)))
    check_dtype = "float32" if dtype in precision.HALF_DTYPES else dtype
    labels = {label for label, _ in seen}
    # every check reports through the trace: a check that stops doing so fails here
    for label in ("rotated q", "rotated k", "scores", "rotated x", "interleaved scores", "rotate-half scores",
                  "sinusoidal table", "shifted prediction", "ALiBi bias", "attention logits", "attention weights",
                  "attention output"):
        assert label in labels, label
    for label, name in seen:
        if label in ("angles computed in float64", "cos/sin computed in float64"):
            assert name == "float64"
        elif label.startswith(("angles computed in", "cos/sin computed in")):
            assert name == "float32", (label, name)
        elif label.endswith((" in bfloat16", " in float16", " in float32", " in float64")):
            assert name == label.rsplit(" ", 1)[1], (label, name)
        else:
            assert name == check_dtype, (label, name)
    if dtype in precision.HALF_DTYPES:
        assert {f"positions in {dtype}", f"angles in {dtype}", f"cos/sin in {dtype}"} <= labels


def verify_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("verify", "--json", *args)
    assert result.stderr == "", result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_bfloat16_run_reports_three_modes_and_passes_the_transformers_path() -> None:
    code, report = verify_json("--dtype", "bfloat16")
    assert code == 0
    assert report["settings"]["tolerance"] == 2.0**-7
    assert report["settings"]["check_dtype"] == "float32"
    cols = {c["mode"]: c for c in report["precision"]["columns"]}
    assert set(cols) == {"positions", "angles", "table"}
    assert cols["positions"]["first_identical_position"] == 257
    assert cols["table"]["first_identical_position"] is None and cols["table"]["exceeds_tolerance_from"] is None
    assert cols["angles"]["exceeds_tolerance_from"] is not None
    assert any("float32 and cast cos/sin after" in line for line in report["precision"]["advice"])


def test_float16_table_breaks_near_a_million_and_exits_1() -> None:
    code, report = verify_json("--dtype", "float16", "--max-position", "1M")
    assert code == 1
    table = next(c for c in report["precision"]["columns"] if c["mode"] == "table")
    # float32 angles are off by ~position * 2**-24 rad: past ~800k that exceeds float16's epsilon
    assert 256 * 1024 < table["exceeds_tolerance_from"] <= 1 << 20
    code_short, _ = verify_json("--dtype", "float16", "--max-position", "256k")
    assert code_short == 0


def test_bfloat16_table_is_printed_with_its_findings() -> None:
    result = run("verify", "--dtype", "bfloat16", "--max-position", "64k")
    ok(result)
    assert "positions in bfloat16" in result.stdout and "cos/sin in bfloat16" in result.stdout
    assert "merge from position 257" in result.stdout
    assert "all checks passed" in result.stdout


# --config: a real model's RoPE


def test_config_reads_dtype_and_window_from_the_model(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    cfg["torch_dtype"] = "float16"
    code, report = verify_json("--config", write_json(tmp_path, cfg))
    assert report["dtype"] == "float16" and report["dtype_source"] == "torch_dtype in the config"
    (group,) = report["groups"]
    assert group["max_position"] == 131072 and group["rope_type"] == "llama3"
    assert code == (0 if report["passed"] else 1)
    code_bf, report_bf = verify_json("--config", write_json(tmp_path, cfg), "--dtype", "bfloat16")
    assert report_bf["dtype"] == "bfloat16" and report_bf["dtype_source"] == "--dtype"


def test_config_without_dtype_assumes_bfloat16() -> None:
    _, report = verify_json("--config", str(FIXTURES / "llama-3.1-8b.json"))
    if "torch_dtype" not in json.loads((FIXTURES / "llama-3.1-8b.json").read_text()):
        assert report["dtype"] == "bfloat16" and "assumed" in report["dtype_source"]


@pytest.mark.parametrize("fixture", ["deepseek-v3.json", "gpt-oss-20b.json", "gpt-neox-20b.json", "phi-2.json"])
def test_config_uses_inspects_numbers(fixture: str) -> None:
    """verify --config checks the frequencies, rotary dim and attention factor inspect reports at that window."""
    path = str(FIXTURES / fixture)
    _, report = verify_json("--config", path, "--max-position", "64k")
    inspected = json.loads(ok(run("inspect", path, "--json", "--seq-len", "64k")).stdout)
    assert len(report["groups"]) == len(inspected["layers"])
    for group, layer in zip(report["groups"], inspected["layers"], strict=True):
        assert group["max_position"] == 65536
        assert group["rotary_dim"] == layer["rotary_dim"] and group["theta"] == layer["rope_theta"]
        assert group["attention_factor"] == pytest.approx(layer["attention_factor"], rel=1e-12)


def test_attention_factor_does_not_change_relative_errors() -> None:
    """Errors are relative to factor**2 |q||k|, so a YaRN factor alone moves them only by rounding."""
    plain = precision.measure(INV, [("table", "float32")], max_position=4096, tolerance=1e-4, trials=4,
                              rng=np.random.default_rng(1))[1][0]
    scaled = precision.measure(INV, [("table", "float32")], max_position=4096, tolerance=1e-4, trials=4,
                               rng=np.random.default_rng(1), attention_factor=1.3)[1][0]
    assert max(scaled.errors) < 2 * max(plain.errors) + 1e-6


CONFIG_BAD = [
    (["--config", str(FIXTURES / "bloom-7b1.json")], "ALiBi"),
    (["--config", str(FIXTURES / "gpt2.json")], "learned absolute position embeddings"),
    (["--config", str(FIXTURES / "llama-3.1-8b.json"), "--dtype", "int8"], "int8"),
    (["--config", str(FIXTURES / "llama-3.1-8b.json"), "--max-position", "1"], "1"),
    (["--config", str(FIXTURES / "llama-3.1-8b.json"), "--head-dim", "64"], "--head-dim"),
    (["--config", "no-such-file.json"], "no-such-file.json"),
    (["--dtype", "bfloat16", "--max-position", "1"], "1"),
]


@pytest.mark.parametrize(("args", "needle"), CONFIG_BAD, ids=[" ".join(a[-2:]) for a, _ in CONFIG_BAD])
def test_config_bad_input_is_one_line(args: list[str], needle: str) -> None:
    assert_usage_error(run("verify", *args), needle)
