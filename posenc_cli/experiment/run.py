"""Training and evaluation for ``posenc experiment``; returns one JSON-ready results dict."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch  # noqa: TID253 - this package is imported only by `posenc experiment`
import torch.nn.functional as F  # noqa: TID253
from torch import Tensor  # noqa: TID253

from posenc_cli import __version__
from posenc_cli.errors import PosencError
from posenc_cli.experiment import data as D
from posenc_cli.experiment.model import ModelConfig, Rotary, TinyLM, parameter_count, rotary_for
from posenc_cli.experiment.settings import DESCRIPTIONS, SCALING, TRAINED_AS, Settings

#: Most tokens in one evaluation forward pass (windows are batched up to this)...
EVAL_TOKENS_PER_BATCH = 16384
#: ...and most bytes for one layer's attention scores (batch x heads x length^2 float32), which binds past 1024.
EVAL_SCORE_BYTES = 256 << 20
LOSS_WINDOW = 10  # steps averaged for the first and last training loss


class Reporter(Protocol):
    """Progress sink (the CLI's rich progress bars; tests pass None)."""

    def start(self, label: str, total: int) -> None: ...

    def advance(self, loss: float) -> None: ...

    def done(self) -> None: ...


@contextlib.contextmanager
def reproducible(settings: Settings) -> Iterator[None]:
    """Seeded, deterministic torch with a fixed thread count; the previous global state is restored after."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    if settings.device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it for determinism
    torch.set_num_threads(settings.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(settings.seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise PosencError("--device cuda: torch sees no CUDA device here (this torch build or machine has none); "
                          "use --device cpu")


def _schedule(step: int, total: int) -> float:
    """Learning-rate multiplier: linear warm-up over 5% of the steps, then cosine decay to 10%."""
    warm = max(1, total // 20)
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train(kind: str, settings: Settings, vocab: int, batch: Callable[[torch.Generator], tuple[Tensor, Tensor]],
          reporter: Reporter | None) -> tuple[TinyLM, list[float], float]:
    """Train one model; every kind starts from the same seed and sees the same batches."""
    device = torch.device(settings.device)
    torch.manual_seed(settings.seed)
    cfg = ModelConfig(vocab, settings.d_model, settings.n_layers, settings.n_heads, kind, settings.train_len,
                      settings.theta)
    model = TinyLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _schedule(s, settings.steps))
    gen = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    if reporter is not None:
        reporter.start(f"{settings.task} {kind}", settings.steps)
    t0 = time.perf_counter()
    model.train()
    for _ in range(settings.steps):
        x, y = batch(gen)
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), ignore_index=D.IGNORE)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if reporter is not None:
            reporter.advance(losses[-1])
    seconds = time.perf_counter() - t0
    if reporter is not None:
        reporter.done()
    model.eval()
    return model, losses, seconds


def _rotary(method: str, settings: Settings, length: int) -> Rotary | None:
    if TRAINED_AS[method] != "rope":
        return None
    return rotary_for(SCALING.get(method), settings.train_len, length, settings.d_model // settings.n_heads,
                      settings.theta)


@torch.no_grad()
def _score(model: TinyLM, inputs: Tensor, targets: Tensor, rotary: Rotary | None,
           device: torch.device) -> tuple[float, int, int]:
    """Summed cross-entropy (nats), correct argmax predictions and scored positions, over batched windows."""
    length = inputs.shape[1]
    heads = model.cfg.n_heads
    per_batch = max(1, min(EVAL_TOKENS_PER_BATCH // length, EVAL_SCORE_BYTES // (4 * heads * length * length)))
    nats = 0.0
    correct = count = 0
    for i in range(0, inputs.shape[0], per_batch):
        x = inputs[i: i + per_batch].to(device)
        y = targets[i: i + per_batch].to(device)
        logits = model(x, rotary)
        flat, labels = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        keep = labels != D.IGNORE
        nats += float(F.cross_entropy(flat[keep].double(), labels[keep], reduction="sum"))
        correct += int((flat[keep].argmax(-1) == labels[keep]).sum())
        count += int(keep.sum())
    return nats, correct, count


def _summary(losses: list[float], seconds: float, model: TinyLM) -> dict[str, Any]:
    k = min(LOSS_WINDOW, len(losses))
    return {"parameters": parameter_count(model), "loss_first": sum(losses[:k]) / k,
            "loss_last": sum(losses[-k:]) / k, "loss_curve": _thin(losses), "seconds": round(seconds, 2)}


def _thin(losses: list[float], points: int = 50) -> list[float]:
    """Up to ``points`` evenly spaced training losses (for the JSON; the full curve is not needed)."""
    step = max(1, len(losses) // points)
    return [round(v, 5) for v in losses[::step]]


def run(settings: Settings, reporter: Reporter | None = None) -> dict[str, Any]:
    """Train every model ``settings`` needs, evaluate every method at every length, return the results."""
    check_device(settings.device)
    started = time.perf_counter()
    with reproducible(settings):
        if settings.task == "lm":
            out = _run_lm(settings, reporter)
        else:
            out = _run_copy(settings, reporter)
    out["timing"] = {"wall_seconds": round(time.perf_counter() - started, 2),
                     "train_seconds": {k: v.pop("seconds") for k, v in out["training"].items()}}
    return out


def _frame(settings: Settings) -> dict[str, Any]:
    notes = list(settings.notes)
    if any(m in SCALING for m in settings.methods):
        notes.append("rope+linear, rope+ntk and rope+yarn are the trained RoPE model with the scaling applied at "
                     "evaluation time (factor = eval length / train length, at least 1), no fine-tuning")
    return {
        "task": settings.task,
        "command": shlex.join(settings.command()),
        "seed": settings.seed,
        "settings": settings.as_dict(),
        "methods": {m: DESCRIPTIONS[m] for m in settings.methods},
        "notes": notes,
        "versions": {"posenc": __version__, "torch": torch.__version__, "python": platform.python_version()},
    }


def _evaluate(settings: Settings, models: dict[str, TinyLM],
              make: Callable[[int], tuple[Tensor, Tensor]], metric: Callable[[float, int, int], float]
              ) -> dict[str, dict[str, float | None]]:
    device = torch.device(settings.device)
    results: dict[str, dict[str, float | None]] = {m: {} for m in settings.methods}
    for length in settings.eval_lens:
        inputs, targets = make(length)
        for method in settings.methods:
            model = models[TRAINED_AS[method]]
            if method == "learned" and length > settings.train_len:
                results[method][str(length)] = None  # past the learned table: not applicable
                continue
            nats, correct, count = _score(model, inputs, targets, _rotary(method, settings, length), device)
            results[method][str(length)] = metric(nats, correct, count)
    return results


def _run_lm(settings: Settings, reporter: Reporter | None) -> dict[str, Any]:
    corpus = D.load_corpus(settings.corpus_bytes, settings.text)
    longest = max(settings.eval_lens)
    if len(corpus.train) < 4 * (settings.train_len + 1):
        raise PosencError(f"{corpus.source}: {len(corpus.train)} training bytes is too little for --train-len "
                          f"{settings.train_len}; use a longer --text")
    if len(corpus.held_out) < longest + 1:
        raise PosencError(f"{corpus.source}: the held-out part has {len(corpus.held_out)} bytes; --eval-lens up to "
                          f"{longest} needs at least {longest + 1}: use a longer --text or shorter --eval-lens")
    train_data = torch.frombuffer(bytearray(corpus.train), dtype=torch.uint8).long()
    held_data = torch.frombuffer(bytearray(corpus.held_out), dtype=torch.uint8).long()
    budget = max(settings.eval_bytes, longest)

    def batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
        return D.lm_batch(train_data, settings.train_len, settings.batch_size, gen)

    models: dict[str, TinyLM] = {}
    training: dict[str, Any] = {}
    for kind in settings.trained:
        model, losses, seconds = train(kind, settings, 256, batch, reporter)
        models[kind] = model
        training[kind] = _summary(losses, seconds, model)

    scored: dict[int, int] = {}

    def make(length: int) -> tuple[Tensor, Tensor]:
        x, y = D.lm_eval_windows(held_data, length, budget)
        scored[length] = y.numel()
        return x, y

    values = _evaluate(settings, models, make, lambda nats, _c, count: nats / count / math.log(2))
    eval_bytes = corpus.held_out[: budget + 1]
    out = _frame(settings)
    out.update({
        "metric": "bits_per_byte",
        "lower_is_better": True,
        "data": {"source": corpus.source, "files": corpus.files, "train_bytes": len(corpus.train),
                 "held_out_bytes": len(corpus.held_out), "scored_bytes": {str(k): v for k, v in scored.items()}},
        "baseline": {"name": "unigram", "description": "held-out bytes under the train split's byte frequencies",
                     "value": D.unigram_bits_per_byte(corpus.train, eval_bytes[1:])},
        "results": values,
        "training": training,
    })
    return out


def _run_copy(settings: Settings, reporter: Reporter | None) -> dict[str, Any]:
    symbols = settings.vocab
    vocab, _, _ = D.copy_vocab(symbols)

    def batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
        return D.copy_train_batch(settings.train_len, settings.batch_size, symbols, gen)

    models: dict[str, TinyLM] = {}
    training: dict[str, Any] = {}
    for kind in settings.trained:
        model, losses, seconds = train(kind, settings, vocab, batch, reporter)
        models[kind] = model
        training[kind] = _summary(losses, seconds, model)

    def make(length: int) -> tuple[Tensor, Tensor]:
        gen = torch.Generator().manual_seed(settings.seed + length)  # the same strings for every method
        return D.copy_eval_batch(length, settings.eval_sequences, symbols, gen)

    values = _evaluate(settings, models, make, lambda _n, correct, count: correct / count)
    out = _frame(settings)
    longest_n = max(settings.eval_lens) // 2 - 1
    out["notes"].append(
        f"copy: each training row packs examples [start, x_1..x_n, sep, x_1..x_n] with n drawn from 1 to "
        f"{settings.train_len // 2 - 1}; each evaluation sequence is one example filling the length "
        f"(n = length/2 - 1); accuracy is next-token argmax accuracy on the copied symbols (teacher forcing)")
    if longest_n > symbols:
        out["notes"].append(f"copy: strings longer than {symbols} symbols repeat symbols, so the copy is ambiguous "
                            "by content alone there")
    out.update({
        "metric": "copy_accuracy",
        "lower_is_better": False,
        "data": {"symbols": symbols, "distinct_symbols_per_string": True, "eval_sequences": settings.eval_sequences},
        "baseline": {"name": "chance", "description": "a uniform guess among the symbols", "value": 1 / symbols},
        "results": values,
        "training": training,
    })
    return out
