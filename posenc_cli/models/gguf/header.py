"""A GGUF header reader in the standard library: the metadata posenc asks for, at the cost of the header alone.

A GGUF file is a header, key/value metadata, tensor-info records and then the tensor data:

    magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
    kv_count x   (key: string) (value type: u32) (value)
    tensor_count x   (name: string) (n_dims: u32) (dims: u64 x n_dims) (ggml type: u32) (data offset: u64)
    padding to general.alignment (default 32), then the data

with a string stored as a u64 byte length and UTF-8 bytes, and an array value as (element type u32) (count u64)
(elements). Only little-endian versions 2 and 3 are read (version 1 used 32-bit lengths; big-endian files, allowed
since version 3, are refused with one error).

:func:`read_header` decodes only the values of the keys its ``wanted`` predicate accepts (plus
``general.alignment``); every other value is seeked over. An array is never decoded unless its key is wanted and it
holds at most :data:`ARRAY_MAX` numbers, strings or bools; a wanted array longer than that, or of arrays, comes back
as a :class:`Skipped` marker. Seeking over an array of strings still reads each string's 8-byte length (there is no
other way to find its end), never the string bytes; an array of numbers is one seek. So a tokenizer of 128k tokens
and 280k merges costs about 3 MB of length reads and no decoding, where ``gguf.GGUFReader`` builds a numpy view per
element. Of the tensor-info records the names are decoded; shapes, types and offsets are read only to check that
each tensor's data lies inside the file (a download cut short in the data is reported like one cut in the header).
Tensor data is read only for the small tensors a caller names (``tensors``): rope factor tables such as
``rope_freqs.weight`` (llama3 factors) and ``rope_factors_long/short.weight`` (LongRoPE), a few hundred bytes each.
Such a tensor is decoded when it is F32 or F16 with at most :data:`ARRAY_MAX` elements (else a :class:`Skipped`
marker), after its extent has been checked against the file size like every other tensor's; the read is one seek
and one read of exactly its bytes, so the cost does not grow with the file.

The header also gives the file's layout for a rewrite (:mod:`posenc_cli.models.gguf.writer`): each key/value
record's byte range and value type (``kv_ranges``: from its key's length to its value's end, so an unchanged record
is copied as bytes) and every tensor-info record (``tensor_infos``: name, dims, ggml type, offset, data size).

Values are what ``gguf.GGUFReader``'s ``ReaderField.contents()`` gives, except float32 values (scalars and array
elements), which come back as the shortest decimal that rounds to the same float32 (``0.1``, not
``0.10000000149011612``): what the converter was given in nearly every case.

Every length and count is checked against the file size before it is used, so a truncated or hostile file is one
:class:`PosencError` (never a MemoryError, a hang or a RecursionError).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from posenc_cli.errors import PosencError

__all__ = ["ARRAY_MAX", "GgufHeader", "Skipped", "TensorInfo", "read_header", "parse_header", "shortest_float32"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
ARRAY_MAX = 4096  # elements of a wanted array decoded (per-layer lists: a few hundred at most)
STRING_MAX = 1 << 20  # bytes of a wanted string decoded
NAME_MAX = 65535  # bytes of a key or tensor name (the GGUF spec's limit for keys)
NESTING_MAX = 8  # arrays of arrays seeked over, at most this deep
DEFAULT_ALIGNMENT = 32

# GGUF value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
TYPE_NAMES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64",
              "int64", "float64")
_SCALARS: dict[int, struct.Struct] = {
    UINT8: struct.Struct("<B"), INT8: struct.Struct("<b"), UINT16: struct.Struct("<H"), INT16: struct.Struct("<h"),
    UINT32: struct.Struct("<I"), INT32: struct.Struct("<i"), FLOAT32: struct.Struct("<f"), BOOL: struct.Struct("<?"),
    UINT64: struct.Struct("<Q"), INT64: struct.Struct("<q"), FLOAT64: struct.Struct("<d"),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# ggml tensor types: (elements per block, bytes per block), as ggml.c's type_traits (blck_size, type_size) and gguf-py's
# GGML_QUANT_SIZES in llama-cpp-python 0.3.36's llama.cpp (Q8_1 is 2 + 2 + 32 = 36 bytes: block_q8_1 in
# ggml-common.h; gguf-py 0.19.0 on PyPI still says 40); a type not listed here (newer than this table) has only its
# start offset checked
GGML_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292), 16: (256, 66),
    17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136),
    24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54),
    35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}

# framework fact: ggml's type names (ggml.c type_traits[].type_name, llama-cpp-python 0.3.36), by ggml type id; the
# same ids as GGML_BLOCKS (ids 4, 5, 31-33 and 36-38 are removed types, no file holds them)
GGML_TYPE_NAMES: dict[int, str] = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1", 10: "q2_K", 11: "q3_K",
    12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s",
    20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64",
    29: "iq1_m", 30: "bf16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4", 40: "nvfp4", 41: "q1_0", 42: "q2_0",
}


@dataclass(frozen=True)
class Skipped:
    """A wanted value that was seeked over, not decoded: an array too long (or of arrays), or a string too long."""

    type: str  # "string", or the element type of an array: "uint32", "array", ...
    count: int  # elements (bytes for a string)

    def __str__(self) -> str:
        if self.type == "string":
            return f"a string of {self.count} bytes"
        return f"an array of {self.count} {self.type} entries"


class TensorInfo(NamedTuple):
    """One tensor-info record: its name, dims (ggml order), ggml type, data offset (from the data start) and data
    size in bytes (-1: a ggml type this module's table does not know)."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


@dataclass
class GgufHeader:
    """What :func:`read_header` read: the wanted fields (file order) and every tensor's name."""

    version: int
    tensor_count: int
    kv_count: int
    fields: dict[str, Any] = field(default_factory=dict)
    tensor_names: list[str] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0  # where the tensor data starts
    tensors: dict[str, list[float] | Skipped] = field(default_factory=dict)  # values of the tensors asked for
    # the file's layout, for a rewrite (models.gguf.writer): each key/value record's byte range (from its key's
    # length to its value's end) with its value type, and every tensor-info record, in file order
    kv_ranges: list[tuple[str, int, int, int]] = field(default_factory=list)  # key, start, end, value type
    tensor_infos: list[TensorInfo] = field(default_factory=list)


def shortest_float32(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (a float32 field read back as float64)."""
    try:
        packed = struct.pack("<f", value)
    except (OverflowError, struct.error):
        return value
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == packed:
                return candidate
        except (OverflowError, struct.error):
            continue
    return value


def starts_with_gguf_magic(path: Path, label: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None


def read_header(path: str | os.PathLike[str], label: str, wanted: Callable[[str], bool],
                tensors: Collection[str] = ()) -> GgufHeader:
    """Read the GGUF header of the file at ``path`` (see the module docstring), and the values of the small
    tensors named in ``tensors`` that the file holds; errors are one PosencError."""
    try:
        with open(path, "rb") as fh:
            return parse_header(fh, os.fstat(fh.fileno()).st_size, label, wanted, tensors)
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None


def parse_header(fh: IO[bytes], size: int, label: str, wanted: Callable[[str], bool],
                 tensors: Collection[str] = ()) -> GgufHeader:
    """:func:`read_header` on an open binary file of ``size`` bytes, positioned at its start."""
    parser = _Parser(fh, size, label)
    out = parser.header(wanted)
    for name in tensors:
        if name in parser.extents:
            out.tensors[name] = parser.tensor_values(out.data_offset, name)
    return out


class _Parser:
    def __init__(self, fh: IO[bytes], size: int, label: str) -> None:
        self.fh, self.size, self.label = fh, size, label
        self.pos = 0  # the parser's own position: fh.tell() costs a call per element
        self.extents: dict[str, tuple[int, tuple[int, ...], int, int]] = {}  # name: type, dims, offset, bytes

    # ------------------------------------------------------------------ errors and bounds

    def fail(self, reason: str) -> PosencError:
        return PosencError(f"{self.label}: not a readable GGUF file ({reason})")

    def truncated(self, what: str) -> PosencError:
        return self.fail(f"truncated: the file ends at byte {self.size}, inside {what}")

    def need(self, nbytes: int, what: str) -> None:
        if nbytes < 0 or self.pos + nbytes > self.size:
            raise self.truncated(what)

    def read(self, nbytes: int, what: str) -> bytes:
        self.need(nbytes, what)
        data = self.fh.read(nbytes)
        if len(data) != nbytes:  # the file shrank under us
            raise self.truncated(what)
        self.pos += nbytes
        return data

    def skip(self, nbytes: int, what: str) -> None:
        self.need(nbytes, what)
        self.pos += nbytes
        self.fh.seek(self.pos)

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.read(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = _U64.unpack(self.read(8, what))[0]
        return value

    def name(self, what: str) -> str:
        length = self.u64(what)
        if length > NAME_MAX:
            if self.pos + length > self.size:
                raise self.truncated(what)
            raise self.fail(f"{what} is {length} bytes long (at most {NAME_MAX})")
        return self.text(self.read(length, what), what)

    def text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    # ------------------------------------------------------------------ the file

    def header(self, wanted: Callable[[str], bool]) -> GgufHeader:
        if self.read(4, "the magic bytes") != MAGIC:
            raise self.fail("it does not start with the GGUF magic bytes")
        version = self.u32("the version")
        if version not in VERSIONS:
            if version and not version & 0xFFFF:
                raise self.fail("a big-endian GGUF file; posenc reads little-endian files only")
            raise self.fail(f"GGUF version {version}; posenc reads versions 2 and 3")
        tensor_count = self.u64("the tensor count")
        kv_count = self.u64("the metadata count")
        # every key/value takes at least 13 bytes and every tensor-info record 24: a count the file cannot hold
        # is refused before any loop runs on it
        if kv_count * 13 + tensor_count * 24 > self.size - self.pos:
            raise self.truncated(f"the {kv_count} metadata entries and {tensor_count} tensor-info records it "
                                 "announces")
        out = GgufHeader(version, tensor_count, kv_count)
        seen: set[str] = set()
        for index in range(kv_count):
            start = self.pos
            key = self.name(f"metadata key {index}")
            if key in seen:
                raise self.fail(f"duplicate metadata key {key}")
            seen.add(key)
            vtype = self.u32(f"the type of {key}")
            if key == "general.alignment":
                out.alignment = self.alignment(vtype)
            elif wanted(key):
                out.fields[key] = self.value(vtype, key)
            else:
                self.skip_value(vtype, key, 0)
            out.kv_ranges.append((key, start, self.pos, vtype))
        names: set[str] = set()
        extents: list[tuple[str, int, int]] = []  # name, data offset, bytes (-1: unknown type)
        for index in range(tensor_count):
            name = self.name(f"the name of tensor {index}")
            if name in names:
                raise self.fail(f"duplicate tensor {name}")
            names.add(name)
            out.tensor_names.append(name)
            info = self.tensor_extent(name)
            out.tensor_infos.append(info)
            extents.append((name, info.offset, info.nbytes))
        out.data_offset = self.pos + (-self.pos % out.alignment)
        for name, offset, nbytes in extents:
            end = out.data_offset + offset + max(nbytes, 0)
            if end > self.size:
                raise self.truncated(f"the data of tensor {name} (bytes {out.data_offset + offset} to {end})")
        return out

    def alignment(self, vtype: int) -> int:
        if vtype != UINT32:
            raise self.fail(f"general.alignment is {_type_name(vtype)}, not uint32")
        value = self.u32("general.alignment")
        if value == 0 or value & (value - 1):
            raise self.fail(f"general.alignment = {value} is not a power of two")
        return value

    def tensor_extent(self, name: str) -> TensorInfo:
        what = f"the tensor-info record of {name}"
        n_dims = self.u32(what)
        dims = struct.unpack(f"<{n_dims}Q", self.read(8 * n_dims, what)) if n_dims else ()
        ggml_type = self.u32(what)
        offset = self.u64(what)
        block = GGML_BLOCKS.get(ggml_type)
        if block is None:
            return TensorInfo(name, tuple(dims), ggml_type, offset, -1)
        elements = 1
        for d in dims:
            elements *= d
        per_block, block_bytes = block
        if dims and dims[0] % per_block:
            raise self.fail(f"tensor {name}: its first dimension {dims[0]} is not a multiple of its type's "
                            f"block of {per_block}")
        self.extents[name] = (ggml_type, tuple(dims), offset, elements // per_block * block_bytes)
        return TensorInfo(name, tuple(dims), ggml_type, offset, elements // per_block * block_bytes)

    def tensor_values(self, data_offset: int, name: str) -> list[float] | Skipped:
        """The values of the small F32/F16 tensor ``name`` (its extent was checked by :meth:`header`)."""
        ggml_type, dims, offset, nbytes = self.extents[name]
        elements = 1
        for d in dims:
            elements *= d
        kind = {0: "f", 1: "e"}.get(ggml_type)
        if kind is None or elements > ARRAY_MAX:
            return Skipped(f"ggml type {ggml_type} tensor" if kind is None else "float32", elements)
        self.pos = data_offset + offset
        self.fh.seek(self.pos)
        raw = self.read(nbytes, f"the data of tensor {name}")
        return [float(v) for v in struct.unpack(f"<{elements}{kind}", raw)]

    # ------------------------------------------------------------------ values

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            codec = _SCALARS[vtype]
            (value,) = codec.unpack(self.read(codec.size, key))
            return shortest_float32(value) if vtype == FLOAT32 else value
        if vtype == STRING:
            length = self.u64(key)
            if length > STRING_MAX:
                self.skip(length, key)
                return Skipped("string", length)
            return self.text(self.read(length, key), key)
        if vtype == ARRAY:
            etype = self.u32(f"the element type of {key}")
            count = self.u64(f"the length of {key}")
            if etype == ARRAY or count > ARRAY_MAX:
                self.skip_elements(etype, count, key, 1)
                return Skipped(_type_name(etype), count)
            if etype in _SCALARS:
                codec = _SCALARS[etype]
                values = list(struct.unpack(f"<{count}{codec.format[1:]}", self.read(codec.size * count, key)))
                return [shortest_float32(v) for v in values] if etype == FLOAT32 else values
            if etype == STRING:
                return [self.value(STRING, key) for _ in range(count)]
            raise self.fail(f"{key} is an array of unknown value type {etype}")
        raise self.fail(f"{key} has unknown value type {vtype}")

    def skip_value(self, vtype: int, key: str, depth: int) -> None:
        if vtype in _SCALARS:
            self.skip(_SCALARS[vtype].size, key)
        elif vtype == STRING:
            self.skip(self.u64(key), key)
        elif vtype == ARRAY:
            etype = self.u32(f"the element type of {key}")
            self.skip_elements(etype, self.u64(f"the length of {key}"), key, depth + 1)
        else:
            raise self.fail(f"{key} has unknown value type {vtype}")

    def skip_elements(self, etype: int, count: int, key: str, depth: int) -> None:
        if etype in _SCALARS:
            self.skip(_SCALARS[etype].size * count, key)
        elif etype == STRING:
            self.skip_strings(count, key)
        elif etype == ARRAY:
            if depth >= NESTING_MAX:
                raise self.fail(f"{key} nests arrays more than {NESTING_MAX} deep")
            self.need(12 * count, key)
            for _ in range(count):
                self.skip_value(ARRAY, key, depth)
        else:
            raise self.fail(f"{key} is an array of unknown value type {etype}")

    def skip_strings(self, count: int, key: str) -> None:
        """Seek over ``count`` strings: each string's length is read, its bytes are not."""
        self.need(8 * count, key)
        read, seek, unpack = self.fh.read, self.fh.seek, _U64.unpack
        pos = self.pos
        try:
            for _ in range(count):
                (length,) = unpack(read(8))
                pos += 8 + length
                seek(length, 1)
        except (struct.error, OverflowError):  # a length read past the end came back short, or one seek too far
            raise self.truncated(key) from None
        self.need(pos - self.pos, key)
        self.pos = pos


def _type_name(vtype: int) -> str:
    return TYPE_NAMES[vtype] if 0 <= vtype < len(TYPE_NAMES) else f"type {vtype}"
