"""`posenc inspect` on a GGUF with an 8B-sized tokenizer, next to gguf.GGUFReader parsing the same metadata.

The file (written to a temp folder with gguf.GGUFWriter) carries Llama 3's tokenizer sizes: 128,256 tokens, their
scores and types, 280,147 merges, and one small tensor. Each row is a fresh process, best-of-N after one warm-up
run, rounds interleaved so drift in machine load hits every row alike; ``python -c pass`` is the floor every
process pays, and ``posenc inspect`` on the docs' metadata-only GGUF (the same keys, no tokenizer) is the cost of
the command itself. Then the readers alone, in this process (best of N, no start-up): posenc's ``read_gguf`` and
``gguf.GGUFReader``.

    python benchmarks/bench_gguf.py            # N = 5 (GGUFReader takes seconds a run)
    python benchmarks/bench_gguf.py --runs 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _timing

N_TOKENS, N_MERGES = 128256, 280147
SMALL = Path(__file__).resolve().parents[1] / "docs" / "examples" / "llama-3.1-8b.gguf"  # the same keys, 736 bytes


def write_file(path: Path) -> None:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("8B-sized tokenizer, one tensor")
    writer.add_context_length(131072)
    writer.add_embedding_length(4096)
    writer.add_block_count(32)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_rope_freq_base(500000.0)
    writer.add_rope_dimension_count(128)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list([f"Ġtoken{i}" for i in range(N_TOKENS)])
    writer.add_token_scores([0.0] * N_TOKENS)
    writer.add_token_types([1] * N_TOKENS)
    writer.add_token_merges([f"Ġa{i} b{i}" for i in range(N_MERGES)])
    writer.add_tensor("rope_freqs.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def best_in_process(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (best-of-N); default 5")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    py, posenc = sys.executable, _timing.posenc_command()
    with tempfile.TemporaryDirectory(prefix="posenc-bench-") as tmpdir:
        path = Path(tmpdir) / "llama-8b-tokenizer.gguf"
        write_file(path)
        size_mb = path.stat().st_size / 1e6
        commands = {
            'python -c "pass"': [py, "-c", "pass"],
            "posenc inspect FILE --json": [*posenc, "inspect", str(path), "--json"],
            "posenc inspect llama-3.1-8b.gguf --json (no tokenizer)": [*posenc, "inspect", str(SMALL), "--json"],
            'python -c "import gguf; gguf.GGUFReader(FILE)"': [py, "-c",
                                                               f"import gguf; gguf.GGUFReader({str(path)!r})"],
        }
        samples = _timing.interleaved(commands, args.runs)

        import gguf

        from posenc_cli.models.gguf.metadata import read_gguf

        in_process = {
            "posenc_cli.models.sources.read_gguf(FILE)": best_in_process(lambda: read_gguf(path), args.runs),
            "gguf.GGUFReader(FILE)": best_in_process(lambda: gguf.GGUFReader(path), args.runs),
        }
    best = {name: _timing.best(s) * 1000 for name, s in samples.items()}
    floor, ours = best['python -c "pass"'], best["posenc inspect FILE --json"]
    print(f"Python {sys.version.split()[0]}; a {size_mb:.1f} MB GGUF with {N_TOKENS:,} tokens and {N_MERGES:,} "
          f"merges; best of {args.runs} runs after one warm-up, fresh process each\n")
    rows = [[f"`{name}`", f"{best[name]:.1f}", f"{_timing.median(samples[name]) * 1000:.1f}",
             f"{best[name] / floor:.2f}x", f"{best[name] / ours:.2f}x"] for name in commands]
    print(_timing.markdown_table(["command", "best ms", "median ms", "vs python -c pass", "vs posenc inspect"],
                                 rows))
    ours_in = in_process["posenc_cli.models.sources.read_gguf(FILE)"] * 1000
    print(f"\nthe readers alone, in one process (best of {args.runs}):\n")
    print(_timing.markdown_table(["reader", "best ms", "vs read_gguf"],
                                 [[f"`{name}`", f"{t * 1000:.1f}", f"{t * 1000 / ours_in:.1f}x"]
                                  for name, t in in_process.items()]))


if __name__ == "__main__":
    main()
