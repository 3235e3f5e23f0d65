"""What llama.cpp allocates for its caches, read from its own log (llama-cpp-python's low-level API, in process).

A plain helper module for the tests (``from llamacpp_memory import ...``): :class:`LlamaModel` loads a GGUF once
(CPU, no GPU layers) and :meth:`LlamaModel.caches` creates a context with the context parameters of
:class:`posenc_cli.engines.caches.llamacpp.Params`, captures what ``llama_kv_cache`` and ``llama_memory_recurrent``
print (``size = X MiB (N cells, L layers, S/U seqs), K (type): X MiB, V (type): X MiB`` and the R/S/P line) through
``llama_log_set``, and frees the context. A context llama.cpp refuses gives its error line instead.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.engines.caches.llamacpp import Params, allocate
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import CacheLayout

_KV = re.compile(r"llama_kv_cache: size = +(?P<size>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) layers, "
                 r"+(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<tk>\w+)\): +(?P<k>[\d.]+) MiB, "
                 r"V \((?P<tv>\w+)\): +(?P<v>[\d.]+) MiB")
_RS = re.compile(r"llama_memory_recurrent: size = +(?P<size>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) "
                 r"layers, +(?P<seqs>\d+) seqs +(?P<rs>\d+) rs_seq\), R \((?P<tk>\w+)\): +(?P<k>[\d.]+) MiB, "
                 r"S \((?P<tv>\w+)\): +(?P<v>[\d.]+) MiB, P \(\w+\): +(?P<p>[\d.]+) MiB")
FLASH = {"auto": -1, "off": 0, "on": 1}
MIB = 1 << 20
#: a printed figure is ``%7.2f`` of ``(float) bytes / 2^20``: within 0.005 MiB, plus float32's rounding
TOL = 0.00501
#: enum ggml_type (ggml/include/ggml.h of llama-cpp-python 0.3.36's llama.cpp; its Python binding lacks BF16)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


@dataclass(frozen=True)
class Printed:
    """One printed cache line: the memory ("kv" or "recurrent"), its figures as printed (MiB to 2 decimals)."""

    memory: str
    size: float
    cells: int
    layers: int
    seqs: int
    streams: int
    type_k: str
    k: float
    type_v: str
    v: float
    line: str


def parse(text: str) -> list[Printed]:
    """The cache lines of a llama.cpp log, in order."""
    out = []
    for line in text.splitlines():
        kv, rs = _KV.search(line), _RS.search(line)
        if kv:
            out.append(Printed("kv", float(kv["size"]), int(kv["cells"]), int(kv["layers"]), int(kv["seqs"]),
                               int(kv["streams"]), kv["tk"], float(kv["k"]), kv["tv"], float(kv["v"]), line))
        elif rs:
            out.append(Printed("recurrent", float(rs["size"]), int(rs["cells"]), int(rs["layers"]), int(rs["seqs"]),
                               1, rs["tk"], float(rs["k"]), rs["tv"], float(rs["v"]), line))
    return out


class LlamaModel:
    """A GGUF loaded once in llama.cpp, its log captured."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.log: list[str] = []

        @llama_cpp.llama_log_callback
        def callback(level: int, text: bytes, user: Any) -> None:
            self.log.append(text.decode("utf-8", "replace"))

        self._callback = callback  # kept alive as long as the model
        llama_cpp.llama_log_set(callback, None)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}:\n{''.join(self.log[-20:])}")

    def caches(self, p: Params) -> tuple[list[Printed], str]:
        """The cache lines llama.cpp prints creating a context with ``p`` (and its log); none when it refuses."""
        lc = self.llama_cpp
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_seq_max, cp.kv_unified = p.n_ctx, p.n_seq_max, p.kv_unified
        cp.n_batch, cp.n_ubatch, cp.swa_full = p.n_batch, p.n_ubatch, p.swa_full
        cp.type_k, cp.type_v = _ggml_type(p.type_k), _ggml_type(p.type_v)
        cp.flash_attn_type = FLASH[p.flash_attn]
        cp.n_rs_seq = p.n_rs_seq
        cp.n_threads = cp.n_threads_batch = 1
        self.log.clear()
        ctx = lc.llama_init_from_model(self.model, cp)
        text = "".join(self.log)
        if ctx:
            lc.llama_free(ctx)
        return parse(text), text

    def close(self) -> None:
        if self.model:
            self.llama_cpp.llama_model_free(self.model)
            self.model = None


def _ggml_type(name: str) -> int:
    return GGML_TYPES[name]


def compare(layout: CacheLayout, p: Params, printed: list[Printed], log: str) -> list[str]:
    """Where posenc's allocation differs from llama.cpp's printed lines (empty: equal within the rounding)."""
    try:
        lines, _, _ = allocate(layout, p)
    except (PosencError, Unsupported) as e:
        refused = not printed and "llama_init_from_model:" in log
        return [] if refused else [f"posenc refuses ({e}) what llama.cpp allocates: {[x.line for x in printed]}"]
    if len(lines) != len(printed):
        return [f"{len(lines)} caches, llama.cpp prints {len(printed)}: {[x.line for x in printed]}"]
    out = []
    for ours, theirs in zip(lines, printed, strict=True):
        exact = (ours.memory, ours.cells, ours.seqs, ours.streams) == (theirs.memory, theirs.cells, theirs.seqs,
                                                                     theirs.streams)
        layers = ours.layers == theirs.layers  # a recurrent memory prints the model's layer count
        sizes = [abs(b / MIB - printed_mib) <= TOL for b, printed_mib in
                 ((ours.bytes, theirs.size), (ours.k_bytes, theirs.k), (ours.v_bytes, theirs.v))]
        if not (exact and layers and all(sizes)):
            out.append(f"ours {ours} vs {theirs.line.strip()}")
    return out


# --- converter-made twins -----------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
_TWIN_DIR: list[Path] = []  # one folder per test session
_MADE: dict[str, tuple[Path, dict[str, Any]]] = {}


def _corpus(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "corpus" / f"{name}.json").read_text())
    return data


def _twins() -> dict[str, tuple[Any, tuple[str, ...]]]:
    """name -> (the twin's config, extra converter flags): tiny twins of corpus configs (converted_harness.tiny_twin)
    covering full attention, GQA, MoE, sliding windows (with V widths that differ), MLA and two hybrids."""
    from converted_harness import tiny_twin

    small_state = {"mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
                   "head_dim": 64, "hidden_size": 128}
    return {
        # full attention (Llama 3.1: 8 KV heads of 32 query heads in the real model; 2 query heads, 1 KV head here)
        "llama-3.1": (lambda: tiny_twin(_corpus("llama-3.1-8b-instruct")), ()),
        # GQA with 4 KV heads of 8, and a MoE (Qwen3 MoE)
        "qwen3-moe": (lambda: tiny_twin(_corpus("qwen3-235b-a22b"), num_attention_heads=8, num_key_value_heads=4,
                                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16), ()),
        # sliding windows: Gemma 3 (5 sliding of 6, window 512) and gpt-oss (every other layer, window 128)
        "gemma-3": (lambda: tiny_twin(_corpus("gemma-3-27b-it")), ()),
        "gpt-oss": (lambda: tiny_twin(_corpus("gpt-oss-20b"), num_local_experts=4, num_experts_per_tok=2), ()),
        # Gemma 4: sliding layers of 2 KV heads of 256, a full layer of 2 of 512 (keys serving as values): the V
        # widths differ, so without flash attention llama.cpp pads every V to the widest
        "gemma-4": (lambda: tiny_twin(_corpus("gemma-4-26b-a4b"), num_hidden_layers=6, hidden_size=256,
                                      layer_types=["sliding_attention"] * 5 + ["full_attention"], sliding_window=512,
                                      num_key_value_heads=2, num_global_key_value_heads=2, num_experts=4,
                                      top_k_experts=2, moe_intermediate_size=16, vocab_size_per_layer_input=128), ()),
        # MLA (DeepSeek-V3's rope dims: one latent of kv_lora_rank + 64, no V)
        "deepseek-v3": (lambda: tiny_twin(_corpus("deepseek-v3")), ()),
        # hybrids: Qwen3.5 (gated delta net, full attention every 4th layer), Nemotron 3 Nano (Mamba2, MoE, attention)
        "qwen3.5": (lambda: {**tiny_twin(_corpus("qwen3.5-9b")), "model_type": "qwen3_5_text", "num_hidden_layers": 4,
                             "layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_num_key_heads": 2,
                             "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
                             "mtp_num_hidden_layers": 0}, ("--no-mtp",)),
        "nemotron-3-nano": (lambda: {**tiny_twin(_corpus("nemotron-3-nano-30b-a3b-bf16")), **small_state,
                                     "num_hidden_layers": 6, "hybrid_override_pattern": "ME*EM*",
                                     "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                     "moe_shared_expert_intermediate_size": 16, "num_nextn_predict_layers": 0}, ()),
    }


TWINS = ("llama-3.1", "qwen3-moe", "gemma-3", "gemma-4", "gpt-oss", "deepseek-v3", "qwen3.5", "nemotron-3-nano")


def twin_gguf(name: str, converter: Path) -> tuple[Path, dict[str, Any]]:
    """The twin ``name`` (one of :data:`TWINS`) saved by transformers and converted by llama.cpp's converter, once
    per session: its GGUF and the config.json transformers saved."""
    if name not in _MADE:
        from converted_harness import convert, save_twin

        if not _TWIN_DIR:
            _TWIN_DIR.append(Path(tempfile.mkdtemp(prefix="posenc-memory-twins-")))
        make, flags = _twins()[name]
        folder = save_twin(make(), _TWIN_DIR[0] / name)
        gguf = convert(converter, folder, _TWIN_DIR[0] / f"{name}.gguf", extra=flags)
        _MADE[name] = gguf, json.loads((folder / "config.json").read_text())
    return _MADE[name]
