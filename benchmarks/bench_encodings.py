"""Time posenc's vectorized encodings against simple baselines, side by side in one run.

    python benchmarks/bench_encodings.py

Every number is the best of several timeit repeats (seconds per call). The table's last column is
``baseline time / posenc time``: above 1 means posenc is faster. Runs in well under a minute on a laptop CPU.

Baselines:
(a), (b) the lesson's pure-Python loops (tests/harness/reference.py), which always compute in Python floats (float64);
(c) the floor for a sinusoidal table: one np.sin and one np.cos over the (positions, d/2) angles, written into
    preallocated arrays, i.e. one transcendental per output element and nothing else;
(d) Hugging Face's ``apply_rotary_pos_emb`` (transformers, Llama) on torch CPU tensors, with cos/sin built the
    way ``LlamaRotaryEmbedding`` builds them; posenc's time includes forming its own cos/sin;
(e) the wall time of ``posenc verify`` with its defaults (the compute only: ``posenc_cli.rope.verify.run``);
(f) ``posenc verify --dtype bfloat16`` (three precision columns in bfloat16 via ml_dtypes) against (e);
(g) the search for the first position whose rotation equals its neighbour's (cos/sin table in bfloat16, 1M
    positions, 64 pairs: no collision, so the whole window is scanned) against comparing every pair of every
    position, chunk by chunk.
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "harness"))

import numpy as np  # noqa: E402
import reference as ref  # noqa: E402
from _timing import markdown_table  # noqa: E402

from posenc_cli.rope import precision  # noqa: E402
from posenc_cli.rope.encodings import apply_rope, rope_inv_freq, sinusoidal  # noqa: E402
from posenc_cli.rope.verify import VerifySettings, run  # noqa: E402

Row = tuple[str, float, str, float | None, str]


def best(fn: Callable[[], Any], repeat: int = 5, min_time: float = 0.05) -> float:
    """Best-of-``repeat`` seconds per call; each repeat loops enough calls to last ``min_time``."""
    fn()  # warm up (imports, caches, first-touch page faults)
    number = 1
    while True:
        t = timeit.timeit(fn, number=number)
        if t >= min_time or number >= 1 << 16:
            break
        number *= max(2, int(min_time / max(t, 1e-9)))
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number


def fmt_time(t: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def bench_sinusoidal_small() -> list[Row]:
    n, d = 2048, 128
    python = best(lambda: ref.sinusoidal_pe(n, d), repeat=3)
    rows = []
    for dtype in (np.float64, np.float32):
        t = best(lambda dtype=dtype: sinusoidal(n, d, dtype=dtype))
        rows.append((f"(a) sinusoidal({n}, {d}) {np.dtype(dtype).name}", t, "pure-Python loops", python, ""))
    return rows


def bench_rope_small() -> list[Row]:
    n, d = 2048, 128
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    rows_py = x.tolist()
    pos = np.arange(n)

    def python_rope() -> list[list[float]]:
        return [ref.apply_rope(rows_py[p], p) for p in range(n)]

    python = best(python_rope, repeat=3)
    rows = []
    for dtype in (np.float64, np.float32):
        xd = x.astype(dtype)
        t = best(lambda xd=xd: apply_rope(xd, pos))
        rows.append((f"(b) apply_rope {n} pos x {d} dims {np.dtype(dtype).name}", t,
                     "pure-Python per-position rotation", python, ""))
    return rows


def bench_sinusoidal_floor() -> list[Row]:
    n, d = 65536, 1024
    angles = np.arange(n, dtype=np.float32)[:, None] * np.power(10000.0, -np.arange(0, d, 2) / d).astype(np.float32)
    sin_out = np.empty_like(angles)
    cos_out = np.empty_like(angles)

    def floor() -> None:
        np.sin(angles, out=sin_out)
        np.cos(angles, out=cos_out)

    t_floor = best(floor, repeat=3)
    t = best(lambda: sinusoidal(n, d, dtype=np.float32), repeat=3)
    return [(f"(c) sinusoidal({n}, {d}) float32", t, f"np.sin + np.cos over ({n}, {d // 2}) float32", t_floor, "")]


def bench_rope_vs_hf() -> list[Row]:
    heads, seq, d = 32, 4096, 128
    label = f"(d) apply_rope half float32 q+k ({heads}, {seq}, {d})"
    try:
        import torch
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError as exc:  # torch / transformers are optional (the "parity" extra)
        return [(label, float("nan"), f"HF apply_rotary_pos_emb: skipped ({exc.name} not importable)", None, "")]

    rng = np.random.default_rng(1)
    q = rng.standard_normal((heads, seq, d), dtype=np.float32)
    k = rng.standard_normal((heads, seq, d), dtype=np.float32)
    pos = np.arange(seq)

    def ours() -> tuple[Any, Any]:
        return apply_rope(q, pos, layout="half"), apply_rope(k, pos, layout="half")

    # cos/sin exactly as LlamaRotaryEmbedding.forward makes them (float32 angles, emb = cat(freqs, freqs))
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    position_ids = torch.arange(seq)[None, :]

    def hf_cos_sin() -> tuple[Any, Any]:
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    cos, sin = hf_cos_sin()
    tq, tk = torch.from_numpy(q)[None], torch.from_numpy(k)[None]

    def hf_apply() -> tuple[Any, Any]:
        return apply_rotary_pos_emb(tq, tk, cos, sin)  # type: ignore[no-any-return]

    def hf_full() -> tuple[Any, Any]:
        c, s = hf_cos_sin()
        return apply_rotary_pos_emb(tq, tk, c, s)  # type: ignore[no-any-return]

    # same numbers before timing anything
    (oq, ok), (hq, hk) = ours(), hf_apply()
    diff = max(float(np.abs(oq - hq[0].numpy()).max()), float(np.abs(ok - hk[0].numpy()).max()))

    t = best(ours, repeat=3)
    threads = torch.get_num_threads()
    rows: list[Row] = []
    try:
        for n_threads in sorted({1, threads}):
            torch.set_num_threads(n_threads)
            rows.append((label, t, f"HF apply_rotary_pos_emb, torch {n_threads} thread(s), cos/sin precomputed",
                         best(hf_apply, repeat=3), f"max abs diff {diff:.1e}"))
            rows.append((label, t, f"HF cos/sin + apply_rotary_pos_emb, torch {n_threads} thread(s)",
                         best(hf_full, repeat=3), ""))
    finally:
        torch.set_num_threads(threads)
    return rows


def bench_verify() -> list[Row]:
    t = best(lambda: run(VerifySettings()), repeat=3, min_time=0.0)
    return [("(e) posenc verify (defaults), compute only", t, "-", None, "")]


def bench_half_precision() -> list[Row]:
    t64 = best(lambda: run(VerifySettings()), repeat=3, min_time=0.0)
    t16 = best(lambda: run(VerifySettings(dtype="bfloat16")), repeat=3, min_time=0.0)
    rows: list[Row] = [("(f) posenc verify --dtype bfloat16, compute only", t16, "(e) float64 defaults", t64,
                        "ratio < 1: the bfloat16 columns cost more")]
    inv = rope_inv_freq(128, 10000.0, dtype=np.float32).astype(np.float32)
    top = 1 << 20

    def every_pair() -> int | None:
        for start in range(0, top, 1 << 16):
            pos = np.arange(start, min(start + (1 << 16) + 1, top), dtype=np.int64)
            c, s = precision.rotation(pos, inv, "table", "bfloat16")
            same = np.all((c[1:] == c[:-1]) & (s[1:] == s[:-1]), axis=1)
            if same.any():
                return int(pos[1:][same][0])
        return None

    assert every_pair() == precision.first_identical(inv, "table", "bfloat16", top)
    ours = best(lambda: precision.first_identical(inv, "table", "bfloat16", top), repeat=3, min_time=0.0)
    rows.append(("(g) first identical position, 1M x 64 pairs", ours, "every pair compared", best(every_pair, 3, 0.0),
                 "fastest pair finds candidates"))
    return rows


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    rows: list[Row] = []
    for bench in (bench_sinusoidal_small, bench_rope_small, bench_sinusoidal_floor, bench_rope_vs_hf, bench_verify,
                  bench_half_precision):
        rows += bench()
    print(f"numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()}; "
          "best-of-N timeit, seconds per call; ratio = baseline / posenc (>1: posenc faster)")
    print()
    cells = []
    for name, ours, base_name, base, note in rows:
        ours_s = "-" if ours != ours else fmt_time(ours)
        base_s = "-" if base is None else fmt_time(base)
        ratio = "-" if base is None or ours != ours else f"{base / ours:.2f}x"
        cells.append([name, ours_s, base_name, base_s, ratio, note])
    print(markdown_table(["benchmark", "posenc", "baseline", "baseline time", "ratio", "note"], cells, align="lrlrrl"))


if __name__ == "__main__":
    main()
