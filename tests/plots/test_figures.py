"""`posenc plot`: files per format, the data behind every figure, the large-input path, terminal, JSON, bad options.

No pixel snapshots: figures are checked through their artists (image arrays, line data, titles). Figures made by the
CLI are captured by wrapping ``figures.figure_bytes``, so the checks cover the command's own pipeline.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_could_not_run, assert_usage_error, ok
from clihelpers import run as run_posenc
from reference import alibi_slopes_official
from typer.testing import Result

from posenc_cli.plots import data, figures, terminal
from posenc_cli.rope import scaling
from posenc_cli.rope.encodings import alibi_bias, sinusoidal
from posenc_cli.rope.frequencies import RopeSpec, compute, default_inv_freq

pytestmark = pytest.mark.numeric

TWO_PI = 2 * math.pi
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF"}
GIB = 1 << 30
# RoFormer relative upper bound, d = 128, base 10000 (shared/reference/papers.md)
DECAY_ORACLE = {0: 32.5, 1: 31.538, 5: 20.845, 10: 17.954, 25: 14.237, 50: 12.629, 100: 10.227, 250: 6.548,
                1000: 4.471}


def run(*args: str) -> Result:
    """``posenc plot ARGS...``"""
    return run_posenc("plot", *args)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every Figure the CLI renders, in order (figures.figure_bytes is wrapped, not replaced)."""
    drawn: list[Any] = []
    original = figures.figure_bytes

    def spy(fig: Any, fmt: str) -> bytes:
        drawn.append(fig)
        return original(fig, fmt)

    monkeypatch.setattr(figures, "figure_bytes", spy)
    yield drawn


def line_by_gid(fig: Any, gid: str) -> Any:
    lines = [line for line in fig.axes[0].get_lines() if line.get_gid() == gid]
    assert len(lines) == 1, [line.get_gid() for line in fig.axes[0].get_lines()]
    return lines[0]


# ---------------------------------------------------------------- files and formats


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
@pytest.mark.parametrize("kind", [
    ["sinusoidal", "--max-len", "64", "--d-model", "16"],
    ["rope", "--max-len", "256", "--head-dim", "32", "--method", "yarn", "--factor", "4", "--original-max", "64"],
    ["alibi", "--heads", "3", "--seq-len", "8"],
    ["frequencies", "--head-dim", "64", "--theta", "500000", "--original-max", "8k", "--factor", "8"],
    ["decay", "--head-dim", "32", "--theta", "10000,500000", "--max-distance", "200"],
], ids=lambda k: k[0])
def test_each_kind_writes_each_format(in_tmp: Path, kind: list[str], fmt: str) -> None:
    target = in_tmp / f"out.{fmt}"
    result = ok(run(*kind, "-o", str(target)))
    assert result.stdout == ""  # the path goes to stderr
    assert result.stderr.strip() == f"wrote {target}"
    written = target.read_bytes()
    if fmt == "svg":
        assert b"<svg" in written[:2000]
    else:
        assert written.startswith(MAGIC[fmt])
    assert sorted(p.name for p in in_tmp.iterdir()) == [target.name]  # no temp file left behind


def test_suffix_is_case_insensitive(in_tmp: Path) -> None:
    ok(run("sinusoidal", "--max-len", "16", "--d-model", "8", "-o", "UPPER.PNG"))
    assert (in_tmp / "UPPER.PNG").read_bytes().startswith(MAGIC["png"])


def test_default_file_names(in_tmp: Path) -> None:
    ok(run("sinusoidal", "--max-len", "64", "--d-model", "16"))
    ok(run("rope", "--max-len", "128", "--head-dim", "16"))
    ok(run("rope", "--head-dim", "16", "--method", "linear", "--factor", "2", "--original-max", "64"))
    ok(run("alibi", "--heads", "4", "--seq-len", "8"))
    ok(run("frequencies", "--head-dim", "16", "--theta", "500000", "--original-max", "1k", "--factor", "8"))
    ok(run("decay", "--head-dim", "16", "--theta", "10000,500000", "--max-distance", "50"))
    assert sorted(p.name for p in in_tmp.iterdir()) == sorted([
        "posenc-sinusoidal-64x16.png", "posenc-rope-128x16.png", "posenc-rope-128x16-linear-x2.png",
        "posenc-alibi-4x8.png", "posenc-frequencies-d16-theta500000-x8.png", "posenc-decay-d16-theta10000-500000.png",
    ])


def test_base_is_a_hidden_alias_of_sinusoidal_theta(in_tmp: Path) -> None:
    """``plot sinusoidal --theta`` was ``--base``: the old name is still read, and no longer listed."""
    by_theta = json.loads(ok(run("sinusoidal", "--max-len", "8", "--d-model", "4", "--theta", "500", "--json",
                                 "-o", "a.png")).stdout)
    by_base = json.loads(ok(run("sinusoidal", "--max-len", "8", "--d-model", "4", "--base", "500", "--json",
                                "-o", "b.png")).stdout)
    assert by_theta["base"] == by_base["base"] == 500.0
    assert (in_tmp / "a.png").read_bytes() == (in_tmp / "b.png").read_bytes()
    assert_usage_error(run("sinusoidal", "--theta", "500", "--base", "600"), "--base is the old name of --theta")
    helped = ok(run("sinusoidal", "--help")).stdout
    assert "--theta" in helped and "--base" not in helped


def test_json_prints_path_and_parameters(in_tmp: Path) -> None:
    result = ok(run("sinusoidal", "--max-len", "64", "--d-model", "16", "--json", "--title", "hello"))
    info = json.loads(result.stdout)
    assert result.stderr == ""
    assert info["path"] == "posenc-sinusoidal-64x16.png" and (in_tmp / info["path"]).is_file()
    assert info["kind"] == "sinusoidal" and info["format"] == "png" and info["dpi"] == 150
    assert (info["max_len"], info["d_model"], info["base"], info["cmap"]) == (64, 16, 10000.0, "RdBu")
    assert info["aggregated"] is False and info["shape"] == [64, 16] and info["title"] == "hello"
    default = json.loads(ok(run("alibi", "--heads", "2", "--seq-len", "4", "--json")).stdout)
    assert default["title"] == "ALiBi causal bias: 2 heads, 4 positions (official slopes)"
    assert default["slopes"] == [2**-4, 2**-8]
    assert info["bytes"] == (in_tmp / info["path"]).stat().st_size


def test_json_for_scaled_rope_carries_the_rope_parameters(in_tmp: Path) -> None:
    args = ("--max-len", "512", "--head-dim", "64", "--method", "yarn", "--factor", "4", "--original-max", "128")
    info = json.loads(ok(run("rope", *args, "--json")).stdout)
    req = scaling.make_request("yarn", factor=4, original_max=128, head_dim=64)
    assert info["rope_parameters"] == scaling.rope_parameters(req)
    assert (info["factor"], info["original_max"], info["target"]) == (4.0, 128, 512)
    assert len(info["panels"]) == 2


def test_dpi_and_title_reach_the_figure(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("sinusoidal", "--max-len", "32", "--d-model", "8", "--dpi", "72", "--title", "My title", "-o", "a.png"))
    fig = captured[0]
    assert fig.dpi == 72
    assert fig.get_suptitle() == "My title"


# ---------------------------------------------------------------- the data behind each figure


def test_sinusoidal_heatmap_is_posencs_matrix(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("sinusoidal", "--max-len", "512", "--d-model", "128", "-o", "s.png"))
    fig = captured[0]
    image = fig.axes[0].images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), sinusoidal(512, 128))
    assert image.get_extent() == [0, 128, 512, 0]  # positions down, dimensions across
    title = fig.axes[0].get_title()
    assert "512 positions x 128 dims" in title and "aggregated" not in title
    assert fig.axes[0].get_xlabel().startswith("dimension") and fig.axes[0].get_ylabel() == "position"
    assert len(fig.axes) == 2  # the heatmap and its colorbar


def test_sinusoidal_odd_d_model_and_other_base() -> None:
    hm = data.heatmap_data_sinusoidal(40, 7, 1000, 1000, base=500.0)
    np.testing.assert_array_equal(hm.values, sinusoidal(40, 7, base=500.0))


def test_aggregated_heatmap_is_the_block_means_of_the_full_matrix() -> None:
    n, d, rows, cols = 3001, 203, 97, 50
    hm = data.heatmap_data_sinusoidal(n, d, rows, cols)
    assert hm.values.shape == (rows, cols) and hm.aggregated
    full = sinusoidal(n, d)
    re_, ce = data.block_edges(n, rows), data.block_edges(d, cols)
    expected = np.array([[full[re_[i]:re_[i + 1], ce[j]:ce[j + 1]].mean() for j in range(cols)]
                         for i in range(rows)])
    np.testing.assert_allclose(hm.values, expected, rtol=0, atol=1e-12)
    assert hm.aggregation_note == "aggregated to 97x50 (block means of the 3,001 x 203 matrix)"


def test_block_edges_cover_everything_once() -> None:
    for n, out in [(10, 3), (131072, 570), (7, 100), (1, 1), (1000, 999)]:
        edges = data.block_edges(n, out)
        assert edges[0] == 0 and edges[-1] == n
        assert np.all(np.diff(edges) >= 1) and edges.size - 1 == min(n, out)


def test_trig_block_means_closed_form() -> None:
    starts, sizes = np.array([0, 5, 1000, 77], dtype=np.int64), np.array([1, 3, 250, 1], dtype=np.int64)
    w = np.array([1.0, 0.3, 1e-4, TWO_PI, 2.5])  # includes a whole turn per position (degenerate case)
    for kind, f in (("sin", np.sin), ("cos", np.cos)):
        got = data.trig_block_means(starts, sizes, w, kind)
        expected = np.array([[f(np.arange(a, a + b) * wi).mean() for wi in w] for a, b in zip(starts, sizes,
                                                                                             strict=True)])
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)


def test_large_sinusoidal_is_aggregated_with_bounded_memory() -> None:
    tracemalloc.start()
    try:
        hm = data.heatmap_data_sinusoidal(131072, 4096, *data.pixel_grid(150))
        fig = figures.heatmap_figure([hm], dpi=150)
        png = figures.figure_bytes(fig, "png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < GIB // 8, peak  # far below the 1 GiB budget (the full matrix alone would be 4 GiB)
    assert png.startswith(MAGIC["png"])
    rows, cols = data.pixel_grid(150)
    assert hm.values.shape == (rows, cols)
    title = fig.axes[0].get_title()
    assert f"aggregated to {rows}x{cols}" in title and "131,072 x 4,096" in title
    # spot check: the first row block's mean of column 4095 (the slowest cosine) against a direct sum
    edges = data.block_edges(131072, rows)
    w = 10000.0 ** (-4094 / 4096)
    ce = data.block_edges(4096, cols)
    direct = np.mean([np.cos(np.arange(edges[0], edges[1]) * w)]) if ce[-2] == 4095 else None
    if direct is not None:
        assert hm.values[0, -1] == pytest.approx(direct, abs=1e-9)


def test_large_sinusoidal_cli_peak_rss_under_one_gib(tmp_path: Path) -> None:
    wrapper = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "sys.stderr.write(p.stderr.decode())\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    cmd = [sys.executable, "-m", "posenc_cli", "plot", "sinusoidal", "--max-len", "131072", "--d-model", "4096",
           "-o", str(tmp_path / "big.png")]
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, timeout=300)
    rc, peak_kib = map(int, proc.stdout.split())
    assert rc == 0, proc.stderr
    assert peak_kib * 1024 < GIB, peak_kib
    assert (tmp_path / "big.png").read_bytes().startswith(MAGIC["png"])


def _scaled_inv_freq(method: str, **kwargs: Any) -> tuple[Any, Any]:
    """inv_freq the way `posenc scale --explain` gets it: make_request -> rope_parameters -> compute."""
    req = scaling.make_request(method, **kwargs)
    spec = RopeSpec(scaling.rope_parameters(req), req.head_dim, scaling.max_position_embeddings(req))
    return req, compute(spec, req.target)


@pytest.mark.parametrize("method,extra", [
    ("yarn", ()), ("linear", ()), ("ntk", ()), ("dynamic", ()), ("llama3", ()),
    ("yarn", ("--beta-fast", "16", "--beta-slow", "2", "--no-truncate")),
])
def test_rope_side_by_side_panels(in_tmp: Path, captured: list[Any], method: str, extra: tuple[str, ...]) -> None:
    ok(run("rope", "--max-len", "256", "--head-dim", "64", "--theta", "10000", "--method", method, "--factor", "4",
           "--original-max", "64", *extra, "-o", "r.png"))
    fig = captured[0]
    left, right = fig.axes[0].images[0], fig.axes[1].images[0]
    kwargs: dict[str, Any] = {"factor": 4.0, "original_max": 64, "theta": 10000.0, "head_dim": 64}
    if extra:
        kwargs.update(beta_fast=16.0, beta_slow=2.0, truncate=False)
    req, freqs = _scaled_inv_freq(method, **kwargs)
    pos = np.arange(256, dtype=np.float64)[:, None]
    original = default_inv_freq(10000.0, 64).astype(np.float64)
    np.testing.assert_allclose(np.asarray(left.get_array()), np.cos(pos * original), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(right.get_array()), np.cos(pos * freqs.inv_freq.astype(np.float64)),
                               rtol=0, atol=1e-12)
    assert fig.axes[1].get_title().startswith(f"{method} x4: 64 -> 256")
    # the trained length is marked on both panels
    for ax in fig.axes[:2]:
        assert any(line.get_ydata()[0] == 64 for line in ax.get_lines())


def test_rope_linear_panel_matches_the_published_formula(in_tmp: Path, captured: list[Any]) -> None:
    """Position interpolation: theta_i / s, independent of posenc's frequency code."""
    ok(run("rope", "--max-len", "128", "--head-dim", "32", "--method", "linear", "--factor", "2",
           "--original-max", "64", "-o", "r.png"))
    inv = 1.0 / (10000.0 ** (np.arange(0, 32, 2) / 32)) / 2
    expected = np.cos(np.arange(128.0)[:, None] * inv)
    np.testing.assert_allclose(np.asarray(captured[0].axes[1].images[0].get_array()), expected, atol=1e-6)


def test_rope_unscaled_single_panel(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("rope", "--max-len", "100", "--head-dim", "16", "--theta", "500000", "-o", "r.png"))
    fig = captured[0]
    assert len(fig.axes) == 2  # one panel + colorbar
    expected = np.cos(np.arange(100.0)[:, None] * default_inv_freq(500000.0, 16).astype(np.float64))
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), expected, atol=1e-12)


def test_rope_large_input_aggregates() -> None:
    maps = data.rope_cos_data(1 << 20, 128, 10000.0, 300, 40)
    hm = maps[0]
    assert hm.values.shape == (300, 40) and hm.aggregated
    # row block 0 of pair-block 0 by brute force
    rows, cols = data.block_edges(1 << 20, 300), data.block_edges(64, 40)
    inv = default_inv_freq(10000.0, 128).astype(np.float64)
    p = np.arange(rows[0], rows[1], dtype=np.float64)[:, None]
    direct = np.cos(p * inv[cols[0]:cols[1]]).mean()
    assert hm.values[0, 0] == pytest.approx(direct, abs=1e-9)


def test_decay_curve_hits_the_roformer_oracle(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("decay", "--head-dim", "128", "--theta", "10000,500000", "-o", "d.png"))
    fig = captured[0]
    line = line_by_gid(fig, "base:10000")
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    assert x[0] == 0 and x[-1] == 1000
    for r, expected in DECAY_ORACLE.items():
        assert round(float(y[x == r][0]), 3) == expected, r
    other = np.asarray(line_by_gid(fig, "base:500000").get_ydata())
    assert other[0] == pytest.approx(32.5)  # B(0) = (d/2 + 1) / 2 for any base
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["base 10000", "base 500000"]


def test_decay_bound_matches_the_definition() -> None:
    d, base = 16, 777.0
    curve = data.decay_bound(d, base, 40, chunk=7)  # chunking must not matter
    theta = base ** (-2 * np.arange(d // 2) / d)
    for r in range(41):
        s = [sum(np.exp(1j * r * theta[i]) for i in range(j)) for j in range(1, d // 2 + 1)]
        assert curve.bound[r] == pytest.approx(2 / d * sum(abs(v) for v in s), rel=1e-12)


FREQ_ARGS = ("--head-dim", "128", "--theta", "500000", "--original-max", "8k", "--factor", "8")


def test_frequency_chart_lines_are_scales_wavelengths(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("frequencies", *FREQ_ARGS, "--methods", "linear,ntk,dynamic,yarn,llama3", "-o", "f.png"))
    fig = captured[0]
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    unscaled = default_inv_freq(500000.0, 128).astype(np.float64)
    np.testing.assert_allclose(line_by_gid(fig, "unscaled").get_ydata(), TWO_PI / unscaled, rtol=1e-15)
    for method in ("linear", "ntk", "dynamic", "yarn", "llama3"):
        _, freqs = _scaled_inv_freq(method, factor=8.0, original_max=8192, theta=500000.0, head_dim=128)
        y = np.asarray(line_by_gid(fig, f"method:{method}").get_ydata())
        np.testing.assert_allclose(y, TWO_PI / freqs.inv_freq.astype(np.float64), rtol=1e-15)
    assert line_by_gid(fig, "original_max").get_ydata()[0] == 8192
    assert line_by_gid(fig, "target").get_ydata()[0] == 65536
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "YaRN ramp: pairs 18-35" in labels  # papers.md: d=128, base 5e5, L=8192 -> (18, 35)
    assert "llama3 blended band: wavelengths 2,048-8,192" in labels
    # llama3 per papers.md: 29 pairs kept, 6 blended, 29 divided by 8
    llama = np.asarray(line_by_gid(fig, "method:llama3").get_ydata()) / (TWO_PI / unscaled)
    assert np.sum(np.isclose(llama, 1.0)) == 29 and np.sum(np.isclose(llama, 8.0, rtol=1e-6)) == 29


def test_frequency_chart_yarn_line_equals_scale_explain(in_tmp: Path, captured: list[Any]) -> None:
    ok(run("frequencies", *FREQ_ARGS, "--methods", "yarn", "-o", "f.png"))
    y = np.asarray(line_by_gid(captured[0], "method:yarn").get_ydata())
    explain = run_posenc("scale", "yarn", "--original-max", "8k", "--factor", "8", "--theta", "500000",
                         "--head-dim", "128", "--explain")
    assert explain.exit_code == 0, explain.stderr
    rows = re.findall(r"^\W*(\d+)\W+([\d,]+\.\d\d)\W+([\d,]+\.\d\d)\W", explain.stderr, flags=re.MULTILINE)
    assert len(rows) == 64
    new = np.array([float(r[2].replace(",", "")) for r in rows])
    np.testing.assert_allclose(y, new, rtol=0, atol=0.005 + 1e-12 * new.max())


def test_frequency_chart_longrope_and_options(in_tmp: Path, captured: list[Any]) -> None:
    short = json.dumps([1.0 + i / 16 for i in range(8)])
    long = json.dumps([2.0 + i / 4 for i in range(8)])
    ok(run("frequencies", "--head-dim", "16", "--original-max", "4k", "--target", "16k", "--methods",
           "longrope,yarn", "--short-factor", short, "--long-factor", long, "--beta-fast", "8", "-o", "f.png"))
    fig = captured[0]
    _, freqs = _scaled_inv_freq("longrope", target=16384, original_max=4096, head_dim=16,
                                short_factor=json.loads(short), long_factor=json.loads(long))
    np.testing.assert_allclose(line_by_gid(fig, "method:longrope").get_ydata(),
                               TWO_PI / freqs.inv_freq.astype(np.float64), rtol=1e-15)
    assert freqs.details["factors_used"] == "long"  # at the target length, as scale --explain computes it
    _, yarn = _scaled_inv_freq("yarn", target=16384, original_max=4096, head_dim=16, beta_fast=8.0)
    np.testing.assert_allclose(line_by_gid(fig, "method:yarn").get_ydata(),
                               TWO_PI / yarn.inv_freq.astype(np.float64), rtol=1e-15)


@pytest.mark.parametrize("heads", [8, 12, 5])
def test_alibi_small_multiples(in_tmp: Path, captured: list[Any], heads: int) -> None:
    ok(run("alibi", "--heads", str(heads), "--seq-len", "16", "-o", "a.png"))
    fig = captured[0]
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head ")]
    assert len(panels) == heads
    bias = alibi_bias(heads, 16)
    slopes = alibi_slopes_official(heads)
    future = np.triu(np.ones((16, 16), dtype=bool), k=1)
    for h, ax in enumerate(panels):
        arr = ax.images[0].get_array()
        assert isinstance(arr, np.ma.MaskedArray)
        np.testing.assert_array_equal(np.ma.getmaskarray(arr), future)  # causal mask visible
        np.testing.assert_array_equal(arr.data[~future], bias[h][~future])
        distance = np.arange(16)[:, None] - np.arange(16)[None, :]
        np.testing.assert_allclose(arr.data[~future], (-slopes[h] * distance)[~future])
        assert f"= {slopes[h]:.4g}" in ax.get_title()
        cmap = ax.images[0].get_cmap()
        bad = tuple(cmap.get_bad()[:3])
        assert bad not in {tuple(cmap(v)[:3]) for v in np.linspace(0, 1, 256)}  # masked cells: a colour of their own
    legend = fig.legends[0]
    assert "masked" in legend.get_texts()[0].get_text()


# ---------------------------------------------------------------- terminal


def test_terminal_draws_half_blocks_and_writes_nothing(in_tmp: Path) -> None:
    result = ok(run("sinusoidal", "--max-len", "512", "--d-model", "128", "--terminal", "--width", "80"))
    assert terminal.HALF_BLOCK in result.stdout
    assert "\x1b[38;2;" in result.stdout  # 24-bit colour, foreground = top cell
    assert "48;2;" in result.stdout  # and background = bottom cell
    assert "aggregated to" in result.stdout
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    widths = {len(line) for line in plain.splitlines() if terminal.HALF_BLOCK * 10 in line}
    assert max(widths) <= 80
    assert list(in_tmp.iterdir()) == []


def test_terminal_rope_and_alibi(in_tmp: Path) -> None:
    rope = ok(run("rope", "--max-len", "8k", "--method", "yarn", "--factor", "4", "--original-max", "2k",
                  "--terminal", "--width", "100"))
    assert rope.stdout.count(terminal.HALF_BLOCK) > 100 and "yarn x4" in rope.stdout
    alibi = ok(run("alibi", "--heads", "4", "--seq-len", "16", "--terminal", "--width", "100"))
    assert terminal.HALF_BLOCK in alibi.stdout and "head 4" in alibi.stdout
    assert list(in_tmp.iterdir()) == []


def test_terminal_heatmap_cells_match_the_data() -> None:
    hm = data.heatmap_data_sinusoidal(8, 4, 100, 100)
    palette = terminal.terminal_palette("gray")
    rgb = terminal._to_rgb(hm.values, -1.0, 1.0, palette)
    expected = np.rint((np.clip(hm.values, -1, 1) + 1) / 2 * 255)
    np.testing.assert_array_equal(rgb[..., 0], expected)
    text = terminal._half_blocks(rgb)
    assert text.plain.splitlines() == [terminal.HALF_BLOCK * 4] * 4  # 8 rows -> 4 lines of 4 cells


def test_terminal_never_loads_matplotlib() -> None:
    code = (
        "import sys\nfrom posenc_cli.cli import app\n"
        "app(['plot', 'sinusoidal', '--terminal', '--width', '40'], standalone_mode=False)\n"
        "sys.stderr.write('LOADED ' + str('matplotlib' in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED False" in proc.stderr, proc.stderr


def test_plot_needs_no_display_and_never_uses_pyplot(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY", "WAYLAND_DISPLAY")}
    code = (
        "import sys\nfrom posenc_cli.cli import app\n"
        f"app(['plot', 'rope', '--max-len', '64', '--head-dim', '16', '-o', {str(tmp_path / 'r.svg')!r}],"
        " standalone_mode=False)\n"
        "sys.stderr.write('PYPLOT ' + str('matplotlib.pyplot' in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "PYPLOT False" in proc.stderr, proc.stderr
    assert b"<svg" in (tmp_path / "r.svg").read_bytes()[:2000]


def test_importing_the_cli_does_not_load_numpy_or_matplotlib() -> None:
    code = ("import sys, posenc_cli.cli, posenc_cli.cli.plot\n"
            "print(any(m in sys.modules for m in ('numpy', 'matplotlib', 'rich')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written

BAD = [
    (["nosuch"], "nosuch"),
    (["rope", "--method", "magic", "--factor", "2", "--original-max", "4k"], "magic"),
    (["frequencies", "--original-max", "4k", "--factor", "2", "--methods", "linear,magic"], "magic"),
    (["frequencies", "--original-max", "4k", "--factor", "2", "--methods", ","], "--methods"),
    (["frequencies", "--original-max", "4k", "--factor", "2", "--methods", "yarn,yarn"], "twice"),
    (["sinusoidal", "--max-len", "0"], "--max-len"),
    (["sinusoidal", "--max-len", "-5"], "--max-len"),
    (["sinusoidal", "--d-model", "0"], "--d-model"),
    (["sinusoidal", "--d-model", "-128"], "--d-model"),
    (["sinusoidal", "--dpi", "0"], "--dpi"),
    (["alibi", "--heads", "0"], "--heads"),
    (["alibi", "--seq-len", "0"], "--seq-len"),
    (["alibi", "--seq-len", "100000"], "too large"),
    (["rope", "--max-len", "0"], "--max-len"),
    (["rope", "--head-dim", "63"], "even"),
    (["rope", "--head-dim", "0"], "--head-dim"),
    (["frequencies", "--head-dim", "63", "--original-max", "4k", "--factor", "2"], "even"),
    (["decay", "--head-dim", "7"], "even"),
    (["decay", "--max-distance", "0"], "--max-distance"),
    (["rope", "--theta", "nan"], "--theta"),
    (["rope", "--theta", "1"], "--theta"),
    (["frequencies", "--theta", "nan", "--original-max", "4k", "--factor", "2"], "--theta"),
    (["decay", "--theta", "10000,nan"], "--theta"),
    (["decay", "--theta", "10000,abc"], "--theta"),
    (["sinusoidal", "--theta", "nan"], "--theta"),
    (["sinusoidal", "--base", "nan"], "--theta"),  # --theta's old name, read as it
    (["rope", "--method", "yarn", "--factor", "nan", "--original-max", "4k"], "--factor"),
    (["rope", "--method", "yarn", "--factor", "0.5", "--original-max", "4k"], "--factor"),
    (["rope", "--method", "yarn", "--factor", "4"], "--original-max"),
    (["rope", "--factor", "4", "--original-max", "4k"], "--method"),
    (["rope", "--method", "llama3", "--factor", "4", "--original-max", "4k", "--low-freq-factor", "5"], "low"),
    (["frequencies", "--original-max", "4k", "--factor", "2", "--methods", "longrope"], "--short-factor"),
    (["sinusoidal", "-o", "missing/dir/out.png"], "does not exist"),
    (["sinusoidal", "-o", "out.jpg"], ".jpg"),
    (["sinusoidal", "-o", "out"], "no suffix"),
    (["decay", "-o", "out.txt"], ".txt"),
    (["sinusoidal", "--cmap", "no-such-map"], "no-such-map"),
    (["sinusoidal", "--terminal", "--cmap", "jet"], "jet"),
    (["sinusoidal", "--terminal", "-o", "x.png"], "--terminal"),
    (["sinusoidal", "--terminal", "--json"], "--json"),
    (["sinusoidal", "--width", "80"], "--terminal"),
    (["frequencies", "--terminal"], "line chart"),
    (["decay", "--terminal"], "line chart"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options_fail_cleanly(in_tmp: Path, args: list[str], needle: str) -> None:
    assert_usage_error(run(*args), needle)
    assert list(in_tmp.iterdir()) == []


def test_output_is_a_directory(in_tmp: Path) -> None:
    (in_tmp / "d.png").mkdir()
    assert_usage_error(run("sinusoidal", "-o", "d.png"), "directory")


def test_failed_write_leaves_the_target_unchanged(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = in_tmp / "keep.png"
    target.write_bytes(b"old contents")

    def fail(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    # a full device is no fault of the input: exit 3 (config.write_error)
    assert_could_not_run(run("sinusoidal", "--max-len", "16", "--d-model", "8", "-o", str(target)), "No space left")
    assert target.read_bytes() == b"old contents"
    assert sorted(p.name for p in in_tmp.iterdir()) == ["keep.png"]  # the temp file is gone


root = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")


@root
def test_read_only_target_is_refused(in_tmp: Path) -> None:
    target = in_tmp / "locked.png"
    target.write_bytes(b"old contents")
    target.chmod(0o444)
    assert_usage_error(run("sinusoidal", "-o", str(target)), "read-only")
    assert target.read_bytes() == b"old contents"
    assert sorted(p.name for p in in_tmp.iterdir()) == ["locked.png"]


@root
def test_read_only_folder_is_refused(in_tmp: Path) -> None:
    folder = in_tmp / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert_usage_error(run("sinusoidal", "-o", str(folder / "x.png")), "not writable")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_plot_without_kind_shows_help() -> None:
    result = run()
    assert "sinusoidal" in result.stdout and "frequencies" in result.stdout


def test_read_only_target_is_refused_even_as_root(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The permission check itself, with os.access answering as it would for a non-root user."""
    target = in_tmp / "locked.png"
    target.write_bytes(b"old contents")
    real_access = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        return False if Path(path) == target else real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    assert_usage_error(run("sinusoidal", "-o", str(target)), "read-only")
    assert target.read_bytes() == b"old contents"
    assert sorted(p.name for p in in_tmp.iterdir()) == ["locked.png"]
