"""posenc_cli.models.gguf.header: the stdlib GGUF header reader against gguf.GGUFReader, on real and hostile files.

Parity: every GGUF the tests and docs have (and the writers they use) gives the same :class:`GgufFacts` through
posenc's reader as through ``gguf.GGUFReader`` (the reader posenc used before; the oracle below is that code).
Cost: a file with an 8B-sized tokenizer is read through a file object that counts bytes, so "the arrays were not
decoded" is a byte count, not a timing. Robustness: every cut point and corrupted lengths give one PosencError.
"""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.gguf import header as gguf_header
from posenc_cli.models.gguf.header import parse_header, shortest_float32
from posenc_cli.models.gguf.metadata import ROPE_TENSORS, GgufFacts, _facts, _maybe_reported, _metadata, read_gguf
from posenc_cli.models.sources import read_source

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from llamacpp_harness import write_tiny_llama_gguf  # noqa: E402
from test_sources import write_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS_GGUF = ROOT / "docs" / "examples" / "llama-3.1-8b.gguf"
PASSKEY_GGUF = ROOT / "tests" / "fixtures" / "passkey" / "passkey.gguf"


# ----------------------------------------------------------------------------------- the oracle: gguf.GGUFReader


def reader_facts(path: Path, label: str = "f") -> GgufFacts:
    """GgufFacts as posenc computed them with gguf.GGUFReader (the code read_gguf ran before the header reader)."""
    reader = gguf.GGUFReader(path)

    def value(reader_field: Any) -> Any:
        v = reader_field.contents()
        if reader_field.types and reader_field.types[-1] == gguf.GGUFValueType.FLOAT32:
            if isinstance(v, float):
                return shortest_float32(v)
            if isinstance(v, list):
                return [shortest_float32(x) if isinstance(x, float) else x for x in v]
        return v

    arch_field = reader.fields.get("general.architecture")
    arch = arch_field.contents() if arch_field is not None else None
    fields: dict[str, Any] = {}
    for name, reader_field in reader.fields.items():
        if name == "general.architecture":
            fields[name] = arch
        elif isinstance(arch, str) and name.startswith(arch + "."):
            rest = name[len(arch) + 1:]
            if rest.startswith("rope.") or rest in ("context_length", "embedding_length", "attention.head_count",
                                                    "attention.head_count_kv", "attention.key_length",
                                                    "attention.value_length", "block_count",
                                                    "attention.sliding_window",
                                                    "attention.sliding_window_pattern"):
                fields[name] = value(reader_field)
    facts = _facts(_metadata(fields, label), {t.name for t in reader.tensors}, label)
    # the rope tables' values, as GGUFReader decodes the tensor data
    tables = {t.name: [float(x) for x in np.asarray(t.data, dtype=np.float32).ravel()] for t in reader.tensors
              if t.name in ROPE_TENSORS}
    facts.rope_freqs = tables.get("rope_freqs.weight")
    facts.rope_factors_long = tables.get("rope_factors_long.weight")
    facts.rope_factors_short = tables.get("rope_factors_short.weight")
    return facts


def finish(writer: Any) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def kitchen_sink(path: Path, *, architecture_last: bool = False, n_vocab: int = 0) -> Path:
    """Every value type, per-layer arrays, float32 arrays, a bool and a string under rope.*, skipped keys of every
    type, general.architecture last if asked, and a tokenizer of ``n_vocab`` tokens (and as many merges)."""
    writer = gguf.GGUFWriter(str(path), "qwen3")
    if architecture_last:
        del writer.kv_data[0]["general.architecture"]
    writer.add_name("kitchen sink")
    writer.add_context_length(40960)
    writer.add_embedding_length(2560)
    writer.add_array("qwen3.attention.head_count", [32, 32, 16, 16])  # per-layer: n_head() is layer 0's
    writer.add_array("qwen3.attention.head_count_kv", [8, 8, 4, 4])
    writer.add_key_length(128)
    writer.add_value_length(128)
    writer.add_rope_freq_base(1000000.0)
    writer.add_rope_dimension_count(128)
    writer.add_array("qwen3.rope.dimension_sections", [24, 20, 20, 0])
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(4.0)
    writer.add_rope_scaling_orig_ctx_len(32768)
    writer.add_rope_scaling_attn_factors(0.1)
    writer.add_bool("qwen3.rope.scaling.finetuned", True)
    writer.add_float64("qwen3.rope.scaling.yarn_log_multiplier", 0.1)
    writer.add_key_value("qwen3.rope.scaling.factors", [1.0, 1.1, 0.3], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.FLOAT32)
    writer.add_array("qwen3.rope.names", ["a", "bé"])
    writer.add_uint64("qwen3.rope.big", 2**63 + 5)
    writer.add_int8("qwen3.rope.i8", -3)
    writer.add_uint16("qwen3.rope.u16", 65535)
    writer.add_int16("qwen3.rope.i16", -32768)
    writer.add_int64("qwen3.rope.i64", -(2**62))
    writer.add_uint8("general.skipped_u8", 7)
    writer.add_string("tokenizer.chat_template", "{{ x }}" * 500)
    writer.add_array("llama.rope.other_arch", [1, 2, 3])  # a candidate key of another architecture: dropped
    if n_vocab:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"tok{i}é" for i in range(n_vocab)])
        writer.add_token_scores([float(-i) for i in range(n_vocab)])
        writer.add_token_types([1] * n_vocab)
        writer.add_token_merges([f"t{i} k{i}" for i in range(n_vocab)])
    if architecture_last:
        writer.add_string("general.architecture", "qwen3")
    writer.add_tensor("rope_factors_long.weight", np.ones(64, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((4, 32), dtype=np.float16))
    writer.add_tensor("token_embd.weight", np.zeros((2, 64), dtype=np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)
    finish(writer)
    return path


def corpus(tmp: Path) -> list[Path]:
    """Every GGUF the tests and docs have, and one of each shape their writers make."""
    files = [DOCS_GGUF, PASSKEY_GGUF]
    scalings: list[dict[str, Any]] = [
        {}, {"type": "yarn", "factor": 4.0, "orig": 32768, "attn_factor": 0.1, "beta_fast": 32.0, "beta_slow": 1.0,
             "log_mul": 0.1},
        {"type": "linear", "factor": 2.0}, {"factor": 4.0}, {"type": "none"}]
    for i, scaling in enumerate(scalings):
        files.append(write_gguf(gguf, tmp / f"sources-{i}.gguf", scaling=scaling, rope_freqs=64 if i == 0 else 0))
    files.append(write_gguf(gguf, tmp / "absent.gguf", ctx=None, theta=None, rope_dims=None))
    files.append(write_gguf(gguf, tmp / "oss.gguf", "gpt-oss", theta=150000.0, embd=2880, heads=64, key_length=64,
                            rope_dims=64))
    write_tiny_llama_gguf(tmp / "harness.gguf", scaling={"type": "yarn", "factor": 4.0,
                                                          "original_context_length": 256, "attn_factor": 0.88,
                                                          "finetuned": True},
                          rope_freqs=np.linspace(1, 4, 8, dtype=np.float32))
    files.append(tmp / "harness.gguf")
    files.append(kitchen_sink(tmp / "sink.gguf"))
    files.append(kitchen_sink(tmp / "sink-last.gguf", architecture_last=True, n_vocab=3000))
    return files


# ------------------------------------------------------------------------------------------------------- parity


def test_parity_with_gguf_reader_on_every_test_gguf(tmp_path: Path) -> None:
    files = corpus(tmp_path)
    for path in files:
        assert read_gguf(path, "f") == reader_facts(path), path
    assert len(files) == 12


def test_the_kitchen_sink_values(tmp_path: Path) -> None:
    """Spelled out, so parity cannot hide a value both readers get wrong."""
    facts = read_gguf(kitchen_sink(tmp_path / "sink.gguf", architecture_last=True, n_vocab=10))
    assert (facts.head_count, facts.key_length, facts.scaling_type, facts.attn_factor) == (32, 128, "yarn", 0.1)
    assert facts.has_rope_freqs is False
    keys = facts.keys
    assert list(keys)[-1] == "general.architecture"  # file order, as GGUFReader's fields
    assert keys["qwen3.attention.head_count"] == [32, 32, 16, 16]
    assert keys["qwen3.rope.scaling.factors"] == [1.0, 1.1, 0.3]  # float32 elements: shortest decimals
    assert keys["qwen3.rope.scaling.yarn_log_multiplier"] == 0.1  # a float64 is kept as it is
    assert keys["qwen3.rope.scaling.finetuned"] is True
    assert keys["qwen3.rope.names"] == ["a", "bé"]
    assert (keys["qwen3.rope.big"], keys["qwen3.rope.i8"], keys["qwen3.rope.u16"], keys["qwen3.rope.i16"],
            keys["qwen3.rope.i64"]) == (2**63 + 5, -3, 65535, -32768, -(2**62))
    assert "llama.rope.other_arch" not in keys and "tokenizer.chat_template" not in keys


def test_the_header_fields(tmp_path: Path) -> None:
    path = kitchen_sink(tmp_path / "sink.gguf", n_vocab=10)
    with open(path, "rb") as fh:
        header = parse_header(fh, path.stat().st_size, "f", _maybe_reported)
    reader = gguf.GGUFReader(path)
    assert header.version == 3
    assert (header.tensor_count, header.kv_count) == (len(reader.tensors), len(reader.fields) - 3)
    assert header.tensor_names == [t.name for t in reader.tensors]
    assert header.data_offset == reader.data_offset


# ------------------------------------------------------------------------------- an 8B tokenizer, never decoded

N_TOKENS, N_MERGES = 128256, 280147


class CountingFile(io.RawIOBase):
    """A binary file that counts the bytes read from it and the furthest byte read."""

    def __init__(self, data: bytes) -> None:
        self.inner = io.BytesIO(data)
        self.bytes_read = 0
        self.furthest = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = self.inner.read(size)
        self.bytes_read += len(chunk)
        self.furthest = max(self.furthest, self.inner.tell())
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()


def big_tokenizer(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(131072)
    writer.add_embedding_length(4096)
    writer.add_block_count(32)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_rope_freq_base(500000.0)
    writer.add_rope_dimension_count(128)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list([f"Ġtok{i}" for i in range(N_TOKENS)])
    writer.add_token_scores([0.0] * N_TOKENS)
    writer.add_token_types([1] * N_TOKENS)
    writer.add_token_merges([f"Ġa{i} b{i}" for i in range(N_MERGES)])
    writer.add_bos_token_id(128000)
    writer.add_tensor("rope_freqs.weight", np.ones(64, dtype=np.float32))
    writer.add_tensor("token_embd.weight", np.zeros((4, 64), dtype=np.float16))
    finish(writer)
    return path


def test_an_8b_tokenizer_is_seeked_over_not_decoded(tmp_path: Path) -> None:
    path = big_tokenizer(tmp_path / "big.gguf")
    data = path.read_bytes()
    counting = CountingFile(data)  # unbuffered: every byte counted is one the parser asked for
    header = parse_header(counting, len(data), "big", _maybe_reported, ROPE_TENSORS)  # type: ignore[arg-type]
    facts = _facts(_metadata(header.fields, "big"), set(header.tensor_names), "big")
    assert header.tensors == {"rope_freqs.weight": [1.0] * 64}
    facts.rope_freqs = [1.0] * 64
    assert facts == GgufFacts(
        architecture="llama", context_length=131072, rope_freq_base=500000.0, rope_dimension_count=128,
        embedding_length=4096, head_count=32, has_rope_freqs=True, rope_freqs=[1.0] * 64, block_count=32,
        keys={"general.architecture": "llama", "llama.context_length": 131072, "llama.embedding_length": 4096,
              "llama.block_count": 32, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
              "llama.rope.freq_base": 500000.0, "llama.rope.dimension_count": 128})
    assert read_gguf(path) == facts
    # the budget: each string's 8-byte length, plus 4 KiB for the header, the scalars and the tensor-info records;
    # the scores and token types (1 MB) are one seek each, the string bytes are never read, nor is tensor data but
    # the 256 bytes of rope_freqs (the first tensor)
    budget = (N_TOKENS + N_MERGES) * 8 + 4096 + 64 * 4
    assert counting.bytes_read <= budget, counting.bytes_read
    assert counting.furthest <= header.data_offset + 64 * 4
    # and the budget would catch decoding: the string arrays alone are far larger
    strings = sum(8 + len(f"Ġtok{i}".encode()) for i in range(N_TOKENS))
    strings += sum(8 + len(f"Ġa{i} b{i}".encode()) for i in range(N_MERGES))
    assert strings > 2 * budget


# -------------------------------------------------------------------------------------------- truncated files


def test_every_cut_point_is_one_error(tmp_path: Path) -> None:
    full = tmp_path / "full.gguf"
    write_tiny_llama_gguf(full, n_layer=1, n_embd=8, n_head=2, n_head_kv=1, n_ff=8, n_vocab=4,
                          scaling={"type": "yarn", "factor": 2.0})
    data = full.read_bytes()
    reader = gguf.GGUFReader(full)
    data_end = max(t.data_offset + t.n_bytes for t in reader.tensors)  # the writer pads after the last tensor
    assert data_end > len(data) - 32
    cut = tmp_path / "cut.gguf"
    for end in range(data_end):
        cut.write_bytes(data[:end])
        with pytest.raises(PosencError) as info:
            read_gguf(cut, "cut")
        assert str(info.value).startswith("cut: not a readable GGUF file ("), (end, str(info.value))
        assert "\n" not in str(info.value)
    cut.write_bytes(data)
    assert read_gguf(cut, "cut").architecture == "llama"


def test_cuts_inside_a_tokenizer(tmp_path: Path) -> None:
    data = kitchen_sink(tmp_path / "sink.gguf", n_vocab=2000).read_bytes()
    cut = tmp_path / "cut.gguf"
    for end in range(0, len(data), 97):
        cut.write_bytes(data[:end])
        with pytest.raises(PosencError, match=r"^cut: not a readable GGUF file \("):
            read_gguf(cut, "cut")


def test_a_truncation_names_where(tmp_path: Path) -> None:
    data = kitchen_sink(tmp_path / "sink.gguf", n_vocab=2000).read_bytes()
    at = data.index(b"tokenizer.ggml.merges") + 200
    (tmp_path / "cut.gguf").write_bytes(data[:at])
    with pytest.raises(PosencError) as info:
        read_gguf(tmp_path / "cut.gguf", "cut")
    assert str(info.value) == f"cut: not a readable GGUF file (truncated: the file ends at byte {at}, inside " \
                              "tokenizer.ggml.merges)"
    (tmp_path / "cut.gguf").write_bytes(data[:-8])
    with pytest.raises(PosencError, match=r"inside the data of tensor token_embd\.weight"):
        read_gguf(tmp_path / "cut.gguf", "cut")


# ---------------------------------------------------------------------------------------- hand-built headers


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


ARCH = kv("general.architecture", 8, s("llama"))


def build(kvs: list[bytes], tensors: list[bytes] = (), *, version: int = 3, magic: bytes = b"GGUF",  # type: ignore[assignment]
          counts: tuple[int, int] | None = None) -> bytes:
    n_tensors, n_kv = counts or (len(tensors), len(kvs))
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs) + b"".join(tensors)


def tensor(name: str, dims: tuple[int, ...] = (4,), ggml_type: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


def error(data: bytes) -> str:
    with pytest.raises(PosencError) as info:
        parse_header(io.BytesIO(data), len(data), "h", _maybe_reported)
    message = str(info.value)
    assert message.startswith("h: not a readable GGUF file (") and "\n" not in message, message
    return message[len("h: not a readable GGUF file ("):-1]


def ok(data: bytes) -> gguf_header.GgufHeader:
    return parse_header(io.BytesIO(data), len(data), "h", _maybe_reported)


def test_a_hand_built_header_reads() -> None:
    data = build([ARCH, kv("llama.context_length", 4, struct.pack("<I", 4096))], [tensor("rope_freqs.weight")])
    data += b"\0" * (-len(data) % 32) + b"\0" * 16
    header = ok(data)
    assert header.fields == {"general.architecture": "llama", "llama.context_length": 4096}
    assert header.tensor_names == ["rope_freqs.weight"]
    assert ok(data.replace(struct.pack("<I", 3), struct.pack("<I", 2), 1)).version == 2


@pytest.mark.parametrize(("data", "reason"), [
    (build([ARCH], version=3 << 24), "a big-endian GGUF file; posenc reads little-endian files only"),
    (build([ARCH], version=1), "GGUF version 1; posenc reads versions 2 and 3"),
    (build([ARCH], version=4), "GGUF version 4; posenc reads versions 2 and 3"),
    (build([ARCH], magic=b"GGUG"), "it does not start with the GGUF magic bytes"),
    (build([ARCH, ARCH]), "duplicate metadata key general.architecture"),
    (build([ARCH], [tensor("a"), tensor("a")]), "duplicate tensor a"),
    (build([ARCH, kv("x", 13, b"\0" * 8)]), "x has unknown value type 13"),
    (build([ARCH, kv("x", 9, struct.pack("<IQ", 42, 1) + b"\0" * 8)]), "x is an array of unknown value type 42"),
    (build([ARCH, kv(b"\xff\xfe", 0, b"\0")]), "metadata key 1 is not UTF-8"),
    (build([ARCH, kv("llama.rope.scaling.type", 8, s(b"\xc3"))]), "llama.rope.scaling.type is not UTF-8"),
    (build([ARCH, kv("general.alignment", 4, struct.pack("<I", 48))]), "general.alignment = 48 is not a power of two"),
    (build([ARCH, kv("general.alignment", 5, struct.pack("<i", 32))]), "general.alignment is int32, not uint32"),
    (build([ARCH], [tensor("q", dims=(33,), ggml_type=2)]),
     "tensor q: its first dimension 33 is not a multiple of its type's block of 32"),
])
def test_corrupt_headers(data: bytes, reason: str) -> None:
    assert error(data + b"\0" * 64) == reason


@pytest.mark.parametrize("data", [
    build([ARCH], counts=(0, 2**63)),  # more entries than the file can hold
    build([ARCH], counts=(2**40, 1)),
    build([kv("x" * 10, 8, struct.pack("<Q", 2**64 - 1))]),  # a string longer than the file
    build([s("x")[:8].replace(struct.pack("<Q", 1), struct.pack("<Q", 2**62)) + b"x"]),  # a key name longer
    build([ARCH, kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2**61))]),  # strings the file cannot hold
    build([ARCH, kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2**62))]),
    build([ARCH, kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + struct.pack("<Q", 2**63))]),
    build([ARCH, kv("llama.rope.x", 9, struct.pack("<IQ", 6, 2**62))]),  # a wanted array the file cannot hold
    build([ARCH], [s("t") + struct.pack("<I", 2**31)]),  # n_dims beyond the file
    build([ARCH], [tensor("t", dims=(2**40,))]),  # data beyond the file
    build([ARCH], [tensor("t", offset=2**63)]),
    build([ARCH], [tensor("t", ggml_type=999, offset=2**20)]),  # an unknown type: its start still checked
])
def test_hostile_lengths_are_one_error_not_memory_or_time(data: bytes) -> None:
    assert error(data).startswith("truncated: the file ends at byte ")


def test_deeply_nested_arrays_are_refused_not_recursed() -> None:
    nested = struct.pack("<IQ", 0, 0)
    for _ in range(2000):
        nested = struct.pack("<IQ", 9, 1) + nested
    assert error(build([ARCH, kv("x", 9, nested)])) == "x nests arrays more than 8 deep"
    shallow = struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 5, 1) + b"\0" * 4 + struct.pack("<IQ", 8, 1) + s("z")
    assert ok(build([ARCH, kv("general.nested", 9, shallow)])).fields == {"general.architecture": "llama"}


def test_a_wanted_array_too_long_to_decode_is_an_error(tmp_path: Path) -> None:
    values = struct.pack("<IQ", 5, 5000) + b"\0" * 20000
    path = tmp_path / "long.gguf"
    path.write_bytes(build([ARCH, kv("llama.attention.head_count", 9, values)]))
    with pytest.raises(PosencError) as info:
        read_source(str(path))
    assert str(info.value) == (f"{path}: GGUF key llama.attention.head_count holds an array of 5000 int32 entries; "
                               "posenc reads arrays of at most 4096 numbers or strings, and strings of at most 1 MiB")
    # the same array under a key posenc does not report is seeked over
    path.write_bytes(build([ARCH, kv("llama.attention.layer_norm_rms_eps", 9, values)]))
    assert read_source(str(path)).gguf is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=0), value=st.sampled_from([0, 1, 255, 2**31, 2**32 - 1, 2**62, 2**64 - 1]),
       width=st.sampled_from([1, 4, 8]))
def test_corrupt_bytes_anywhere_read_or_fail_cleanly(at: int, value: int, width: int) -> None:
    data = bytearray(SMALL)
    at %= len(data) - width
    data[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    fh: IO[bytes] = io.BytesIO(bytes(data))
    try:
        header = parse_header(fh, len(data), "h", _maybe_reported)
        _facts(_metadata(header.fields, "h"), set(header.tensor_names), "h")
    except PosencError as exc:
        assert "\n" not in str(exc)


def _small() -> bytes:
    data = build([ARCH, kv("llama.context_length", 4, struct.pack("<I", 4096)),
                  kv("llama.rope.freq_base", 6, struct.pack("<f", 5e5)),
                  kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("bc") + s("d")),
                  kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + b"\0" * 12),
                  kv("llama.attention.head_count", 9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", 8, 8)),
                  kv("general.empty", 9, struct.pack("<IQ", 8, 0)), kv("llama.rope.empty", 9, struct.pack("<IQ", 6, 0)),
                  kv("llama.rope.strings", 9, struct.pack("<IQ", 8, 2) + s("x") + s(""))],
                 [tensor("rope_freqs.weight"), tensor("q", dims=(32, 2), ggml_type=2, offset=32)])
    return data + b"\0" * (-len(data) % 32) + b"\0" * 80


SMALL = _small()


def test_the_small_file_reads(tmp_path: Path) -> None:
    header = ok(SMALL)
    facts = _facts(_metadata(header.fields, "h"), set(header.tensor_names), "h")
    assert (facts.context_length, facts.rope_freq_base, facts.head_count, facts.has_rope_freqs) == (
        4096, 500000.0, 8, True)
    assert (facts.keys["llama.rope.empty"], facts.keys["llama.rope.strings"]) == ([], ["x", ""])
    (tmp_path / "small.gguf").write_bytes(SMALL)
    # its rope_freqs tensor is zero bytes: factors llama.cpp would divide by zero with, refused in one line
    with pytest.raises(PosencError, match="rope_freqs.weight holds 0.0; llama.cpp divides"):
        read_gguf(tmp_path / "small.gguf", "h")


# ------------------------------------------------------------------------------------------ rope tensor values


def padded(data: bytes, tail: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 32) + tail


def test_a_named_f32_tensor_is_read_and_only_it() -> None:
    head = build([ARCH], [tensor("big.weight", (8,), 0, 0), tensor("rope_freqs.weight", (4,), 0, 32)])
    data = padded(head, struct.pack("<8f", *range(8)) + struct.pack("<4f", 1.0, 2.0, 0.5, 8.0))
    header = parse_header(io.BytesIO(data), len(data), "h", _maybe_reported, ROPE_TENSORS)
    assert header.tensors == {"rope_freqs.weight": [1.0, 2.0, 0.5, 8.0]}
    f16 = padded(build([ARCH], [tensor("rope_freqs.weight", (4,), 1, 0)]), struct.pack("<4e", 1.0, 2.0, 0.5, 8.0))
    assert parse_header(io.BytesIO(f16), len(f16), "h", _maybe_reported, ROPE_TENSORS).tensors == {
        "rope_freqs.weight": [1.0, 2.0, 0.5, 8.0]}


def test_a_rope_tensor_past_the_end_of_the_file_is_one_error() -> None:
    data = padded(build([ARCH], [tensor("rope_freqs.weight", (4,), 0, 0)]), struct.pack("<3f", 1.0, 2.0, 3.0))
    with pytest.raises(PosencError, match="truncated.*the data of tensor rope_freqs.weight"):
        parse_header(io.BytesIO(data), len(data), "h", _maybe_reported, ROPE_TENSORS)
    huge = padded(build([ARCH], [tensor("rope_freqs.weight", (2**40,), 0, 0)]), b"")
    with pytest.raises(PosencError, match="truncated"):
        parse_header(io.BytesIO(huge), len(huge), "h", _maybe_reported, ROPE_TENSORS)


def test_a_rope_table_of_the_wrong_length_or_with_bad_factors_is_one_error(tmp_path: Path) -> None:
    dims = kv("llama.rope.dimension_count", 4, struct.pack("<I", 8))  # 4 rotating pairs
    for values, reason in (((1.0, 2.0, 3.0), "has 3 values; llama.cpp needs one per rotating pair (4"),
                           ((1.0, 2.0, float("nan"), 4.0), "holds nan"),
                           ((1.0, -2.0, 3.0, 4.0), "holds -2.0")):
        data = padded(build([ARCH, dims], [tensor("rope_freqs.weight", (len(values),), 0, 0)]),
                      struct.pack(f"<{len(values)}f", *values))
        (tmp_path / "bad.gguf").write_bytes(data)
        with pytest.raises(PosencError, match=re.escape(reason)):
            read_gguf(tmp_path / "bad.gguf", "bad")


def test_a_rope_tensor_too_long_or_quantized_is_skipped_and_read_gguf_refuses_it(tmp_path: Path) -> None:
    long = padded(build([ARCH], [tensor("rope_freqs.weight", (8192,), 0, 0)]), b"\0" * 4 * 8192)
    header = parse_header(io.BytesIO(long), len(long), "h", _maybe_reported, ROPE_TENSORS)
    assert header.tensors == {"rope_freqs.weight": gguf_header.Skipped("float32", 8192)}
    (tmp_path / "long.gguf").write_bytes(long)
    with pytest.raises(PosencError, match="rope_freqs.weight holds an array of 8192 float32 entries"):
        read_gguf(tmp_path / "long.gguf", "long")
    q8 = padded(build([ARCH], [tensor("rope_freqs.weight", (32,), 8, 0)]), b"\0" * 34)
    header = parse_header(io.BytesIO(q8), len(q8), "h", _maybe_reported, ROPE_TENSORS)
    assert isinstance(header.tensors["rope_freqs.weight"], gguf_header.Skipped)
