"""`posenc verify` through the real CLI: exit codes, JSON shape, determinism and one-line errors."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, ok, run, write_json

from posenc_cli.rope import verify as core

pytestmark = pytest.mark.numeric


def verify_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("verify", "--json", *args)
    assert result.stderr == ""
    return result.exit_code, json.loads(result.stdout)


def test_verify_defaults_pass() -> None:
    result = run("verify")
    assert result.exit_code == 0, result.output
    assert "all checks passed" in result.stdout
    assert "FAIL" not in result.stdout
    assert result.stderr == ""


def test_verify_json_shape() -> None:
    code, report = verify_json()
    assert code == 0
    assert report["passed"] is True
    assert report["settings"]["max_position"] == 1 << 20  # the default 1M is binary
    names = [c["name"] for c in report["checks"]]
    assert "relative distance (interleaved)" in names and "relative distance (rotate-half)" in names
    assert len(names) == len(set(names))
    tolerance = report["settings"]["tolerance"]
    for check in report["checks"]:
        assert {"name", "passed", "max_abs_error", "max_rel_error"} <= set(check)
        assert isinstance(check["passed"], bool)
        for key in ("max_abs_error", "max_rel_error"):
            assert isinstance(check[key], float) and math.isfinite(check[key]) and check[key] >= 0
        if check["name"].startswith("relative distance"):
            assert check["passed"] == (check["max_rel_error"] <= tolerance)
    assert report["passed"] == all(c["passed"] for c in report["checks"])

    precision = report["precision"]
    positions = precision["positions"]
    assert positions, "the precision section has rows for a 1M window"
    assert positions == sorted(positions) and positions[-1] == report["settings"]["max_position"]
    by_key = {f'{c["mode"]}_{c["dtype"]}': c for c in precision["columns"]}
    assert set(by_key) == {"angles_float32", "angles_float64"}
    for column in by_key.values():
        assert column["positions"] == positions and len(column["rel_errors"]) == len(positions)
        # "exceeds from" is the first measured position over the tolerance
        first_bad = next((p for p, e in zip(positions, column["rel_errors"], strict=True) if e > tolerance), None)
        assert column["exceeds_tolerance_from"] == first_bad
    assert max(by_key["angles_float64"]["rel_errors"]) <= tolerance
    assert precision["verdict"] == "angles_float64" and precision["passed"] is True


def test_float32_fails_at_a_million_positions_but_float64_passes() -> None:
    code32, r32 = verify_json("--dtype", "float32", "--max-position", "1M")
    assert code32 == 1
    assert r32["passed"] is False
    rel32 = {c["name"]: c for c in r32["checks"] if c["name"].startswith("relative distance")}
    assert set(rel32) == {"relative distance (interleaved)", "relative distance (rotate-half)"}
    for check in rel32.values():
        assert check["passed"] is False
        assert check["max_rel_error"] > r32["settings"]["tolerance"]

    code64, r64 = verify_json("--dtype", "float64", "--max-position", "1M")
    assert code64 == 0 and r64["passed"] is True
    for check in r64["checks"]:
        assert check["passed"] is True


def test_float32_failure_is_reported_in_the_table_and_exit_code() -> None:
    result = run("verify", "--dtype", "float32")
    assert result.exit_code == 1
    assert "FAIL" in result.stdout
    assert "all checks passed" not in result.stdout


def test_float32_passes_in_a_short_window() -> None:
    code, report = verify_json("--dtype", "float32", "--max-position", "1k")
    assert code == 0, [c for c in report["checks"] if not c["passed"]]


def test_float32_sinusoidal_table_drifts_with_position() -> None:
    # the float32 table's angles are rounded like any float32 model's: error grows about linearly with position
    errors = []
    for window in ("1k", "4k"):
        _, report = verify_json("--dtype", "float32", "--max-position", window)
        row = next(c for c in report["checks"] if c["name"] == "sinusoidal shift is one rotation")
        errors.append(row["max_abs_error"])
    assert errors[1] > 2 * errors[0]
    _, report64 = verify_json("--max-position", "4k")
    row64 = next(c for c in report64["checks"] if c["name"] == "sinusoidal shift is one rotation")
    assert row64["passed"] and row64["max_abs_error"] < 1e-9


def test_layout_half_only() -> None:
    code, report = verify_json("--layout", "half")
    assert code == 0
    rel = [c["name"] for c in report["checks"] if c["name"].startswith("relative distance")]
    assert rel == ["relative distance (rotate-half)"]
    assert report["settings"]["layouts"] == ["rotate-half"]


def test_same_seed_same_json_other_seed_other_numbers() -> None:
    first = run("verify", "--json", "--seed", "7", "--max-position", "64k")
    second = run("verify", "--json", "--seed", "7", "--max-position", "64k")
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout
    other = run("verify", "--json", "--seed", "8", "--max-position", "64k")
    errors = [c["max_rel_error"] for c in json.loads(first.stdout)["checks"]]
    other_errors = [c["max_rel_error"] for c in json.loads(other.stdout)["checks"]]
    assert errors != other_errors


@pytest.mark.parametrize("max_position", ["2", "3", "5", "64", "65", "1025"])
def test_tiny_windows_run(max_position: str) -> None:
    result = run("verify", "--json", "--max-position", max_position)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"]["max_position"] == int(max_position)


@pytest.mark.parametrize("max_position", [64, 1000, 4096, 1 << 20])
def test_checks_stay_inside_the_window(monkeypatch: pytest.MonkeyPatch, max_position: int) -> None:
    """No check rotates a vector at a position >= --max-position; the relative-distance check reaches its top.

    (Windows below 64 are excluded: the permutation check always uses 48 positions and the precision table's
    reference scores sit below 64.)"""
    seen: list[int] = []
    real = core.apply_rope

    def recording(x: Any, positions: Any, **kwargs: Any) -> Any:
        pos = np.asarray(positions)
        seen.append(int(pos.max()))
        assert pos.min() >= 0
        return real(x, positions, **kwargs)

    monkeypatch.setattr(core, "apply_rope", recording)
    report = core.run(core.VerifySettings(max_position=max_position, trials=4))
    assert report.passed
    assert max(seen) <= max_position - 1
    # the shifts are meant to span the window: the largest position used is in its top 0.1%
    assert max(seen) >= max_position - 1 - max(1, max_position // 1024)


BAD_INPUTS = [
    (["--max-position", "abc"], "abc"),
    (["--max-position", "-5"], "-5"),
    (["--max-position", "1e999"], "1e999"),
    (["--max-position", "128kk"], "128kk"),
    (["--max-position", "0"], "0"),
    (["--max-position", "1"], "1"),
    (["--head-dim", "7"], "7"),
    (["--head-dim", "0"], "0"),
    (["--head-dim", "-2"], "-2"),
    (["--trials", "0"], "0"),
    (["--base", "nan"], "nan"),
    (["--base", "inf"], "inf"),
    (["--base", "1"], "1"),
    (["--tolerance", "nan"], "nan"),
    (["--tolerance", "0"], "0"),
    (["--layout", "diagonal"], "diagonal"),
    (["--dtype", "float8"], "float8"),
    (["--dtype", "bfloat"], "bfloat"),
    (["--head-dim", "100000000"], "100000000"),
    (["--head-dim", "16384", "--trials", "1"], "16384"),
    (["--no-such-option"], "--no-such-option"),
]


@pytest.mark.parametrize(("args", "bad"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_error_line(args: list[str], bad: str) -> None:
    assert_usage_error(run("verify", *args), bad)


# each value within its own range, but together past the core's 1 GiB workspace
@pytest.mark.parametrize("args", [["--head-dim", "4096", "--trials", "1024"],
                                  ["--head-dim", "2048", "--trials", "600"]])
def test_too_big_names_gib(args: list[str]) -> None:
    result = run("verify", *args)
    assert result.exit_code == 2
    assert "GiB" in result.stderr and "--head-dim" in result.stderr


@pytest.mark.parametrize(("args", "allowed"), [
    (["--head-dim", "100000000"], "2 to 4,096"), (["--trials", "1025"], "1 to 1,024"),
    (["--max-position", "129M"], "2 to 128M"), (["--seed", "-1"], "0 to"), (["--tolerance", "inf"], "at most 1"),
])
def test_out_of_range_names_the_range(args: list[str], allowed: str) -> None:
    assert_usage_error(run("verify", *args), args[0], allowed)


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == "posenc 0.1.0"


def test_cli_import_is_light() -> None:
    code = "import posenc_cli.cli, sys; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    modules = set(ast.literal_eval(out.stdout))
    assert "posenc_cli.cli" in modules  # the probe really imported the CLI
    for heavy in ("numpy", "matplotlib", "torch", "transformers"):
        assert heavy not in modules, f"{heavy} is imported by posenc_cli.cli"


def test_python_dash_m_verify() -> None:
    out = subprocess.run([sys.executable, "-m", "posenc_cli", "verify", "--max-position", "4k"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "all checks passed" in out.stdout
    assert out.stderr == ""


# --- the rope base is --theta (--base, its old name, stays accepted and hidden) --------------------------------

def test_theta_sets_the_base_and_base_is_its_hidden_old_name() -> None:
    code, by_theta = verify_json("--theta", "500000", "--max-position", "4k")
    _, by_base = verify_json("--base", "500000", "--max-position", "4k")
    assert code == 0 and by_theta == by_base
    assert by_theta["settings"]["base"] == 500000
    _, default = verify_json("--max-position", "4k")
    assert default["settings"]["base"] != by_theta["settings"]["base"]
    help_text = ok(run("verify", "--help")).stdout
    assert "--theta" in help_text and "--base" not in help_text


@pytest.mark.parametrize(("flag", "value"), [("--theta", "1"), ("--base", "nan")])
def test_a_bad_base_is_named_as_given(flag: str, value: str) -> None:
    assert_usage_error(run("verify", flag, value), f"{flag} must be")


def test_theta_and_its_old_name_together_are_refused() -> None:
    assert_usage_error(run("verify", "--theta", "1e4", "--base", "1e4"), "--base is the old name of --theta")


def test_theta_does_not_apply_with_a_config(tmp_path: Path) -> None:
    cfg = write_json(tmp_path, {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
                                "max_position_embeddings": 4096, "rope_theta": 1e4})
    assert_usage_error(run("verify", "--config", cfg, "--theta", "1e4"), "--theta does not apply with --config")
