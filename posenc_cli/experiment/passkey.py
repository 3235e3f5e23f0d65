"""``posenc experiment passkey``: a tiny Llama trained on the CPU to retrieve a passkey, in the eval template's format.

The model is exactly the function transformers' ``LlamaForCausalLM`` computes (RMSNorm, q/k/v/o without bias,
RoPE in the rotate-half layout (``rotate_half``) over the whole head, causal softmax attention scaled by
``1/sqrt(head_dim)``, SwiGLU MLP, final RMSNorm, untied head), with parameters under transformers' names, so the
state dict is the checkpoint. RoPE's inverse frequencies come from :func:`posenc_cli.rope.frequencies.compute` through
:func:`posenc_cli.experiment.model.rotary_for`, the same code ``posenc experiment lm`` uses.

Training sequences are ``build_prompt(template, length=L, depth=d, seed=s, count=bytevocab.count)`` (the template
``rules/templates/passkey.yaml``, the same function evaluation uses) tokenized with
:mod:`posenc_cli.evaluation.bytevocab`,
then the key's digits and ``</s>``. All sequences of one batch share one random prompt length (bucketing: no
padding); depth and seed are random per sequence. The loss is the mean next-token cross-entropy over the prompt
plus the mean cross-entropy over the answer (the five digits and ``</s>``), two terms so the answer is not diluted
by the filler.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch  # noqa: TID253 - this package is imported only by `posenc experiment`
import torch.nn.functional as F  # noqa: TID253
from torch import Tensor, nn  # noqa: TID253

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.templates import Template, build_prompt, load_template
from posenc_cli.experiment.model import apply_rope_half, rope_cos_sin, rotary_for
from posenc_cli.experiment.settings import MAX_SEED, MAX_STEPS
from posenc_cli.files import atomic_write_text, dumps_config

#: Prompt lengths (tokens, BOS included) evaluated after training; the model is trained up to CONTEXT.
EVAL_LENGTHS = (64, 128, 192, 256, 384, 512)
EVAL_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
CONTEXT = 256
ANSWER_EXTRA = 1  # </s> after the key's digits


@dataclass(frozen=True)
class LlamaShape:
    vocab_size: int = bytevocab.VOCAB_SIZE
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = CONTEXT
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class PasskeySettings:
    steps: int = 2000
    batch: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.05
    warmup: int = 100
    weight_decay: float = 0.01
    min_len: int = 48
    max_len: int = CONTEXT - 5 - ANSWER_EXTRA  # prompt + digits + </s> = CONTEXT tokens
    seed: int = 0
    quick: bool = False
    threads: int = 1
    eval_trials: int = 4  # seeds per (length, depth)
    eval_lengths: tuple[int, ...] = EVAL_LENGTHS
    shape: LlamaShape = field(default_factory=LlamaShape)


def settings_for(*, steps: int | None, seed: int, quick: bool) -> PasskeySettings:
    """The default run, or ``--quick`` (a few dozen steps on short prompts, seconds); checks the values."""
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        raise PosencError(f"--steps {steps}: allowed 1 to {MAX_STEPS}")
    if not 0 <= seed <= MAX_SEED:
        raise PosencError(f"--seed {seed}: allowed 0 to {MAX_SEED}")
    base = PasskeySettings(seed=seed, quick=quick)
    if quick:
        base = replace(base, steps=30, batch=8, warmup=5, max_len=96, eval_trials=1, eval_lengths=(64, 128, 256))
    return replace(base, steps=steps) if steps is not None else base


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x: Tensor) -> Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        out: Tensor = self.weight * (x * torch.rsqrt(var + self.variance_epsilon))
        return out


class Attention(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.s = s
        d = s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * d, s.hidden_size, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, n, _ = x.shape
        s, d = self.s, self.s.head_dim
        q = self.q_proj(x).view(b, n, s.num_attention_heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, n, s.num_key_value_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, n, s.num_key_value_heads, d).transpose(1, 2)
        q, k = apply_rope_half(q, cos, sin), apply_rope_half(k, cos, sin)
        groups = s.num_attention_heads // s.num_key_value_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d))
        out: Tensor = self.o_proj(y.transpose(1, 2).reshape(b, n, s.num_attention_heads * d))
        return out


class MLP(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = MLP(s)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        out: Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class Backbone(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s) for _ in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)


class TinyLlama(nn.Module):
    """``LlamaForCausalLM`` in plain torch; ``state_dict()`` keys are transformers' names."""

    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.shape = s
        self.model = Backbone(s)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``(batch, seq, vocab)`` for token ids ``(batch, seq)`` at positions ``0..seq-1``."""
        n = tokens.shape[1]
        s = self.shape
        rot = rotary_for(None, s.max_position_embeddings, n, s.head_dim, s.rope_theta)
        cos, sin = rope_cos_sin(rot, n, tokens.device)
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        logits: Tensor = self.lm_head(self.model.norm(x))
        return logits


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class Example:
    ids: list[int]  # prompt tokens (BOS first) + key digits + </s>
    prompt_tokens: int
    length: int  # the length asked of build_prompt
    key: str


def make_example(template: Template, length: int, depth: float, seed: int) -> Example:
    prompt = build_prompt(template, length=length, depth=depth, seed=seed, count=bytevocab.count)
    ids = bytevocab.encode(prompt.text) + bytevocab.encode(prompt.key, bos=False) + [bytevocab.EOS]
    return Example(ids=ids, prompt_tokens=len(ids) - len(prompt.key) - ANSWER_EXTRA, length=length, key=prompt.key)


def batches(template: Template, settings: PasskeySettings) -> Iterator[list[Example]]:
    """The training data, from ``random.Random(seed)``: one prompt length per batch, depth and seed per sequence."""
    rng = random.Random(settings.seed)
    while True:
        length = rng.randint(settings.min_len, settings.max_len)
        yield [make_example(template, length, rng.random(), rng.randrange(2**31)) for _ in range(settings.batch)]


def batch_loss(model: TinyLlama, examples: list[Example]) -> tuple[Tensor, float, float]:
    """Prompt cross-entropy + answer cross-entropy (scalar tensor), and the two terms as floats."""
    ids = torch.tensor([e.ids for e in examples], dtype=torch.long)
    logits = model(ids[:, :-1])
    targets = ids[:, 1:]
    p = examples[0].prompt_tokens - 1  # targets[:, :p] are prompt tokens, targets[:, p:] the answer
    vocab = logits.shape[-1]
    lm = F.cross_entropy(logits[:, :p].reshape(-1, vocab), targets[:, :p].reshape(-1))
    answer = F.cross_entropy(logits[:, p:].reshape(-1, vocab), targets[:, p:].reshape(-1))
    return lm + answer, lm.item(), answer.item()


def lr_at(step: int, settings: PasskeySettings) -> float:
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    span = max(settings.steps - settings.warmup, 1)
    progress = min((step - settings.warmup) / span, 1.0)
    floor = settings.min_lr_ratio
    return settings.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


@contextmanager
def deterministic_torch(threads: int, seed: int) -> Iterator[None]:
    """One thread count, deterministic algorithms, seeded; the previous global state is restored after."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


Progress = Callable[[int, int, float, float], None]  # step, steps, prompt loss, answer loss


def train(settings: PasskeySettings, progress: Progress | None = None) -> tuple[TinyLlama, dict[str, Any]]:
    """Train the model; returns it (eval mode) and a summary (losses, wall time, pass rates per length)."""
    template = load_template("passkey")
    start = time.perf_counter()
    with deterministic_torch(settings.threads, settings.seed):
        model = TinyLlama(settings.shape)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        keep = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                                 {"params": keep, "weight_decay": 0.0}], lr=settings.lr, betas=(0.9, 0.95))
        history: list[tuple[float, float]] = []
        data = batches(template, settings)
        model.train()
        for step in range(settings.steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, settings)
            loss, lm, answer = batch_loss(model, next(data))
            opt.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            history.append((lm, answer))
            if progress is not None:
                progress(step + 1, settings.steps, lm, answer)
        train_seconds = time.perf_counter() - start
        model.eval()
        rates = evaluate(model, template, settings.eval_lengths, trials=settings.eval_trials)
    tail = history[-min(50, len(history)):]
    summary = {
        "steps": settings.steps,
        "parameters": parameter_count(model),
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "loss": {
            "first": {"prompt": round(history[0][0], 4), "answer": round(history[0][1], 4)},
            "last": {"prompt": round(history[-1][0], 4), "answer": round(history[-1][1], 4)},
            "last_50_mean": {"prompt": round(sum(h[0] for h in tail) / len(tail), 4),
                             "answer": round(sum(h[1] for h in tail) / len(tail), 4)},
        },
        "pass_rate": rates,
    }
    return model, summary


@torch.no_grad()
def greedy(model: TinyLlama, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy continuations (at most ``max_tokens``, stopping after ``</s>``) of equal-length prompts."""
    ids = torch.tensor(prompts, dtype=torch.long)
    out: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(max_tokens):
        nxt = model(ids)[:, -1].argmax(-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                out[i].append(t)
                done[i] = t == bytevocab.EOS
        if all(done):
            break
        ids = torch.cat([ids, nxt[:, None]], dim=1)
    return out


def evaluate(model: TinyLlama, template: Template, lengths: tuple[int, ...], *, trials: int,
             depths: tuple[float, ...] = EVAL_DEPTHS) -> dict[str, float]:
    """Pass rate per prompt length: ``trials`` seeds x ``depths``, greedy, scored by ``template.score``."""
    rates: dict[str, float] = {}
    for length in lengths:
        prompts = [build_prompt(template, length=length, depth=d, seed=1_000_000 + 97 * t + length,
                                count=bytevocab.count) for d in depths for t in range(trials)]
        replies = greedy(model, [bytevocab.encode(p.text) for p in prompts], template.max_tokens)
        hits = sum(template.score(p.key, bytevocab.decode(r)) for p, r in zip(prompts, replies, strict=True))
        rates[str(length)] = round(hits / len(prompts), 4)
    return rates


def settings_dict(settings: PasskeySettings) -> dict[str, Any]:
    d = asdict(settings)
    d["eval_lengths"] = list(settings.eval_lengths)
    d["shape"]["head_dim"] = settings.shape.head_dim
    return d


def stderr_progress(every: int = 50) -> Progress:
    def report(step: int, steps: int, lm: float, answer: float) -> None:
        if step == 1 or step % every == 0 or step == steps:
            sys.stderr.write(f"step {step}/{steps}  prompt loss {lm:.3f}  answer loss {answer:.3f}\n")
            sys.stderr.flush()
    return report


def numpy_weights(model: TinyLlama) -> dict[str, Any]:
    """The float32 weights as numpy arrays under transformers' names."""
    return {name: t.detach().to(torch.float32).cpu().numpy().copy() for name, t in model.state_dict().items()}


def run(settings: PasskeySettings, out: str | os.PathLike[str], command: list[str],
        progress: Progress | None = None) -> dict[str, Any]:
    """Train, export ``out/passkey.gguf`` and ``out/hf/``, write ``out/train.json``; returns what train.json holds."""
    import platform
    from pathlib import Path

    from posenc_cli.experiment.export import write_gguf, write_hf_folder

    folder = Path(out)
    model, summary = train(settings, progress)
    weights = numpy_weights(model)
    gguf_path = write_gguf(folder / "passkey.gguf", weights, settings.shape)
    hf_files = write_hf_folder(folder / "hf", weights, settings.shape)
    result = {
        "command": command,
        "seed": settings.seed,
        "settings": settings_dict(settings),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "torch_threads":
                    settings.threads},
        **summary,
        "eval": {"lengths": list(settings.eval_lengths), "depths": list(EVAL_DEPTHS), "trials": settings.eval_trials,
                 "decode": "greedy in torch, at most max_tokens (6) tokens, stop at </s>, template.score"},
        "files": [str(gguf_path.relative_to(folder)), *(str(p.relative_to(folder)) for p in hf_files)],
    }
    atomic_write_text(folder / "train.json", dumps_config(result) + "\n")
    return result
