"""posenc_cli.models.weights: the weights' size from headers, against the readers of the formats' own projects.

GGUF: every ggml type's block and name against llama.cpp's own ggml (``libggml-base`` shipped in llama-cpp-python
0.3.36, by ctypes: ``ggml_blck_size``, ``ggml_type_size``, ``ggml_type_name``); the bytes and elements of files
llama.cpp's own quantizer made (12 file types) and of a split GGUF against llama.cpp's ``llama_model_size`` and
``llama_model_n_params`` (a vocab_only load: the headers, no tensor); GGUFs written by ``gguf.GGUFWriter`` (raw
quantized tensors of every type gguf-py knows, hypothesis-drawn) against ``gguf.GGUFReader``'s ``n_bytes`` and
ggml's own header reader (``gguf_init_from_file`` with no data, ``gguf_get_tensor_size``). safetensors: files written by
``safetensors.torch.save_file`` (every dtype torch can store, hypothesis-drawn shapes, sharded with an index)
against ``safe_open``'s dtypes and shapes and torch's ``nbytes``; damaged files must be refused by safetensors too.
The Hub: the real ``huggingface_hub`` against a fake Hub endpoint (tests/harness/fake_hub.py) that answers Range
requests, in fresh interpreters (huggingface_hub reads ``HF_ENDPOINT``/``HF_HUB_OFFLINE`` at import). Sparse files
(a real header, then a hole) stand for 100 GB models: reading one must cost its header.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_hub import SHA, FakeHub, HubRepo, serve
from gguf_files import make_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.header import GGML_BLOCKS, GGML_TYPE_NAMES
from posenc_cli.models.weights import (
    Weights,
    gguf_weights,
    safetensors_file_weights,
    safetensors_weights,
    weights_of,
)

ROOT = Path(__file__).resolve().parents[2]
HUNDRED_GB = 100 * 10**9


def one_line_error(call: Any, *args: Any) -> str:
    with pytest.raises(PosencError) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ------------------------------------------------------------------------------------------------- ggml, by ctypes


class Ggml:
    """llama.cpp's ggml (libggml-base of the installed llama-cpp-python), for its type table and GGUF reader."""

    class InitParams(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    def __init__(self) -> None:
        llama = pytest.importorskip("llama_cpp.llama_cpp")
        libs = sorted((Path(llama.__file__).parent / "lib").glob("libggml-base.*"))
        if not libs:
            pytest.skip("llama-cpp-python ships no libggml-base")
        self.count: int = llama.GGML_TYPE_COUNT
        lib = ctypes.CDLL(str(libs[0]))
        lib.ggml_blck_size.restype, lib.ggml_blck_size.argtypes = ctypes.c_int64, [ctypes.c_int]
        lib.ggml_type_size.restype, lib.ggml_type_size.argtypes = ctypes.c_size_t, [ctypes.c_int]
        lib.ggml_type_name.restype, lib.ggml_type_name.argtypes = ctypes.c_char_p, [ctypes.c_int]
        lib.gguf_init_from_file.restype = ctypes.c_void_p
        lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, self.InitParams]
        lib.gguf_get_n_tensors.restype, lib.gguf_get_n_tensors.argtypes = ctypes.c_int64, [ctypes.c_void_p]
        lib.gguf_get_tensor_size.restype = ctypes.c_size_t
        lib.gguf_get_tensor_size.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.gguf_free.restype, lib.gguf_free.argtypes = None, [ctypes.c_void_p]
        self.lib = lib

    def sizes(self, path: Path) -> list[int]:
        """Each tensor's ggml_nbytes, as ggml's GGUF reader reads the header (the data is not loaded)."""
        ctx = self.lib.gguf_init_from_file(str(path).encode(), self.InitParams(True, None))
        assert ctx, f"ggml cannot read {path}"
        try:
            return [self.lib.gguf_get_tensor_size(ctx, i) for i in range(self.lib.gguf_get_n_tensors(ctx))]
        finally:
            self.lib.gguf_free(ctx)


@pytest.fixture(scope="module")
def ggml() -> Ggml:
    return Ggml()


def test_ggml_type_table_is_ggmls(ggml: Ggml) -> None:
    """Every type ggml knows, with its block size, block bytes and name; removed types (block size 0) absent."""
    live = {}
    for t in range(ggml.count):
        block = ggml.lib.ggml_blck_size(t)
        if block:
            live[t] = (block, ggml.lib.ggml_type_size(t), ggml.lib.ggml_type_name(t).decode())
    assert {t: (b, s) for t, (b, s, _) in live.items()} == GGML_BLOCKS
    assert {t: name for t, (_, _, name) in live.items()} == GGML_TYPE_NAMES


def test_gguf_py_agrees_with_ggml_except_where_it_lags(ggml: Ggml) -> None:
    """gguf-py's GGML_QUANT_SIZES is the other published table; the PyPI gguf 0.19.0 still gives Q8_1 40 bytes a
    block where ggml's block_q8_1 is 36 (the vendored gguf-py of llama.cpp says 2 + 2 + 32): ggml wins."""
    gguf = pytest.importorskip("gguf")
    differs = {int(t): v for t, v in gguf.GGML_QUANT_SIZES.items() if GGML_BLOCKS.get(int(t)) != v}
    assert set(differs) <= {int(gguf.GGMLQuantizationType.Q8_1)}, differs


# --------------------------------------------------------------------------------------------------- GGUF files


def gguf_types() -> list[int]:
    """The types gguf-py writes with ggml's block sizes (its Q8_1 is 4 bytes a block too long: left out)."""
    gguf = pytest.importorskip("gguf")
    return sorted(int(t) for t, v in gguf.GGML_QUANT_SIZES.items() if GGML_BLOCKS.get(int(t)) == v)


def write_gguf(path: Path, tensors: list[tuple[int, int, int]], alignment: int = 32) -> Path:
    """A GGUF by gguf.GGUFWriter: per tensor (ggml type, rows, blocks per row), raw bytes of that type."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    if alignment != 32:
        writer.add_custom_alignment(alignment)
    rng = np.random.default_rng(len(tensors))
    for i, (ggml_type, rows, blocks) in enumerate(tensors):
        qtype = gguf.GGMLQuantizationType(ggml_type)
        block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (rows, blocks * nbytes), dtype=np.uint8)
        if ggml_type in (0, 1):  # f32/f16: the writer takes them as arrays of that type
            raw = raw.view(np.float32 if ggml_type == 0 else np.float16)
            writer.add_tensor(f"blk.{i}.weight", raw)
        else:
            writer.add_tensor(f"blk.{i}.weight", raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_type_gguf_py_writes(tmp_path: Path, ggml: Ggml) -> None:
    gguf = pytest.importorskip("gguf")
    path = write_gguf(tmp_path / "all.gguf", [(t, 2 + t % 3, 1 + t % 2) for t in gguf_types()])
    reader = gguf.GGUFReader(str(path))
    weights = gguf_weights(path)
    assert weights.bytes == sum(int(t.n_bytes) for t in reader.tensors) == sum(ggml.sizes(path))
    assert weights.parameters == sum(int(t.n_elements) for t in reader.tensors)
    expected: dict[str, int] = {}
    for t in reader.tensors:
        name = ggml.lib.ggml_type_name(int(t.tensor_type)).decode()
        expected[name] = expected.get(name, 0) + int(t.n_bytes)
    assert weights.by_dtype == expected and weights.source == "GGUF tensor data" and weights.notes == ()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, 8, 12, 14, 20, 23, 30, 39]), st.integers(1, 3),
                          st.integers(1, 3)), min_size=1, max_size=6),
       st.sampled_from([32, 64, 128]))
def test_drawn_ggufs_match_ggml_and_gguf_py(tmp_path_factory: pytest.TempPathFactory, ggml: Ggml,
                                            tensors: list[tuple[int, int, int]], alignment: int) -> None:
    gguf = pytest.importorskip("gguf")
    path = write_gguf(tmp_path_factory.mktemp("drawn") / "m.gguf", tensors, alignment)
    weights = gguf_weights(path)
    assert weights.bytes == sum(ggml.sizes(path)) == sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)


def raw_gguf(path: Path, tensors: list[tuple[str, tuple[int, ...], int]], *, alignment: int = 32,
             hole: int = 0) -> Path:
    """A GGUF by the spec, by hand: any ggml type (gguf-py may not know it yet), the data a hole (sparse), plus
    ``hole`` bytes after it."""
    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    kv = string("general.architecture") + struct.pack("<I", 8) + string("llama")
    kv += string("general.alignment") + struct.pack("<II", 4, alignment)
    infos, offset = b"", 0
    for name, dims, ggml_type in tensors:
        block, nbytes = GGML_BLOCKS[ggml_type]
        size = nbytes * dims[0] // block * (len(dims) > 1 and dims[1] or 1)
        infos += string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)
        offset += size + (-size % alignment)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 2) + kv + infos
    head += bytes(-len(head) % alignment)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + offset + hole)
    return path


def test_types_gguf_py_lacks_or_sizes_otherwise(tmp_path: Path, ggml: Ggml) -> None:
    """q1_0, q2_0, nvfp4 (ggml 0.3.36; not all in the PyPI gguf-py) and q8_1 (sized otherwise by gguf-py 0.19.0):
    ggml's own reader is the reference."""
    tensors = [("a", (256, 3), 41), ("b", (128, 2), 42), ("c", (64, 5), 40), ("d", (96, 7), 9)]
    path = raw_gguf(tmp_path / "new.gguf", tensors)
    weights = gguf_weights(path)
    assert weights.bytes == sum(ggml.sizes(path))
    assert set(weights.by_dtype) == {"q1_0", "q2_0", "nvfp4", "q8_1"}
    assert weights.parameters == 256 * 3 + 128 * 2 + 64 * 5 + 96 * 7


def test_a_type_posenc_does_not_know_is_sized_by_its_offsets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc_cli.models.gguf import header

    path = raw_gguf(tmp_path / "m.gguf", [("a", (64, 2), 42), ("b", (32, 1), 0)], alignment=64)
    exact = gguf_weights(path)
    monkeypatch.delitem(header.GGML_BLOCKS, 42)
    guessed = gguf_weights(path)
    assert guessed.bytes == exact.bytes + (-36 % 64)  # q2_0's 36 bytes, padded to the alignment
    assert guessed.by_dtype["ggml type 42"] == 64 and "sized by their offsets" in guessed.notes[0]


def test_a_100_gb_gguf_costs_its_header(tmp_path: Path, ggml: Ggml) -> None:
    path = raw_gguf(tmp_path / "big.gguf", [("token_embd.weight", (8192, 256000), 12),
                                            ("blk.0.ffn_up.weight", (16384, 4_400_000), 30)])
    assert path.stat().st_size > HUNDRED_GB
    started = time.perf_counter()
    weights = gguf_weights(path)
    assert time.perf_counter() - started < 0.5
    assert weights.bytes == sum(ggml.sizes(path)) > HUNDRED_GB
    assert weights.by_dtype == {"bf16": 16384 * 4_400_000 * 2, "q4_K": 8192 * 256000 // 256 * 144}


def test_bytes_after_the_data_are_noted(tmp_path: Path) -> None:
    path = raw_gguf(tmp_path / "m.gguf", [("a", (32, 4), 8)], hole=1000)
    weights = gguf_weights(path)
    assert weights.bytes == 4 * 34 and weights.notes == ("m.gguf: 1000 bytes after the tensor data (not counted)",)


def write_split(folder: Path, count_tensors: int = 5, per_shard: int = 2) -> list[Path]:
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), "llama", split_max_tensors=per_shard)
    writer.add_block_count(1)
    for i in range(count_tensors):
        writer.add_tensor(f"t{i}", np.zeros((2, 32 * (i + 1)), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(folder.glob("model-*-of-*.gguf"))


def test_split_gguf_adds_up_every_shard(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    shards = write_split(tmp_path)
    assert [p.name for p in shards] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    total = sum(int(t.n_bytes) for p in shards for t in gguf.GGUFReader(str(p)).tensors)
    first, second = gguf_weights(shards[0]), gguf_weights(shards[1])
    assert first.bytes == second.bytes == total and first.source == "GGUF tensor data (3 shards)"
    assert first.notes == () and second.notes[0].startswith("llama.cpp loads a split model from its first shard")
    shards[2].unlink()
    missing = gguf_weights(shards[0])
    assert missing.bytes is None and "model-00003-of-00003.gguf not beside it" in missing.source
    assert missing.notes[0].startswith("this shard holds ")


def test_a_renamed_shard_is_one_shard_of_n(tmp_path: Path) -> None:
    shards = write_split(tmp_path)
    renamed = shards[0].rename(tmp_path / "renamed.gguf")
    weights = gguf_weights(renamed)
    assert weights.bytes is None and weights.source.startswith(f"{renamed} is shard 1 of 3 of a split GGUF")


# llama.cpp's own count: llama_model_size and llama_model_n_params (the loader's sum of ggml_nbytes and
# ggml_nelements over every tensor of every shard: src/llama-model-loader.cpp), read with vocab_only, which loads
# the headers and no tensor; the files quantized by llama.cpp's own quantizer (llama_model_quantize)
QUANTIZED = {"F16": "f16", "BF16": "bf16", "Q8_0": "q8_0", "Q4_0": "q4_0", "Q5_1": "q5_1", "Q2_K": "q2_K",
             "Q3_K_M": "q3_K", "Q4_K_M": "q4_K", "Q6_K": "q6_K", "IQ4_NL": "iq4_nl", "IQ4_XS": "iq4_xs",
             "TQ1_0": "tq1_0"}  # llama.cpp file type: the ggml type most of its tensors get


def llama_counts(path: Path) -> tuple[int, int]:
    llama_cpp = pytest.importorskip("llama_cpp")
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, f"llama.cpp cannot load {path}"
    try:
        return llama_cpp.llama_model_size(model), llama_cpp.llama_model_n_params(model)
    finally:
        llama_cpp.llama_model_free(model)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny float32 llama GGUF (rows of 256: every K-quant applies) and llama.cpp's quantizations of it."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from llamacpp_harness import write_tiny_llama_gguf

    folder = tmp_path_factory.mktemp("quantized")
    out = {"F32": folder / "F32.gguf"}
    write_tiny_llama_gguf(out["F32"], n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_vocab=512)
    for name in QUANTIZED:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.nthread = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}"), 1
        out[name] = folder / f"{name}.gguf"
        assert llama_cpp.llama_model_quantize(str(out["F32"]).encode(), str(out[name]).encode(),
                                              ctypes.byref(params)) == 0, name
    return out


@pytest.mark.parametrize("name", ["F32", *QUANTIZED])
def test_llama_cpp_counts_its_quantized_files_the_same(quantized: dict[str, Path], name: str) -> None:
    weights = gguf_weights(quantized[name])
    assert (weights.bytes, weights.parameters) == llama_counts(quantized[name])
    assert QUANTIZED.get(name, "f32") in weights.by_dtype


def test_llama_cpp_counts_a_split_gguf_the_same(quantized: dict[str, Path], tmp_path: Path) -> None:
    """Q4_K_M split in three by gguf-py (its fields and raw tensors copied, as gguf_new_metadata copies them)."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(quantized["Q4_K_M"]))
    writer = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), reader.fields["general.architecture"].contents(),
                             split_max_tensors=8)
    for f in reader.fields.values():
        if f.name != "general.architecture" and not f.name.startswith("GGUF."):
            array = f.types[0] == gguf.GGUFValueType.ARRAY
            writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[-1] if array else None)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    first = tmp_path / "tiny-00001-of-00003.gguf"
    weights = gguf_weights(first)
    assert weights.source == "GGUF tensor data (3 shards)"
    assert (weights.bytes, weights.parameters) == llama_counts(first) == llama_counts(quantized["Q4_K_M"])


@pytest.mark.parametrize("cut", [3, 20, 100, -30])
def test_truncated_gguf_is_one_error(tmp_path: Path, cut: int) -> None:
    """Cut in the header, or in the data (the last tensor's 136 bytes end 24 bytes before the padded end)."""
    data = raw_gguf(tmp_path / "m.gguf", [("a", (32, 4), 8)]).read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:cut])
    assert one_line_error(gguf_weights, path).startswith(f"{path}: not a readable GGUF file (")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_corrupted_gguf_is_weights_or_one_error(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    folder = tmp_path_factory.mktemp("bad")
    raw = bytearray(raw_gguf(folder / "m.gguf", [("a", (32, 4), 8), ("b", (256, 2), 12)]).read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.sampled_from([0, 1, 0x7F, 0xFF, raw[at] ^ 0x40]))
    path = folder / "bad.gguf"
    path.write_bytes(bytes(raw))
    try:
        weights = gguf_weights(path)
    except PosencError as exc:
        assert "\n" not in str(exc)
    else:
        assert weights.bytes is None or weights.bytes >= 0


# ---------------------------------------------------------------------------------------------------- safetensors


def torch_dtypes() -> list[Any]:
    torch = pytest.importorskip("torch")
    names = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
             "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "float8_e8m0fnu", "complex64",
             "float4_e2m1fn_x2"]
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def save(path: Path, tensors: dict[str, Any]) -> Path:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def oracle(paths: list[Path]) -> tuple[int, dict[str, int], int]:
    """(bytes, bytes per dtype, elements) by safetensors' own reader (dtype, shape) and the file's data size."""
    from safetensors import safe_open

    total, by_dtype, elements = 0, {}, 0
    for path in paths:
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                piece = f.get_slice(key)
                tensor = f.get_tensor(key)
                n = 1
                for d in piece.get_shape():
                    n *= d
                nbytes = tensor.nbytes
                total += nbytes
                by_dtype[piece.get_dtype()] = by_dtype.get(piece.get_dtype(), 0) + nbytes
                elements += n
    return total, by_dtype, elements


def test_every_dtype_torch_stores(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    tensors = {f"t{i}": torch.zeros((3, 2 + i % 3), dtype=d) for i, d in enumerate(torch_dtypes())}
    path = save(tmp_path / "model.safetensors", tensors)
    weights = safetensors_weights(tmp_path)
    total, by_dtype, elements = oracle([path])
    assert (weights.bytes, weights.by_dtype, weights.parameters) == (total, by_dtype, elements)
    assert total == sum(t.nbytes for t in tensors.values())
    assert weights.source == "safetensors headers (1 file)" and "F4" in weights.by_dtype


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(st.integers(0, 17), shapes), min_size=1, max_size=4), min_size=1, max_size=3))
def test_drawn_sharded_folders_match_safetensors(tmp_path_factory: pytest.TempPathFactory,
                                                 shards: list[list[tuple[int, tuple[int, ...]]]]) -> None:
    torch = pytest.importorskip("torch")
    dtypes = torch_dtypes()
    folder = tmp_path_factory.mktemp("st")
    weight_map, paths = {}, []
    for s, shard in enumerate(shards):
        name = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {f"s{s}.t{i}": torch.zeros(_packable(shape, dtypes[d % len(dtypes)]), dtype=dtypes[d % len(dtypes)])
                   for i, (d, shape) in enumerate(shard)}
        paths.append(save(folder / name, tensors))
        weight_map.update(dict.fromkeys(tensors, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    save(folder / "consolidated.safetensors", {"x": torch.zeros(7)})  # beside an index: not loaded, not counted
    weights = safetensors_weights(folder)
    total, by_dtype, elements = oracle(paths)
    assert (weights.bytes, weights.by_dtype, weights.parameters) == (total, by_dtype, elements)
    assert weights.source == f"safetensors headers ({len(shards)} file{'s' if len(shards) > 1 else ''})"


def _packable(shape: tuple[int, ...], dtype: Any) -> tuple[int, ...]:
    """safetensors.torch stores a float4 x2 tensor as F4 of twice the last dim, and cannot store one of no dims or
    no elements: such a draw gets a last dim of 1."""
    if "x2" in str(dtype) and (not shape or 0 in shape):
        return (*[d or 1 for d in shape], 1)
    return shape


def sparse_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], *, pad: int = 0) -> Path:
    """A safetensors file by the format, by hand: the header, then the data as a hole (sparse)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    bits = {"BF16": 16, "F32": 32, "F8_E4M3": 8, "I64": 64}
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n * bits[dtype] // 8]}
        offset += n * bits[dtype] // 8
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8 + pad)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + offset)
    return path


def test_a_100_gb_safetensors_file_costs_its_header(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    path = sparse_safetensors(tmp_path / "model.safetensors", {
        "embed": ("BF16", [262144, 8192]), "experts": ("F8_E4M3", [256, 4096, 96000]), "norm": ("F32", [8192])})
    assert path.stat().st_size > HUNDRED_GB
    started = time.perf_counter()
    weights = safetensors_weights(tmp_path)
    assert time.perf_counter() - started < 0.5
    total, by_dtype, elements = oracle_shapes(path)
    assert (weights.bytes, weights.by_dtype, weights.parameters) == (total, by_dtype, elements)
    assert weights.bytes is not None and weights.bytes > HUNDRED_GB


def oracle_shapes(path: Path) -> tuple[int, dict[str, int], int]:
    """safe_open's dtypes and shapes (it validates the whole layout against the file size; no tensor is read)."""
    from safetensors import safe_open

    size = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "I64": 8}
    total, by_dtype, elements = 0, {}, 0
    with safe_open(str(path), "np") as f:
        for key in f.keys():
            piece = f.get_slice(key)
            n = 1
            for d in piece.get_shape():
                n *= d
            total += n * size[piece.get_dtype()]
            by_dtype[piece.get_dtype()] = by_dtype.get(piece.get_dtype(), 0) + n * size[piece.get_dtype()]
            elements += n
    return total, by_dtype, elements


def _entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


DAMAGED: dict[str, tuple[bytes | dict[str, Any], int]] = {  # header (JSON object or raw bytes), data bytes
    "bad JSON": (b'{"a": {"dtype": "F32",', 8),
    "not an object": (b"[1, 2, 3]", 0),
    "no dtype": ({"a": {"shape": [2], "data_offsets": [0, 8]}}, 8),
    "a gap": ({"a": _entry("F32", [2], 0, 8), "b": _entry("F32", [2], 12, 20)}, 20),
    "an overlap": ({"a": _entry("F32", [2], 0, 8), "b": _entry("F32", [2], 4, 12)}, 12),
    "bytes for the shape": ({"a": _entry("F32", [3], 0, 8)}, 8),
    "data past the end": ({"a": _entry("F32", [4], 0, 16)}, 8),
    "bytes after the data": ({"a": _entry("F32", [2], 0, 8)}, 16),
    "metadata of numbers": ({"__metadata__": {"n": 1}, "a": _entry("F32", [2], 0, 8)}, 8),
    "a negative shape": ({"a": _entry("F32", [-2], 0, 8)}, 8),
    "half an F4 byte": ({"a": _entry("F4", [3], 0, 2)}, 2),
}


def write_header(path: Path, header: bytes | dict[str, Any], data: int, *, length: int | None = None) -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + bytes(data))
    return path


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_safetensors_refused_here_and_by_safetensors(tmp_path: Path, case: str) -> None:
    safetensors = pytest.importorskip("safetensors")
    header, data = DAMAGED[case]
    path = write_header(tmp_path / "model.safetensors", header, data)
    message = one_line_error(safetensors_weights, tmp_path)
    assert message.startswith(f"{path}: not a readable safetensors file ("), message
    with pytest.raises(safetensors.SafetensorError):
        with safetensors.safe_open(str(path), "np"):
            pass


@pytest.mark.parametrize(("length", "size", "expected"), [
    (2**63, 64, "a header of 9223372036854775808 bytes; safetensors reads at most 100000000"),
    (10**9, 64, "a header of 1000000000 bytes; safetensors reads at most 100000000"),
    (1000, 64, "truncated: the file ends at byte 64, inside its 1000-byte header"),
    (None, 5, "the file is 5 bytes, shorter than the 8-byte header length"),
])
def test_absurd_lengths(tmp_path: Path, length: int | None, size: int, expected: str) -> None:
    path = tmp_path / "x.safetensors"
    raw = (struct.pack("<Q", length) if length is not None else b"") + b"{}"
    path.write_bytes((raw + bytes(size))[:size])
    assert one_line_error(safetensors_file_weights, path) == f"{path}: not a readable safetensors file ({expected})"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_corrupted_safetensors_agree_with_safetensors(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    """A mutated file: where safetensors accepts it, the same sizes; else weights or one PosencError line."""
    safetensors = pytest.importorskip("safetensors")
    folder = tmp_path_factory.mktemp("mut")
    path = write_header(folder / "model.safetensors", {"a": _entry("BF16", [2, 3], 0, 12),
                                                        "b": _entry("I64", [1], 12, 20)}, 20)
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.sampled_from(list(b'0123456789,[]{}":FIBU ') + [0, 0xFF]))
    raw = raw[: data.draw(st.integers(len(raw) - 8, len(raw)))]
    path.write_bytes(bytes(raw))
    try:
        weights: Weights | None = safetensors_weights(folder)
    except PosencError as exc:
        assert "\n" not in str(exc)
        weights = None
    try:
        with safetensors.safe_open(str(path), "np"):
            pass
    except Exception:  # safetensors refuses it: posenc may read it (an unknown dtype) or refuse it
        return
    assert weights is not None and (weights.bytes, weights.parameters) == oracle_shapes(path)[::2]


def test_index_naming_a_missing_shard_is_unknown(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    save(tmp_path / "a.safetensors", {"x": torch.zeros(4)})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}))
    weights = safetensors_weights(tmp_path)
    assert weights.bytes is None and weights.source.endswith("lists 2 files, and b.safetensors is not there")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a.safetensors"]}))
    assert one_line_error(safetensors_weights, tmp_path).endswith("weight_map must be an object of tensor name -> "
                                                                  "file name")


def test_a_folder_without_safetensors(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK")
    weights = safetensors_weights(tmp_path)
    assert weights.bytes is None and weights.source == (
        f"no safetensors files in {tmp_path} (it holds pytorch_model.bin: pickled weights, whose sizes posenc does "
        "not read)")


# ------------------------------------------------------------------------------------------------------ weights_of


def test_weights_of_each_kind_of_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    save(model / "model.safetensors", {"w": torch.zeros(4, 4, dtype=torch.bfloat16)})
    assert weights_of(str(model)).bytes == 32
    assert weights_of(str(model / "model.safetensors")).bytes == 32
    config = weights_of(str(model / "config.json"))
    assert config.bytes is None and config.source == "a config.json gives no weight sizes"
    assert config.notes == (f"pass its folder ({model}) to read the safetensors headers beside it",)
    assert weights_of("-").bytes is None
    renamed = model / "weights.bin"
    (model / "model.safetensors").rename(renamed)
    assert weights_of(str(renamed)).bytes == 32  # found by its content: an 8-byte length, then a JSON object
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    make_gguf(ggufs / "a.gguf", {"token_embd.weight": 100})
    assert weights_of(str(ggufs)).bytes == weights_of(str(ggufs / "a.gguf")).bytes == 400
    make_gguf(ggufs / "b.gguf", {"token_embd.weight": 100})
    assert weights_of(str(ggufs)).source == f"{ggufs} holds 2 .gguf files: pass one of them"
    for missing in ("nothing.gguf", "./nothing", "a/b/c"):
        assert one_line_error(weights_of, missing) == f"{missing}: no such file"


# ---------------------------------------------------------------------------------------------------------- Hub

_PROBE = """
import json, sys, time
from posenc_cli.errors import PosencError
from posenc_cli.models.weights import weights_of
for arg in sys.argv[1:]:
    if arg.startswith("download:"):
        from huggingface_hub import hf_hub_download
        repo, _, name = arg[9:].partition(":")
        hf_hub_download(repo, name)
        continue
    repo, _, revision = arg.partition("@")
    started = time.monotonic()
    try:
        w = weights_of(repo, revision=revision or None)
        out = {"bytes": w.bytes, "source": w.source, "by_dtype": w.by_dtype, "parameters": w.parameters,
               "notes": list(w.notes)}
    except PosencError as exc:
        out = {"error": str(exc)}
    out["seconds"] = time.monotonic() - started
    print(json.dumps(out))
"""


def hub_run(args: list[str], *, endpoint: str, cache: Path, offline: bool) -> list[dict[str, Any]]:
    """weights_of for each argument in one fresh interpreter whose huggingface_hub sees only ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(cache / "home"), HF_HUB_CACHE=str(cache / "hub"),
               HF_HUB_OFFLINE="1" if offline else "0", HF_HUB_DISABLE_TELEMETRY="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cache)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    assert "Parse safetensors files" not in proc.stderr  # huggingface_hub's progress bar stays off
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeHub, dict[str, Weights], Path]:
    """The fake Hub's repos, the weights each must give (read from the same files locally), and a cache folder."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    files = tmp_path_factory.mktemp("hubfiles")
    one = save(files / "one.safetensors", {"a": torch.zeros(4, 8, dtype=torch.bfloat16), "b": torch.zeros(3)})
    sharded = files / "sharded"
    sharded.mkdir()
    names = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    save(sharded / names[0], {"e": torch.zeros(16, dtype=torch.float16)})
    # a header longer than the 100,000 bytes huggingface_hub asks for first: a second Range request
    save(sharded / names[1], {f"model.layers.{i}.mlp.experts.gate_proj.weight": torch.zeros(2) for i in range(2000)})
    save(sharded / names[2], {"h": torch.zeros(5, dtype=torch.int64)})
    weight_map = {k: n for n in names for k in json.loads(_header_text(sharded / n)) if k != "__metadata__"}
    index = json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode()
    (sharded / "model.safetensors.index.json").write_bytes(index)
    huge = sparse_safetensors(files / "huge.safetensors", {"embed": ("BF16", [262144, 8192]),
                                                            "experts": ("F8_E4M3", [256, 4096, 96000])})
    bad_offsets = write_header(files / "bad.safetensors", {"a": _entry("F32", [2], 4, 12)}, 12)
    shard_files: dict[str, bytes | Path] = {n: sharded / n for n in names}
    hub = FakeHub({
        "org/one": HubRepo({"config.json": b"{}", "model.safetensors": one.read_bytes()}),
        "org/sharded": HubRepo({"config.json": b"{}", "model.safetensors.index.json": index, **shard_files}),
        "org/huge": HubRepo({"model.safetensors": huge}),
        "org/bin": HubRepo({"config.json": b"{}", "pytorch_model.bin": b"PK"}),
        "org/gated": HubRepo({"model.safetensors": b""}, gated=True),
        "org/bad-json": HubRepo({"model.safetensors": struct.pack("<Q", 10) + b'{"a": [1, '}),
        "org/bad-offsets": HubRepo({"model.safetensors": bad_offsets.read_bytes()}),
        "org/flaky": HubRepo({"model.safetensors": one.read_bytes()}, fail={"model.safetensors": 500}),
        "org/cached": HubRepo({"model.safetensors": one.read_bytes()}),
    })
    expected = {"org/one": safetensors_file_weights(one), "org/sharded": safetensors_weights(sharded),
                "org/huge": safetensors_file_weights(huge)}
    return hub, expected, tmp_path_factory.mktemp("hfcache")


def _header_text(path: Path) -> bytes:
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        return fh.read(length)


@pytest.fixture(scope="module")
def hub_online(hub_files: tuple[FakeHub, dict[str, Weights], Path]) -> Iterator[tuple[list[dict[str, Any]], str]]:
    hub, _, cache = hub_files
    args = ["download:org/cached:model.safetensors", "org/one", f"org/one@{SHA}", "org/sharded", "org/huge",
            "org/bin", "org/gated", "org/bad-json", "org/bad-offsets", "org/flaky", "org/cached"]
    with serve(hub) as endpoint:
        out = hub_run(args, endpoint=endpoint, cache=cache, offline=False)
    yield out, endpoint


def test_hub_metadata_equals_the_local_headers(hub_files: Any, hub_online: Any) -> None:
    hub, expected, _ = hub_files
    (one, one_at_sha, sharded, huge, *_), _ = hub_online
    for got, repo in ((one, "org/one"), (one_at_sha, "org/one"), (sharded, "org/sharded"), (huge, "org/huge")):
        want = expected[repo]
        assert (got["bytes"], got["by_dtype"], got["parameters"]) == (want.bytes, want.by_dtype, want.parameters)
        assert got["source"] == "Hub safetensors metadata"
    assert sharded["notes"][0] == "3 files on the Hub: their headers read by HTTP Range requests"
    assert huge["bytes"] > HUNDRED_GB


def test_hub_reads_headers_only(hub_files: Any, hub_online: Any) -> None:
    """Only Range requests reach a weights file, and a 100 GB file sends its first 100,001 bytes at most."""
    hub, _, _ = hub_files
    weights_gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(".safetensors")
                    and "/org/cached/" not in r.path]
    assert weights_gets and all(r.range is not None and r.range.startswith("bytes=") for r in weights_gets)
    huge = [r for r in weights_gets if r.path.startswith("/org/huge/")]
    assert huge and sum(r.sent for r in huge) <= 100_001
    second = [r for r in weights_gets if "00002-of-00003" in r.path]
    assert [r.range for r in second] == ["bytes=0-100000", f"bytes=8-{len(_header_text_of(hub, second)) + 7}"]


def _header_text_of(hub: FakeHub, requests: list[Any]) -> bytes:
    path = hub.repos["org/sharded"].files[requests[0].path.rsplit("/", 1)[1]]
    assert isinstance(path, Path)
    return _header_text(path)


def test_hub_failures_are_unknown_with_why(hub_online: Any) -> None:
    out, _ = hub_online
    by_repo = dict(zip(["org/bin", "org/gated", "org/bad-json", "org/bad-offsets", "org/flaky"], out[4:9],
                       strict=True))
    assert all(r["bytes"] is None and r["seconds"] < 10 for r in by_repo.values())
    assert by_repo["org/bin"]["source"].startswith("Hub org/bin@main has no model.safetensors or "
                                                   "model.safetensors.index.json")
    assert by_repo["org/gated"]["source"].startswith("Hub org/gated@main is gated")
    assert by_repo["org/bad-json"]["source"].startswith("a safetensors header of Hub org/bad-json@main cannot be "
                                                        "read: ")
    assert by_repo["org/bad-offsets"]["source"].startswith(
        "Hub org/bad-offsets@main model.safetensors: not a readable safetensors file (tensor a has data_offsets "
        "[4, 12]")
    assert by_repo["org/flaky"]["source"] == ("the Hub answered HTTP 500 for the safetensors headers of "
                                              "org/flaky@main")


def test_hub_cache_is_read_first(hub_files: Any, hub_online: Any) -> None:
    hub, expected, cache = hub_files
    out, _ = hub_online
    cached = out[-1]
    assert (cached["bytes"], cached["by_dtype"]) == (expected["org/one"].bytes, expected["org/one"].by_dtype)
    assert cached["source"] == "safetensors headers (1 file)"
    assert cached["notes"][0].startswith("read from the local HF cache (")
    assert not [r for r in hub.requests if r.path.startswith("/org/cached/") and r.range]


def test_hub_offline_and_dead_endpoint_answer_at_once(hub_files: Any, hub_online: Any) -> None:
    """HF_HUB_OFFLINE: the cache or "unknown" with why, no request; a stopped endpoint: the same, within seconds."""
    _, expected, cache = hub_files
    _, endpoint = hub_online  # stopped when the fixture's server closed
    for offline in (True, False):
        cached, sharded = hub_run(["org/cached", "org/sharded"], endpoint=endpoint, cache=cache, offline=offline)
        assert cached["bytes"] == expected["org/one"].bytes
        assert sharded["bytes"] is None and sharded["seconds"] < 5
        if offline:
            assert sharded["source"] == ("HF_HUB_OFFLINE is set and the safetensors files of org/sharded@main are "
                                         "not all in the local cache")
        else:
            assert sharded["source"].startswith("the Hub cannot be reached (127.0.0.1: ")
