"""posenc_cli.models.sources.read_source: config files, folders, stdin, GGUF files and Hub ids, with the real packages.

GGUF files are written by ``gguf.GGUFWriter``. Hub ids go through the real ``huggingface_hub.hf_hub_download``
against a local fake of the Hub's ``/{repo}/resolve/{revision}/{file}`` endpoint (``HF_ENDPOINT``); the cache is laid
out by huggingface_hub itself. huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the cache paths once, at
import, so every Hub scenario runs in a fresh interpreter with its own environment. No network, no mocks.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_hub import SHA, FakeHub, HubRepo, serve

from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.metadata import GgufFacts
from posenc_cli.models.hub import is_hub_id
from posenc_cli.models.sources import read_source

ROOT = Path(__file__).resolve().parents[2]
QWEN: dict[str, Any] = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
                        "max_position_embeddings": 32768, "rope_theta": 1000000.0}


def write_json(folder: Path, data: Any, name: str = "config.json") -> str:
    """``data`` as JSON in ``folder / name``; the path as text. (Not clihelpers': that one imports the whole CLI.)"""
    path = folder / name
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return str(path)


def error_of(source: str, **kwargs: Any) -> str:
    """The PosencError message read_source raises for ``source``; it must be one line."""
    with pytest.raises(PosencError) as info:
        read_source(source, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------------------------------------- files, folders, stdin


def test_config_file(tmp_path: Path) -> None:
    path = write_json(tmp_path, QWEN)
    src = read_source(path)
    assert (src.config, src.label, src.kind, src.path, src.gguf) == (QWEN, path, "file", path, None)


def test_folder_with_config_json(tmp_path: Path) -> None:
    path = write_json(tmp_path, QWEN)
    (tmp_path / "model.safetensors").write_bytes(b"")
    src = read_source(str(tmp_path))
    assert (src.config, src.kind, src.path, src.label) == (QWEN, "folder", path, path)


def test_folder_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    message = error_of(str(tmp_path))
    assert message == (f"{tmp_path}: no config.json in this folder (a model folder holds config.json next to the "
                       "weights)")


def test_folder_with_two_gguf_files_names_the_count(tmp_path: Path) -> None:
    (tmp_path / "a.gguf").write_bytes(b"GGUF")
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    assert "no config.json in this folder" in (message := error_of(str(tmp_path)))
    assert "it holds 2 .gguf files: pass one of them" in message


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(QWEN)))
    src = read_source("-")
    assert (src.config, src.label, src.kind, src.path) == (QWEN, "<stdin>", "stdin", None)


def test_stdin_must_hold_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("[1, 2]"))
    assert error_of("-") == "<stdin>: expected a JSON object, got an array"


@pytest.mark.parametrize("name", ["missing.json", "model.gguf", "./x", "~/no/such/dir/config", "a/b/c",
                                  "org/repo.git"])
def test_missing_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert error_of(name) == f"{name}: no such file"


def test_missing_absolute_path(tmp_path: Path) -> None:
    path = str(tmp_path / "nope" / "config.json")
    assert error_of(path) == f"{path}: no such file"


@pytest.mark.parametrize("name", ["has space", "x--y", "a..b", "-lead", "repo.git"])
def test_neither_path_nor_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert error_of(name) == f"{name}: not a file, a folder or a Hub id"


def test_empty_source() -> None:
    assert error_of("").startswith("empty model source")


@pytest.mark.parametrize("value", [[1, 2], "text", 3])
def test_text_config_must_be_an_object(tmp_path: Path, value: Any) -> None:
    path = write_json(tmp_path, {**QWEN, "text_config": value})
    assert error_of(path) == f"{path}: text_config must be a JSON object, got {type(value).__name__}"


def test_text_config_null_or_object_is_fine(tmp_path: Path) -> None:
    assert read_source(write_json(tmp_path, {**QWEN, "text_config": None}, "a.json")).kind == "file"
    assert read_source(write_json(tmp_path, {"text_config": QWEN}, "b.json")).config["text_config"] == QWEN


def test_revision_is_for_hub_ids_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_json(tmp_path, QWEN)
    # the library names the argument (the command line renders it as --revision)
    assert error_of(path, revision="main").startswith("revision applies to Hub ids only")
    assert error_of(str(tmp_path), revision="main").startswith("revision applies to Hub ids only")
    monkeypatch.setattr(sys, "stdin", io.StringIO("{}"))
    assert error_of("-", revision="main").startswith("revision applies to Hub ids only")


def test_a_local_folder_wins_over_a_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "org" / "model").mkdir(parents=True)
    write_json(tmp_path / "org" / "model", QWEN)
    monkeypatch.chdir(tmp_path)
    assert read_source("org/model").kind == "folder"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("gpt2", True), ("Qwen/Qwen2.5-7B-Instruct", True), ("org/tiny_model.v1", True), ("a" * 96, True),
     ("a" * 97, False), ("a/b/c", False), ("org/-x", False), ("org/x-", False), ("x--y", False), ("a..b", False),
     ("org/repo.git", False), ("", False), ("org/", False), ("ö/x", False)],
)
def test_hub_id_rules(text: str, expected: bool) -> None:
    assert is_hub_id(text) is expected


# --------------------------------------------------------------------------------------------------------- GGUF


@pytest.fixture
def gguf() -> Any:
    return pytest.importorskip("gguf")


def write_gguf(gguf: Any, path: Path, arch: str = "llama", *, ctx: int | None = 131072, theta: float | None = 500000.0,
               rope_dims: int | None = 128, embd: int = 4096, heads: int = 32, key_length: int | None = None,
               scaling: dict[str, Any] | None = None, rope_freqs: int = 0) -> Path:
    """A metadata-only GGUF (plus an optional float32 ``rope_freqs.weight`` of ``rope_freqs`` entries)."""
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    if ctx is not None:
        writer.add_context_length(ctx)
    if theta is not None:
        writer.add_rope_freq_base(theta)
    if rope_dims is not None:
        writer.add_rope_dimension_count(rope_dims)
    writer.add_embedding_length(embd)
    writer.add_head_count(heads)
    if key_length is not None:
        writer.add_key_length(key_length)
    scaling = scaling or {}
    if "type" in scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType(scaling["type"]))
    for key, add in (("factor", writer.add_rope_scaling_factor), ("orig", writer.add_rope_scaling_orig_ctx_len),
                     ("attn_factor", writer.add_rope_scaling_attn_factors),
                     ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                     ("beta_slow", writer.add_rope_scaling_yarn_beta_slow),
                     ("log_mul", writer.add_rope_scaling_yarn_log_mul)):
        if key in scaling:
            add(scaling[key])
    if rope_freqs:
        writer.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, rope_freqs, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_rope_freqs_not_llama3(gguf: Any, tmp_path: Path) -> None:
    """A rope_freqs table the llama3 formula cannot make (1 .. 8 evenly spaced): its values are read and it is
    shown as the division llama.cpp does (LongRoPE with that one table, magnitude 1)."""
    import numpy as np

    path = write_gguf(gguf, tmp_path / "llama.gguf", rope_freqs=64)
    src = read_source(str(path))
    assert (src.kind, src.label, src.path) == ("gguf", str(path), str(path))
    facts = src.gguf
    table = [float(x) for x in np.linspace(1.0, 8.0, 64, dtype=np.float32)]
    assert facts == GgufFacts(
        architecture="llama", context_length=131072, rope_freq_base=500000.0, rope_dimension_count=128,
        embedding_length=4096, head_count=32, has_rope_freqs=True,
        keys={"general.architecture": "llama", "llama.context_length": 131072, "llama.rope.freq_base": 500000.0,
              "llama.rope.dimension_count": 128, "llama.embedding_length": 4096, "llama.attention.head_count": 32},
        rope_freqs=table,
    )
    assert src.config == {"model_type": "llama", "max_position_embeddings": 131072, "rope_theta": 500000.0,
                          "head_dim": 128, "num_attention_heads": 32, "hidden_size": 4096,
                          "partial_rotary_factor": 1.0,
                          "rope_scaling": {"rope_type": "longrope", "long_factor": table, "short_factor": table,
                                           "attention_factor": 1.0, "original_max_position_embeddings": 131072}}


def test_gguf_yarn(gguf: Any, tmp_path: Path) -> None:
    scaling = {"type": "yarn", "factor": 4.0, "orig": 32768, "attn_factor": 0.1, "beta_fast": 32.0,
               "beta_slow": 1.0, "log_mul": 0.1}
    path = write_gguf(gguf, tmp_path / "qwen.gguf", "qwen2", theta=1e6, embd=3584, heads=28, scaling=scaling)
    facts = read_source(str(path)).gguf
    assert facts is not None and facts.has_rope_freqs is False
    assert (facts.scaling_type, facts.scaling_factor, facts.original_context_length) == ("yarn", 4.0, 32768)
    # float32 fields come back as the shortest decimal of the same float32, not 0.10000000149011612
    assert (facts.attn_factor, facts.yarn_beta_fast, facts.yarn_beta_slow, facts.yarn_log_multiplier) == (
        0.1, 32.0, 1.0, 0.1)
    assert facts.keys["qwen2.rope.scaling.type"] == "yarn"
    assert read_source(str(path)).config == {
        "model_type": "qwen2", "max_position_embeddings": 131072, "rope_theta": 1000000.0, "head_dim": 128,
        "num_attention_heads": 28, "hidden_size": 3584, "partial_rotary_factor": 1.0,
        # llama.cpp multiplies the GGUF's attn_factor by 0.1 ln(factor) + 1 in YaRN mode; its qwen2 code reads no
        # beta keys (32 and 1 unless flags say otherwise, transformers' defaults too)
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                         "attention_factor": 0.1 * (0.1 * math.log(4.0) + 1)},
    }


def test_gguf_yarn_betas_count_only_where_llama_cpp_reads_them(gguf: Any, tmp_path: Path) -> None:
    scaling = {"type": "yarn", "factor": 4.0, "orig": 32768, "beta_fast": 8.0, "beta_slow": 2.0}
    for arch, read in (("qwen2", False), ("mistral3", True)):
        path = write_gguf(gguf, tmp_path / f"{arch}.gguf", arch, theta=1e6, embd=3584, heads=28, scaling=scaling)
        rope = read_source(str(path)).config["rope_scaling"]
        assert ("beta_fast" in rope, "beta_slow" in rope) == (read, read), arch
        if read:
            assert (rope["beta_fast"], rope["beta_slow"]) == (8.0, 2.0)


def test_gguf_linear_partial_rotary_and_key_length(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "phi.gguf", "phi2", ctx=2048, theta=10000.0, rope_dims=32, embd=2560,
                      heads=32, scaling={"type": "linear", "factor": 2.0})
    cfg = read_source(str(path)).config
    assert cfg["head_dim"] == 80 and cfg["partial_rotary_factor"] == 0.4
    assert cfg["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    path = write_gguf(gguf, tmp_path / "gemma.gguf", "gemma", rope_dims=256, embd=3072, heads=16, key_length=256)
    cfg = read_source(str(path)).config
    # llama.cpp rotates rope.dimension_count features in every architecture: the factor is always written
    assert cfg["head_dim"] == 256 and cfg["partial_rotary_factor"] == 1.0


def test_gguf_factor_without_type_is_linear_as_in_llama_cpp(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "m.gguf", scaling={"factor": 4.0})
    src = read_source(str(path))
    assert src.gguf is not None and src.gguf.scaling_type is None
    assert src.config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}


def test_gguf_absent_keys_are_left_out(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "m.gguf", ctx=None, theta=None, rope_dims=None,
                      scaling={"type": "none"})
    src = read_source(str(path))
    # llama.cpp's own default base when the file names none
    assert src.config == {"model_type": "llama", "rope_theta": 10000.0, "head_dim": 128, "num_attention_heads": 32,
                          "hidden_size": 4096}
    assert src.gguf is not None and (src.gguf.context_length, src.gguf.rope_freq_base) == (None, None)


def test_gguf_gpt_oss_model_type(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "oss.gguf", "gpt-oss", theta=150000.0, embd=2880, heads=64, key_length=64,
                      rope_dims=64)
    src = read_source(str(path))
    assert src.gguf is not None and src.gguf.architecture == "gpt-oss"
    assert src.config["model_type"] == "gpt_oss" and src.config["head_dim"] == 64
    assert src.gguf.keys["gpt-oss.rope.freq_base"] == 150000.0


def test_folder_with_only_a_gguf(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "model-Q4_K_M.gguf")
    src = read_source(str(tmp_path))
    assert (src.kind, src.path) == ("gguf", str(path))
    assert src.config["model_type"] == "llama"


def test_gguf_is_found_by_its_magic_bytes_not_its_name(gguf: Any, tmp_path: Path) -> None:
    path = write_gguf(gguf, tmp_path / "weights.bin")
    assert read_source(str(path)).kind == "gguf"


def test_truncated_gguf(gguf: Any, tmp_path: Path) -> None:
    data = write_gguf(gguf, tmp_path / "full.gguf", rope_freqs=64).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert error_of(str(cut)).startswith(f"{cut}: not a readable GGUF file (")


def test_truncated_inside_the_header(gguf: Any, tmp_path: Path) -> None:
    data = write_gguf(gguf, tmp_path / "full.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:40])
    assert error_of(str(cut)).startswith(f"{cut}: not a readable GGUF file (")


def test_not_a_gguf_named_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_text(json.dumps(QWEN))
    assert error_of(str(path)) == f"{path}: not a readable GGUF file (it does not start with the GGUF magic bytes)"


# ---------------------------------------------------------------------------------------------------------- Hub

TINY: dict[str, Any] = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                        "max_position_embeddings": 4096, "rope_theta": 10000.0}


_PROBE = """
import json, sys
from posenc_cli.errors import PosencError
from posenc_cli.models.sources import read_source
source, revision = sys.argv[1], sys.argv[2] or None
try:
    src = read_source(source, revision=revision)
except PosencError as exc:
    out = {"error": str(exc)}
else:
    out = {"config": src.config, "label": src.label, "kind": src.kind, "path": src.path}
print(json.dumps(out))
"""


def hub_read(source: str, *, endpoint: str, cache: Path, offline: bool, revision: str | None = None,
             cwd: Path | None = None, prelude: str = "") -> dict[str, Any]:
    """read_source in a fresh interpreter whose huggingface_hub sees only ``endpoint`` and the cache in ``cache``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "TRANSFORMERS_"))}
    env.update(
        HF_ENDPOINT=endpoint, HF_HOME=str(cache / "home"), HF_HUB_CACHE=str(cache / "hub"),
        HF_HUB_OFFLINE="1" if offline else "0", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    proc = subprocess.run([sys.executable, "-c", prelude + _PROBE, source, revision or ""], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd or cache)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, lines
    out: dict[str, Any] = json.loads(lines[0])
    if "error" in out:
        assert "\n" not in out["error"]
    return out


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A cache holding org/tiny-model's config.json, downloaded online from a fake Hub that is stopped afterwards.

    Returns (the folder holding ``hub/`` and ``home/``, the dead endpoint's URL).
    """
    pytest.importorskip("huggingface_hub")
    cache = tmp_path_factory.mktemp("hf")
    hub = FakeHub({"org/tiny-model": HubRepo({"config.json": json.dumps(TINY).encode()})})
    with serve(hub) as endpoint:
        out = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=False)
    assert out["config"] == TINY and out["kind"] == "hub"
    asked = [f"{r.method} {r.path}" for r in hub.requests]
    assert "HEAD /org/tiny-model/resolve/main/config.json" in asked
    assert "GET /org/tiny-model/resolve/main/config.json" in asked
    return cache, endpoint


def test_hub_cache_layout_is_huggingface_hubs(hub_cache: tuple[Path, str]) -> None:
    cache, _ = hub_cache
    repo = cache / "hub" / "models--org--tiny-model"
    snapshot = repo / "snapshots" / SHA / "config.json"
    assert json.loads(snapshot.read_text()) == TINY
    assert (repo / "refs" / "main").read_text() == SHA
    body = json.dumps(TINY).encode()
    assert (repo / "blobs" / hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()).read_bytes() == body


def test_hub_offline_reads_the_cache(hub_cache: tuple[Path, str]) -> None:
    cache, endpoint = hub_cache
    out = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=True)
    snapshot = cache / "hub" / "models--org--tiny-model" / "snapshots" / SHA / "config.json"
    assert out == {"config": TINY, "label": "Hub org/tiny-model@main", "kind": "hub", "path": str(snapshot)}


def test_hub_offline_revision_pinned_by_commit(hub_cache: tuple[Path, str]) -> None:
    cache, endpoint = hub_cache
    out = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=True, revision=SHA)
    assert out["config"] == TINY and out["kind"] == "hub" and out["label"] == f"Hub org/tiny-model@{SHA}"


def test_hub_offline_uncached_id(hub_cache: tuple[Path, str]) -> None:
    cache, endpoint = hub_cache
    out = hub_read("org/other-model", endpoint=endpoint, cache=cache, offline=True)
    assert out["error"] == ("Hub model 'org/other-model' is not in the local cache and HF_HUB_OFFLINE is set (or the "
                            "Hub cannot be reached): download it once online, or pass a config.json path")


def test_hub_offline_uncached_revision(hub_cache: tuple[Path, str]) -> None:
    cache, endpoint = hub_cache
    out = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=True, revision="v2")
    assert "'org/tiny-model' at revision 'v2' is not in the local cache and HF_HUB_OFFLINE is set" in out["error"]


@pytest.fixture(scope="module")
def live_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A running fake Hub with repos that fail in each way the Hub can, and an empty cache."""
    pytest.importorskip("huggingface_hub")
    config = json.dumps(TINY).encode()
    hub = FakeHub({
        "org/tiny-model": HubRepo({"config.json": config}),
        "org/gated-model": HubRepo({"config.json": config}, gated=True),
        "org/gguf-only": HubRepo({"model.gguf": b"GGUF"}),
        "org/not-a-hub": HubRepo({"config.json": config}, hub_headers=False),
    })
    with serve(hub) as endpoint:
        yield tmp_path_factory.mktemp("hf-live"), endpoint


@pytest.mark.parametrize(
    ("repo", "revision", "expected"),
    [
        ("org/missing", None, "Hub model 'org/missing' not found on the Hub, and no such local file or folder"),
        ("org/tiny-model", "v9", "Hub model 'org/tiny-model' has no revision 'v9'"),
        ("org/gated-model", None,
         "Hub model 'org/gated-model' is gated: accept its licence on the Hub and set HF_TOKEN"),
        ("org/gguf-only", None, "Hub model 'org/gguf-only' has no config.json: pass a config.json path"),
        ("org/not-a-hub", None, "cannot fetch config.json of Hub model 'org/not-a-hub': the endpoint did not answer"),
    ],
    ids=["repo", "revision", "gated", "entry", "not-a-hub"],
)
def test_hub_errors(live_hub: tuple[Path, str], repo: str, revision: str | None, expected: str) -> None:
    cache, endpoint = live_hub
    out = hub_read(repo, endpoint=endpoint, cache=cache, offline=False, revision=revision)
    assert out["error"].startswith(expected), out["error"]


def test_hub_online_revision_by_commit(live_hub: tuple[Path, str]) -> None:
    cache, endpoint = live_hub
    out = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=False, revision=SHA)
    assert out["config"] == TINY
    assert out["path"] == str(cache / "hub" / "models--org--tiny-model" / "snapshots" / SHA / "config.json")


def test_a_dead_endpoint_is_reported_at_once_and_the_cache_still_read(hub_cache: tuple[Path, str]) -> None:
    """Online mode with nothing answering (the fake Hub is stopped): an uncached id (a mistyped folder name, say) is
    one line naming both readings at once, without huggingface_hub's retries; a cached id is read from the cache."""
    cache, endpoint = hub_cache
    started = time.monotonic()
    out = hub_read("tiny-modle", endpoint=endpoint, cache=cache, offline=False)
    assert time.monotonic() - started < 10  # an interpreter start and a refused connection, not retries
    assert out["error"].startswith("'tiny-modle' is no local file or folder, and Hub model 'tiny-modle' is not in "
                                   "the local cache and the Hub cannot be reached (127.0.0.1: "), out["error"]
    assert out["error"].endswith("check the name and the connection, or pass a config.json path")
    cached = hub_read("org/tiny-model", endpoint=endpoint, cache=cache, offline=False)
    assert cached["config"] == TINY and cached["kind"] == "hub"


def test_a_silent_endpoint_counts_as_unreachable_after_the_timeout(hub_cache: tuple[Path, str]) -> None:
    """A connection that never completes (name resolution hanging, packets dropped) ends at REACH_TIMEOUT."""
    cache, endpoint = hub_cache
    hang = ("import socket, time\n"
            "def _hang(*args, **kwargs):\n    time.sleep(30)\n"
            "socket.create_connection = _hang\n")
    started = time.monotonic()
    out = hub_read("org/other-model", endpoint=endpoint, cache=cache, offline=False, prelude=hang)
    assert time.monotonic() - started < 25  # the probe's 1.5 s, not the 30 s hang
    assert "cannot be reached (no connection to 127.0.0.1 within 1.5 s)" in out["error"], out["error"]


def test_hub_without_huggingface_hub(tmp_path: Path) -> None:
    out = hub_read("org/tiny-model", endpoint="http://127.0.0.1:9", cache=tmp_path, offline=True,
                   prelude="import sys; sys.modules['huggingface_hub'] = None\n")
    assert out["error"] == ("'org/tiny-model' looks like a Hub id, but reading a Hub id needs huggingface_hub: "
                            "pip install huggingface_hub")


# ------------------------------------------------------------------------------------------------- import cost


def test_importing_sources_loads_neither_huggingface_hub_nor_gguf_nor_numpy() -> None:
    heavy = ("huggingface_hub", "gguf", "numpy", "httpx2", "httpx")
    code = ("import json, sys\nimport posenc_cli.models.sources\n"
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# ---------------------------------------------------------------------- GGUFs made by llama.cpp's own converter


def test_a_converted_llama31_gguf_reads_as_its_config() -> None:
    """docs/examples/llama-3.1-twin.gguf was written by convert_hf_to_gguf.py (docs/examples/convert_twins.py) from
    a tiny twin of Llama 3.1 8B Instruct: its rope_freqs tensor reads back as the config's llama3 parameters."""
    src = read_source(str(ROOT / "docs" / "examples" / "llama-3.1-twin.gguf"))
    corpus = json.loads((ROOT / "tests" / "corpus" / "llama-3.1-8b-instruct.json").read_text())
    assert src.gguf is not None and src.gguf.rope_freqs is not None and len(src.gguf.rope_freqs) == 64
    assert src.config["rope_scaling"] == corpus["rope_scaling"]
    assert (src.config["rope_theta"], src.config["max_position_embeddings"]) == (
        corpus["rope_theta"], corpus["max_position_embeddings"])


def test_a_converted_deepseek_gguf_reads_with_llama_cpps_mscale_rule() -> None:
    src = read_source(str(ROOT / "docs" / "examples" / "deepseek-v2-lite-twin.gguf"))
    assert src.gguf is not None and src.gguf.architecture == "deepseek2"
    rope = src.config["rope_scaling"]
    # the converter stores 0.1 x mscale_all_dim (0.707); llama.cpp takes mscale = mscale_all_dim
    assert (rope["rope_type"], rope["factor"], rope["mscale_all_dim"], rope["mscale"]) == ("yarn", 40.0, 0.707, 0.707)
    assert src.config["model_type"] == "deepseek_v3" and src.config["qk_rope_head_dim"] == 64
