"""The size of a model's weights without reading them: a GGUF's tensor-info records, the safetensors headers of a
folder, or the Hub's safetensors metadata; "unknown", with why, where none is given.

Conventions: sizes are bytes of tensor data as stored (no padding between tensors, no header); ``parameters``
counts elements (a quantized block of 32 weights is 32); ``by_dtype`` maps the file's own type names (ggml's
``q4_K``, ``f16``; safetensors' ``BF16``, ``F8_E4M3``) to bytes. Every file is read up to the end of its header:
a 100 GB file costs its header, and the tensor data is never read. Weights are what the file stores, not what an
engine makes of them (vLLM's ``--dtype`` casting a float32 checkpoint, a backend's buffer alignment).

* GGUF (:func:`gguf_weights`): each tensor's bytes from its dims and ggml type, by ggml's block sizes
  (:data:`posenc_cli.models.gguf.header.GGML_BLOCKS`, llama.cpp's ``ggml.c`` ``type_traits``), summed as llama.cpp's
  ``llama_model_loader`` sums ``ggml_nbytes`` for its "file size" line; a type newer than that table is sized by
  its offsets (up to the alignment padding, said in a note). A split GGUF (``NAME-00001-of-00003.gguf``, the
  ``split.*`` keys) adds up the headers of the shards beside it, found by name as ``llama_get_list_splits`` finds
  them (src/llama-model-loader.cpp); with a shard missing the total is unknown.
* safetensors (:func:`safetensors_weights`): the 8-byte length and JSON header of each file, checked as
  safetensors' ``Metadata::validate`` checks it (tensors contiguous from offset 0, each ``end - begin`` = elements x
  the dtype's bits / 8, the data ending at the file's end; a header of at most 100,000,000 bytes). The files are
  the shards ``model.safetensors.index.json`` lists, else ``model.safetensors``, else every ``*.safetensors``
  (vLLM's glob when there is no index).
* The Hub (:func:`hub_weights`): the same files read from the local HF cache when all of them are there, else
  ``huggingface_hub``'s ``HfApi.get_safetensors_metadata``, which asks for each file's first 100,000 bytes by an
  HTTP Range request (a second one when the header is longer) and never the data. huggingface_hub is imported
  inside that function; ``HF_HUB_OFFLINE`` or an unreachable endpoint is "unknown" at once, with why.

A damaged local file is one :class:`PosencError` line; the Hub's failures are "unknown" with why (the caller falls
back to what it can do without the weights).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli import __version__
from posenc_cli.errors import PosencError
from posenc_cli.files import parse_json_object, read_bytes
from posenc_cli.models.hub import HUB_INSTALL_HINT, _chain, _one_line, _status, _unreachable, is_hub_id
from posenc_cli.units import format_size

if TYPE_CHECKING:
    from posenc_cli.models.gguf.header import GgufHeader

__all__ = ["SAFETENSORS_BITS", "SAFETENSORS_HEADER_MAX", "Weights", "gguf_weights",
           "hub_weights", "safetensors_file_weights", "safetensors_weights", "weights_of"]

# framework fact: bits per element of each safetensors dtype (safetensors 0.8.0, Dtype::bitsize; F4 and F6 pack
# elements across bytes, and a tensor of them must end on a byte)
SAFETENSORS_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
# framework fact: safetensors refuses a longer header (tensor.rs MAX_HEADER_SIZE)
SAFETENSORS_HEADER_MAX = 100_000_000

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


class Weights(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """The weights' size: ``bytes`` (None: unknown), ``source`` (how it was read: "GGUF tensor data", "safetensors
    headers (N files)", "Hub safetensors metadata"; or why it is unknown), bytes per stored type, the element count
    (None: unknown), and notes (a shard layout, padding, the cache read)."""

    bytes: int | None
    source: str
    by_dtype: Mapping[str, int] = MappingProxyType({})  # read-only: a default shared by every Weights
    parameters: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.bytes is not None


def _unknown(why: str, *notes: str) -> Weights:
    return Weights(None, why, {}, None, tuple(notes))


class _Tally:
    """Bytes, elements and bytes per type, added up tensor by tensor."""

    def __init__(self) -> None:
        self.bytes = 0
        self.parameters = 0
        self.tensors = 0
        self.by_dtype: dict[str, int] = {}

    def add(self, dtype: str, nbytes: int, elements: int) -> None:
        self.bytes += nbytes
        self.parameters += elements
        self.tensors += 1
        self.by_dtype[dtype] = self.by_dtype.get(dtype, 0) + nbytes

    def weights(self, source: str, notes: Iterable[str] = ()) -> Weights:
        order = sorted(self.by_dtype.items(), key=lambda kv: (-kv[1], kv[0]))
        return Weights(self.bytes, source, dict(order), self.parameters, tuple(notes))


def _product(dims: Iterable[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


# ---------------------------------------------------------------------------------------------------------- GGUF


def gguf_weights(path: str | os.PathLike[str], label: str | None = None) -> Weights:
    """The tensor data of the GGUF at ``path`` (and of the other shards of a split GGUF, beside it), from the
    headers alone; a damaged file is one PosencError."""
    label = str(path) if label is None else label
    header = _gguf_header(path, label)
    count = _split_int(header, "split.count", label)
    if count is None or count <= 1:
        tally, notes = _gguf_tally([(Path(path), header)], label)
        return tally.weights("GGUF tensor data", notes)
    return _gguf_split(Path(path), header, count, label)


def _gguf_header(path: str | os.PathLike[str], label: str) -> GgufHeader:
    from posenc_cli.models.gguf.header import read_header  # a GGUF's only: a config.json's weights need none

    return read_header(path, label, lambda key: key in _SPLIT_KEYS)


def _split_int(header: GgufHeader, key: str, label: str) -> int | None:
    value = header.fields.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PosencError(f"{label}: {key} = {value!r} is not a count (a split GGUF stores it as an integer)")
    return value


def _gguf_tally(shards: list[tuple[Path, GgufHeader]], label: str) -> tuple[_Tally, list[str]]:
    """Tensors of every shard added up; llama.cpp's rules on duplicates across shards; notes on sizes read from
    offsets (a type newer than GGML_BLOCKS) and on bytes after a file's tensor data."""
    from posenc_cli.models.gguf.header import GGML_TYPE_NAMES

    tally, notes, seen = _Tally(), list[str](), set[str]()
    guessed: dict[str, int] = {}
    for path, header in shards:
        size = os.stat(path).st_size
        order = sorted(header.tensor_infos, key=lambda t: t.offset)
        padded_end = header.data_offset
        for i, info in enumerate(order):
            if info.name in seen:
                raise PosencError(f"{label}: tensor {info.name} is in two shards (llama.cpp refuses the model)")
            seen.add(info.name)
            nbytes = info.nbytes
            if nbytes < 0:  # a type GGML_BLOCKS lacks: up to the next tensor (or the file's end), padding included
                end = order[i + 1].offset if i + 1 < len(order) else size - header.data_offset
                nbytes = max(end - info.offset, 0)
                name = f"ggml type {info.ggml_type}"
                guessed[name] = guessed.get(name, 0) + 1
            else:
                name = GGML_TYPE_NAMES.get(info.ggml_type, f"ggml type {info.ggml_type}")
            tally.add(name, nbytes, _product(info.dims))
            end = header.data_offset + info.offset + nbytes
            padded_end = max(padded_end, end + (-end % header.alignment))
        if size > padded_end and header.tensor_infos:
            notes.append(f"{path.name}: {size - padded_end} bytes after the tensor data (not counted)")
    for name, n in guessed.items():
        notes.append(f"{n} tensors of {name}, newer than posenc's table (llama.cpp 0.3.36): sized by their offsets, "
                     "alignment padding included")
    return tally, notes


def _gguf_split(path: Path, header: GgufHeader, count: int, label: str) -> Weights:
    """A split GGUF: every shard's header, found by llama.cpp's naming rule (llama_split_prefix/llama_split_path)."""
    no = _split_int(header, "split.no", label) or 0
    postfix = f"-{no + 1:05d}-of-{count:05d}.gguf"
    where = f"{label} is shard {no + 1} of {count} of a split GGUF"
    if not path.name.endswith(postfix) or len(path.name) <= len(postfix):
        return _unknown(f"{where}, and its name does not end in {postfix}, so the other shards cannot be found "
                        "(llama.cpp finds them by that name)")
    prefix = path.name[: -len(postfix)]
    paths = [path.with_name(f"{prefix}-{i + 1:05d}-of-{count:05d}.gguf") for i in range(count)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        tally, _ = _gguf_tally([(path, header)], label)
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return _unknown(f"{where}; {shown} not beside it, so the other shards' sizes are unknown",
                        f"this shard holds {format_size(tally.bytes)} of tensor data ({tally.tensors} tensors)")
    shards = []
    for i, shard in enumerate(paths):
        head = header if shard == path else _gguf_header(shard, str(shard))
        if _split_int(head, "split.no", str(shard)) != i or _split_int(head, "split.count", str(shard)) != count:
            raise PosencError(f"{shard}: its split.no/split.count do not say shard {i + 1} of {count} (llama.cpp "
                              "refuses the model)")
        shards.append((shard, head))
    tally, notes = _gguf_tally(shards, label)
    expected = _split_int(shards[0][1], "split.tensors.count", str(paths[0]))
    if expected is not None and expected != tally.tensors:
        raise PosencError(f"{paths[0]}: split.tensors.count = {expected}, but the {count} shards hold {tally.tensors} "
                          "tensors (llama.cpp refuses the model)")
    if no:
        notes.insert(0, f"llama.cpp loads a split model from its first shard, {paths[0].name}")
    return tally.weights(f"GGUF tensor data ({count} shards)", notes)


# ---------------------------------------------------------------------------------------------------- safetensors


def _st_error(label: str, reason: str) -> PosencError:
    return PosencError(f"{label}: not a readable safetensors file ({reason})")


def _read_st_header(path: Path, label: str) -> tuple[dict[str, Any], int, int]:
    """(the parsed JSON header, its length, the file's size): the first 8 + length bytes, nothing more."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            raw = fh.read(8)
            if len(raw) < 8:
                raise _st_error(label, f"the file is {size} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", raw)
            if length > SAFETENSORS_HEADER_MAX:
                raise _st_error(label, f"a header of {length} bytes; safetensors reads at most "
                                f"{SAFETENSORS_HEADER_MAX}")
            if 8 + length > size:
                raise _st_error(label, f"truncated: the file ends at byte {size}, inside its {length}-byte header")
            text = fh.read(length)
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    if len(text) != length:
        raise _st_error(label, "the file shrank while it was read")
    try:
        header = parse_json_object(text, "header")
    except PosencError as exc:
        raise _st_error(label, str(exc)) from None
    return header, length, size


def _tensor_entry(name: str, entry: Any, label: str) -> tuple[str, tuple[int, ...], int, int]:
    """(dtype, shape, begin, end) of one header entry, its types checked."""
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise _st_error(label, f"tensor {name} is not an object with dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]

    def counts(values: Any) -> bool:
        return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                for v in values)

    if not isinstance(dtype, str) or not counts(shape) or not counts(offsets) or len(offsets) != 2:
        raise _st_error(label, f"tensor {name}: dtype must be a string, shape a list of counts and data_offsets two "
                        "offsets")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _tally_header(header: Mapping[str, Any], label: str, tally: _Tally, notes: list[str]) -> int:
    """Add the tensors of one parsed header to ``tally``, checked as safetensors' Metadata::validate checks them;
    returns where the data ends (bytes from the data section's start)."""
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise _st_error(label, "__metadata__ must be an object of strings")
    entries = sorted((_tensor_entry(name, entry, label) + (name,) for name, entry in header.items()
                      if name != "__metadata__"), key=lambda e: (e[2], e[3]))
    end = 0
    unknown: set[str] = set()
    for dtype, shape, begin, stop, name in entries:
        if begin != end or stop < begin:
            raise _st_error(label, f"tensor {name} has data_offsets [{begin}, {stop}]; the tensors must follow each "
                            f"other from offset 0 (the previous one ends at {end})")
        elements = _product(shape)
        bits = SAFETENSORS_BITS.get(dtype)
        if bits is None:
            unknown.add(dtype)
        elif elements * bits % 8 or (stop - begin) != elements * bits // 8:
            raise _st_error(label, f"tensor {name}: {stop - begin} bytes of data for shape {list(shape)} of {dtype}")
        tally.add(dtype, stop - begin, elements)
        end = stop
    if unknown:
        notes.append(f"{label}: dtype {', '.join(sorted(unknown))} is newer than posenc's table (safetensors "
                     "0.8.0): sized by its data_offsets")
    return end


def safetensors_file_weights(path: str | os.PathLike[str], label: str | None = None) -> Weights:
    """The tensor data of one safetensors file, from its header alone; a damaged file is one PosencError."""
    label = str(path) if label is None else label
    tally, notes = _Tally(), list[str]()
    _tally_file(Path(path), label, tally, notes)
    return tally.weights("safetensors headers (1 file)", notes)


def _tally_file(path: Path, label: str, tally: _Tally, notes: list[str]) -> None:
    header, length, size = _read_st_header(path, label)
    end = _tally_header(header, label, tally, notes)
    if 8 + length + end != size:
        where = "truncated: the file ends at byte" if 8 + length + end > size else "the data ends before byte"
        raise _st_error(label, f"{where} {size}, but its header puts the end of the data at byte {8 + length + end}")


def safetensors_weights(folder: str | os.PathLike[str]) -> Weights:
    """The tensor data of the safetensors files in ``folder`` (see the module docstring for which), from their
    headers; unknown when the folder holds none or the index names a shard that is not there."""
    root = Path(folder)
    files, notes = _safetensors_files(root)
    if isinstance(files, str):
        return _unknown(files, *notes)
    tally = _Tally()
    for path in files:
        _tally_file(path, str(path), tally, notes)
    plural = "file" if len(files) == 1 else "files"
    return tally.weights(f"safetensors headers ({len(files)} {plural})", notes)


def _safetensors_files(root: Path) -> tuple[list[Path] | str, list[str]]:
    """The files to read, or why there are none to read; and notes."""
    index = root / INDEX
    if index.is_file():
        data = parse_json_object(read_bytes(index), str(index))
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise PosencError(f"{index}: weight_map must be an object of tensor name -> file name")
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            return f"{INDEX} in {root} lists {len(names)} files, and {shown} is not there", []
        return [root / n for n in names], []
    if (root / SINGLE).is_file():
        return [root / SINGLE], []
    found = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if found:
        notes = [f"no {INDEX} or {SINGLE} in {root}: every *.safetensors file counted, as vLLM loads them"]
        return found, notes if len(found) > 1 else []
    other = sorted(p.name for p in root.glob("*.bin") if p.is_file()) + sorted(
        p.name for p in root.glob("*.pt*") if p.is_file())
    hint = f" (it holds {', '.join(other[:3])}: pickled weights, whose sizes posenc does not read)" if other else ""
    return f"no safetensors files in {root}{hint}", []


# ---------------------------------------------------------------------------------------------------------- Hub


def hub_weights(repo_id: str, revision: str | None = None) -> Weights:
    """The safetensors weights of Hub model ``repo_id`` at ``revision`` (None: main), from the local HF cache when
    every file is there, else from the Hub's headers by HTTP Range requests; every failure is "unknown", with why."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError:
        return _unknown(f"reading the weights of {repo_id!r} needs huggingface_hub: {HUB_INSTALL_HINT}")
    at = f"{repo_id}@{revision or 'main'}"
    cached = _cached_weights(huggingface_hub, repo_id, revision)
    if cached is not None:
        return cached
    if constants.HF_HUB_OFFLINE:
        return _unknown(f"HF_HUB_OFFLINE is set and the safetensors files of {at} are not all in the local cache")
    unreachable = _unreachable()
    if unreachable is not None:
        return _unknown(f"the Hub cannot be reached ({unreachable}) for the safetensors headers of {at}")
    api = huggingface_hub.HfApi(library_name="posenc", library_version=__version__)
    with _quiet(huggingface_hub):
        try:
            meta = api.get_safetensors_metadata(repo_id, revision=revision)
        except Exception as exc:  # only library code runs in the try: every failure becomes one line
            return _unknown(_hub_reason(exc, at))
    tally, notes = _Tally(), list[str]()
    try:
        for name in sorted(meta.files_metadata):
            tensors = meta.files_metadata[name].tensors
            _tally_header({k: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                           for k, t in tensors.items()}, f"Hub {at} {name}", tally, notes)
    except PosencError as exc:
        return _unknown(str(exc))
    files = len(meta.files_metadata)
    notes.insert(0, f"{files} file{'s' if files != 1 else ''} on the Hub: "
                    f"{'their headers' if files != 1 else 'its header'} read by HTTP Range requests")
    return tally.weights("Hub safetensors metadata", notes)


def _cached_weights(hub: Any, repo_id: str, revision: str | None) -> Weights | None:
    """The weights from the files in the local HF cache's snapshot, when every one is there; else None."""
    for name in (INDEX, SINGLE):
        try:
            path = hub.try_to_load_from_cache(repo_id, name, revision=revision)
        except Exception:  # an id or revision the cache cannot name: the Hub path says what is wrong
            return None
        if isinstance(path, str):
            weights = safetensors_weights(Path(path).parent)
            if weights.known:
                return Weights(weights.bytes, weights.source, weights.by_dtype, weights.parameters,
                               (f"read from the local HF cache ({Path(path).parent})", *weights.notes))
            return None
    return None


class _quiet:
    """huggingface_hub's retry warnings and its shard progress bar off, restored on exit (the bar stays as
    ``HF_HUB_DISABLE_PROGRESS_BARS`` says when that is set: huggingface_hub warns when it is overridden)."""

    def __init__(self, hub: Any) -> None:
        import logging

        self.error = logging.ERROR
        self.hub, self.log = hub, logging.getLogger("huggingface_hub")
        self.bars = hub.constants.HF_HUB_DISABLE_PROGRESS_BARS is None and not hub.utils.are_progress_bars_disabled()

    def __enter__(self) -> None:
        self.level = self.log.level
        self.log.setLevel(self.error)
        if self.bars:
            self.hub.utils.disable_progress_bars()

    def __exit__(self, *exc: object) -> None:
        self.log.setLevel(self.level)
        if self.bars:
            self.hub.utils.enable_progress_bars()


def _hub_reason(exc: Exception, at: str) -> str:
    """Why the Hub's safetensors metadata of ``at`` could not be read, in one line."""
    from huggingface_hub import errors as hf

    if isinstance(exc, hf.NotASafetensorsRepoError):
        return f"Hub {at} has no {SINGLE} or {INDEX} (weights in another format: .bin, GGUF)"
    if isinstance(exc, hf.SafetensorsParsingError):
        return f"a safetensors header of Hub {at} cannot be read: {_one_line(str(exc))}"
    if isinstance(exc, hf.GatedRepoError):
        return f"Hub {at} is gated: accept its licence on the Hub and set HF_TOKEN (or hf auth login)"
    if isinstance(exc, hf.RepositoryNotFoundError):
        return f"Hub {at} not found (a private repo needs HF_TOKEN)"
    if isinstance(exc, hf.RevisionNotFoundError):
        return f"Hub {at}: no such revision"
    chain = _chain(exc)
    if any(isinstance(e, hf.OfflineModeIsEnabled) for e in chain):
        return f"HF_HUB_OFFLINE is set and the safetensors files of {at} are not all in the local cache"
    http = next((e for e in chain if isinstance(e, hf.HfHubHTTPError)), None)
    if http is not None:
        return f"the Hub answered HTTP {_status(http)} for the safetensors headers of {at}"
    reason = _one_line(str(chain[-1])) or chain[-1].__class__.__name__
    return f"the safetensors headers of Hub {at} could not be fetched ({reason})"


# ------------------------------------------------------------------------------------------------------ dispatch


def weights_of(source: str, *, revision: str | None = None) -> Weights:
    """The weights of what ``source`` names, resolved as :func:`posenc_cli.models.sources.read_source` resolves it:
    a GGUF file (by its magic bytes), a safetensors file, a folder (its safetensors, or its only GGUF when it has no
    config.json), a Hub id; a config.json or stdin gives no weight sizes (unknown)."""
    from posenc_cli.models.gguf.header import MAGIC as GGUF_MAGIC

    if source == "-":
        return _unknown("a config read from stdin gives no weight sizes")
    path = Path(os.path.expanduser(source))
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError):  # a name the OS rejects (too long, NUL) does not exist
        is_dir = exists = False
    if is_dir:
        return _folder_weights(path)
    if exists:
        if _starts_with(path, GGUF_MAGIC) or source.lower().endswith(".gguf"):
            return gguf_weights(path, source)
        if source.lower().endswith(".safetensors") or _is_safetensors(path):
            return safetensors_file_weights(path, source)
        return _unknown("a config.json gives no weight sizes", *_beside(path))
    if source.lower().endswith((".json", ".gguf", ".safetensors")) or source.startswith((".", "~", os.sep)) \
            or not is_hub_id(source):
        raise PosencError(f"{source}: no such file")
    return hub_weights(source, revision)


def _folder_weights(folder: Path) -> Weights:
    has_config = (folder / "config.json").is_file()
    weights = safetensors_weights(folder)
    if weights.known or has_config:
        return weights
    ggufs = sorted(p for p in folder.glob("*.gguf") if p.is_file())
    if len(ggufs) == 1:
        return gguf_weights(ggufs[0])
    if ggufs:
        return _unknown(f"{folder} holds {len(ggufs)} .gguf files: pass one of them")
    return weights


def _beside(path: Path) -> Iterator[str]:
    folder = path.parent
    if any(folder.glob("*.safetensors")):
        yield f"pass its folder ({folder}) to read the safetensors headers beside it"


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _starts_with(path: Path, magic: bytes) -> bool:
    return _head(path, len(magic)) == magic


def _is_safetensors(path: Path) -> bool:
    """An 8-byte length, then a JSON object (a JSON file starts with its object, or with white space)."""
    head = _head(path, 9)
    return len(head) == 9 and head[8:] == b"{" and not head[:1].isspace() and head[:1] != b"{"
