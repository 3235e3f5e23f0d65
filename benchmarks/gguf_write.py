"""`posenc scale ... --config MODEL.gguf -o NEW.gguf`'s GGUF writer on a large GGUF, next to a plain file copy.

The file (a temp folder, stdlib-written): llama metadata, a 300-entry tokenizer, a llama3 ``rope_freqs`` tensor and
a few large F32 tensors of non-zero bytes (real data on disk, not a sparse hole), SIZE_GB in all. Each row is a
fresh process, best of N; the floor is ``shutil.copyfile`` of the same file (the kernel's copy on Linux). posenc's
row is :func:`posenc_cli.models.gguf.writer.rewrite` with the edit ``scale yarn`` makes on a Llama 3 GGUF (new keys,
``rope_freqs`` dropped, so every tensor after it moves). Peak RSS is each process's own ``ru_maxrss``.

    python benchmarks/gguf_write.py              # 1.5 GB, N = 3
    python benchmarks/gguf_write.py --gb 4 --runs 2
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COPY = """
import resource, shutil, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
POSENC = """
import resource, sys
from posenc_cli.models.gguf.header import FLOAT32, STRING, UINT32
from posenc_cli.models.gguf.writer import Edit, rewrite
rewrite(sys.argv[1], sys.argv[2], Edit(set_keys={"llama.context_length": (UINT32, 262144),
        "llama.rope.scaling.type": (STRING, "yarn"), "llama.rope.scaling.factor": (FLOAT32, 32.0),
        "llama.rope.scaling.original_context_length": (UINT32, 8192)}, tensors={"rope_freqs.weight": None}))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def write_file(path: Path, total: int, n_big: int = 4) -> None:
    """A llama GGUF of about ``total`` bytes: rope_freqs first, then ``n_big`` large F32 tensors."""
    kvs = [_s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
           _s("llama.context_length") + struct.pack("<II", 4, 131072),
           _s("llama.rope.freq_base") + struct.pack("<If", 6, 500000.0),
           _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 300) + b"".join(_s(f"t{i}") for i in range(300))]
    per = (total // n_big) // (4 << 20) * (1 << 20)  # float32 elements, whole MiB
    tensors = [("rope_freqs.weight", 64)] + [(f"blk.{i}.ffn.weight", per) for i in range(n_big)]
    infos, offset = [], 0
    for name, n in tensors:
        offset += -offset % 32
        infos.append(_s(name) + struct.pack("<IQIQ", 1, n, 0, offset))
        offset += 4 * n
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += bytes(-len(head) % 32)
    block = bytes(range(1, 256)) * 4112  # ~1 MiB of non-zero bytes
    with open(path, "wb") as fh:
        fh.write(head)
        for _, n in tensors:
            fh.write(bytes(-fh.tell() % 32))
            left = 4 * n
            while left:
                piece = block[: min(left, len(block))]
                fh.write(piece)
                left -= len(piece)


def timed(code: str, src: Path, dest: Path) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(src), str(dest)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    elapsed = time.perf_counter() - start
    dest.unlink()
    return elapsed, int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        src = Path(tmp) / "model.gguf"
        write_file(src, int(args.gb * 1e9))
        size = src.stat().st_size
        rows = {"shutil.copyfile (floor)": COPY, "posenc GGUF writer": POSENC}
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.runs):
            for label, code in rows.items():
                t, rss = timed(code, src, Path(tmp) / "out.gguf")
                if label not in best or t < best[label][0]:
                    best[label] = (t, max(rss, best.get(label, (0, 0))[1]))
        print(f"{size / 1e9:.2f} GB GGUF, best of {args.runs}")
        floor = best["shutil.copyfile (floor)"][0]
        for label, (t, rss) in best.items():
            print(f"  {label:26s} {t:7.2f} s  {size / t / 1e9:5.2f} GB/s  x{t / floor:4.2f}  "
                  f"peak RSS {rss / 1024:6.1f} MiB")


if __name__ == "__main__":
    main()
