"""The tables of docs/memory.md: what each shipped model's caches cost each engine at 32k and 128k, with the
engine's defaults and with its quantized cache, from ``posenc_cli.memory.report.memory_report`` (the same core
``posenc memory`` prints). ``tests/docs/test_memory_page.py`` checks the page holds them; run it to rewrite them."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.frameworks.registry import memory_engines
from posenc_cli.memory.report import memory_report, shown_name
from posenc_cli.units import format_size

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
MARKS = ("<!-- memory-tables -->", "<!-- /memory-tables -->")

#: the shipped models the issue names: a dense model, a MoE, sliding windows, MLA, two hybrids
MODELS = {
    "Llama 3.1 8B": "llama-3.1-8b-instruct",
    "Qwen3-235B-A22B (MoE)": "qwen3-235b-a22b",
    "Gemma 3 27B (5 sliding layers of 1024 per global)": "gemma-3-27b-it",
    "gpt-oss-120b (sliding 128 on every other layer)": "gpt-oss-120b",
    "DeepSeek-V3 (MLA)": "deepseek-v3",
    "Qwen3.5-35B-A3B (3 gated-delta-net layers per full)": "qwen3.5-35b-a3b",
    "Nemotron 3 Nano 30B-A3B (Mamba2 hybrid)": "nemotron-3-nano-30b-a3b-bf16",
}
CONTEXTS = (32768, 131072)

#: each engine's 8-bit cache, under its own names (transformers' default cache has none)
QUANTIZED: dict[str, list[str]] = {
    "vllm": ["--kv-cache-dtype", "fp8"],
    "sglang": ["--kv-cache-dtype", "fp8_e4m3"],
    "llama.cpp": ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn", "on"],
    "ollama": ["OLLAMA_KV_CACHE_TYPE=q8_0", "OLLAMA_FLASH_ATTENTION=1"],
    "lmstudio": ["llamaKCacheQuantizationType=q8_0", "llamaVCacheQuantizationType=q8_0", "flashAttention=on"],
    "mlx-lm": ["--kv-bits", "8"],
    "lmdeploy": ["--quant-policy", "8"],
    "exllamav3": ["--cache_quant", "8"],
}


def _cell(config: str, engine: str, ctx: int, extra: list[str]) -> str:
    result, _ = memory_report(config, ctx, [engine], extra=extra)
    row = result["engines"][0]
    if not row["runs"]:
        return "cannot run"
    return format_size(row["cache_bytes"])


def tables() -> str:
    """The markdown the page holds between :data:`MARKS`."""
    out = []
    for title, name in MODELS.items():
        config = str(CORPUS / f"{name}.json")
        out += [f"### {title}", "", f"`tests/corpus/{name}.json`; caches only (weights, activations and compute "
                "buffers apart), each engine's defaults, then its 8-bit cache.", "",
                "| engine | 32k | 128k | 32k, 8-bit cache | 128k, 8-bit cache | 8-bit cache |",
                "|---|---:|---:|---:|---:|---|"]
        for engine in memory_engines():
            shown = shown_name(engine)
            quant = QUANTIZED.get(shown)
            plain = [_cell(config, engine, ctx, []) for ctx in CONTEXTS]
            if quant is None:
                quantized, setting = ["-", "-"], "none"
            else:
                quantized = []
                for ctx in CONTEXTS:
                    try:
                        quantized.append(_cell(config, engine, ctx, quant))
                    except ValueError:  # a PosencError: the engine refuses the setting for this model
                        quantized.append("refused")
                setting = "`" + " ".join(quant) + "`"
            out.append(f"| {shown} | " + " | ".join([*plain, *quantized, setting]) + " |")
        out.append("")
    return "\n".join(out)


PUBLISHED_MARKS = ("<!-- memory-published -->", "<!-- /memory-published -->")
MIB = 1024**2


def _row(config: str, engine: str, ctx: int, extra: list[str]) -> dict[str, object]:
    result, _ = memory_report(str(CORPUS / f"{config}.json"), ctx, [engine], extra=extra)
    row: dict[str, object] = result["engines"][0]
    return row


def _mib(n: object) -> str:
    """MiB as llama.cpp's log prints them; GiB (as format_size) from 2 GiB up."""
    value = int(str(n))
    return format_size(value) if value >= 2 * 1024 * MIB else f"{value / MIB:,.2f} MiB"


def _groups(row: dict[str, object], field: str) -> str:
    groups = row["groups"]
    assert isinstance(groups, list)
    return " + ".join(f"{_mib(g[field])} ({g['cells']:,} cells, {g['layers']} {g['kind']} layers)" for g in groups
                      if g[field])


def published() -> str:
    """Each published figure beside posenc's at the same model and settings (what is compared, and why a figure
    differs where it does)."""
    llama_vllm = _row("llama-3.1-8b-instruct", "vllm", 20000, ["--block-size", "16"])
    blocks = 1952 * 16 * 32 * 8 * 128 * 2 * 2  # the log's 1952 blocks of 16 tokens, at Llama 3.1 8B's 128 KiB a token
    rows = [
        ("Llama 3.1 8B", "vLLM (V0, 2024): `--max-model-len 20000`, block 16",
         "`kv_cache_size=3.81GiB` / `# GPU blocks: 1952` / `Maximum concurrency for 20000 tokens per request: 1.56x`",
         "vllm-project/vllm#10517",
         f"one request of 20,000: {_mib(llama_vllm['cache_bytes'])}; 1952 blocks serve "
         f"{blocks / int(str(llama_vllm['cache_bytes'])):.2f}x"),
        ("Llama 3.1 8B", "llama.cpp `-c 4096`, one sequence",
         "\"With a context size of 4096, the KV takes around 512MB\" (a maintainer, not a log line)",
         "ggml-org/llama.cpp#10136",
         _mib(_row("llama-3.1-8b-instruct", "llama.cpp", 4096, ["--parallel", "1"])["cache_bytes"])),
        ("Qwen3-235B-A22B", "SGLang, `--tp-size 4` (its pool held 367,404 tokens)",
         "`KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB` (SGLang's GB are GiB)",
         "vllm-project/vllm#21348",
         "K " + _groups(_row("qwen3-235b-a22b", "sglang", 367404, ["--tp-size", "4"]), "k_bytes")),
        ("gpt-oss-120b", "llama.cpp (2025, via AI Playground), `n_ctx 2000`, one sequence, flash attention off",
         "`size = 70.88 MiB (2016 cells, 18 layers, 1/1 seqs)` and `size = 22.50 MiB (640 cells, 18 layers, 1/1 "
         "seqs)`",
         "intel/AI-Playground#325",
         _groups(_row("gpt-oss-120b", "llama.cpp", 2000, ["--parallel", "1", "--flash-attn", "off"]), "k_bytes")
         + " of K, as much V: the same 36 KiB a cell; llama.cpp 0.3.36 pads to 256 cells where that build did not"),
        ("DeepSeek-R1", "ik_llama.cpp (a fork; MLA as mainline), `n_ctx 32768`, one slot, q8_0",
         "`KV self size = 1166.62 MiB, c^KV (q8_0): 1166.62 MiB, kv^T: not used`",
         "ikawrakow/ik_llama.cpp#259",
         _mib(_row("deepseek-r1", "llama.cpp", 32768, ["--parallel", "1", "--cache-type-k", "q8_0",
                                                       "--cache-type-v", "q8_0"])["cache_bytes"])),
        ("Gemma 3 27B", "an estimator (unsloth Studio) at 131,072",
         "`Gemma-3 27B | Sliding Window | 81.38 GB | 10.41 GB | +682% over` (estimated, then the sliding-aware figure)",
         "unslothai/unsloth#4757",
         "transformers " + _mib(_row("gemma-3-27b-it", "transformers", 131072, [])["cache_bytes"])),
        ("Gemma 4 26B-A4B", "Ollama's estimate at 128k against a hand computation",
         "`| 128k | 56.37 GB | 3.00 GB | 18.8x |`", "ollama/ollama#16958 (a pull request)",
         "Ollama " + _mib(_row("gemma-4-26b-a4b", "ollama", 131072, [])["cache_bytes"]) + ", llama.cpp "
         + _mib(_row("gemma-4-26b-a4b", "llama.cpp", 131072, [])["cache_bytes"]) + " (4 slots)"),
    ]
    out = ["| model | engine and settings | published | where | posenc at the same settings |",
           "|---|---|---|---|---|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return "\n".join(out) + "\n"
