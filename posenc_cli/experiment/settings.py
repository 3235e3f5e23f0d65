"""Methods, presets and input checks for ``posenc experiment`` (stdlib only: runs before torch is loaded)."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.units import parse_length

TASKS = ("lm", "copy")

#: Every method, in the order tables and charts list them.
METHODS = ("nope", "sinusoidal", "learned", "rope", "rope+linear", "rope+ntk", "rope+yarn", "alibi")

#: The model each method evaluates: the three RoPE scalings reuse the trained RoPE model (no fine-tuning).
TRAINED_AS = {m: ("rope" if m.startswith("rope") else m) for m in METHODS}

#: ``rope+X`` -> the ``posenc scale`` method X applied at evaluation time.
SCALING = {"rope+linear": "linear", "rope+ntk": "ntk", "rope+yarn": "yarn"}

DESCRIPTIONS = {
    "nope": "no positional signal (causal mask only)",
    "sinusoidal": "sinusoidal absolute encoding added to the embeddings",
    "learned": "learned absolute table of train-len positions (cannot run longer)",
    "rope": "RoPE, theta 10000, as trained",
    "rope+linear": "the RoPE model with linear position interpolation, factor eval/train",
    "rope+ntk": "the RoPE model with static NTK-aware theta, factor eval/train",
    "rope+yarn": "the RoPE model with YaRN (ramp + attention factor), factor eval/train",
    "alibi": "ALiBi: -slope x distance added to the causal scores",
}

#: Longest evaluation length accepted (an ALiBi bias of 4 heads x 4096^2 float32 is 256 MiB).
MAX_LEN = 4096

#: Most training steps per model (lm, copy, passkey). Training is the one place where the defaults already take
#: minutes (passkey: 2000 steps, ~10 min), so the cap is 5x the longest default rather than a minute's work.
#: Measured on one core: lm --methods rope 0.2 s/step (all methods ~1 s/step), passkey 0.29 s/step, so
#: passkey --steps 10000 is ~50 min and lm --steps 10000 with every method ~3 h; a 1e6-step typo would be days.
MAX_STEPS = 10_000

#: Seeds: torch and Python's random take any non-negative int; 32 bits is what the results files are compared by.
MAX_SEED = 2**32 - 1

#: torch threads, fixed: the same seed gives the same numbers (reductions do not depend on the thread count), and
#: one thread does not stall when other processes share a small CPU (a busy-waiting thread team slows down tenfold).
THREADS = 1


@dataclass(frozen=True)
class Preset:
    train_len: int
    eval_mults: tuple[int, ...]
    steps: int
    batch_size: int
    lr: float
    d_model: int
    n_layers: int
    n_heads: int
    corpus_bytes: int = 0  # lm: how much of the corpus to read
    eval_bytes: int = 0  # lm: held-out bytes scored at every evaluation length
    eval_sequences: int = 0  # copy: sequences scored at every evaluation length
    vocab: int = 0  # copy: number of symbols


PRESETS: dict[tuple[str, bool], Preset] = {
    ("lm", False): Preset(train_len=128, eval_mults=(1, 2, 4, 8), steps=400, batch_size=32, lr=6e-3, d_model=128,
                          n_layers=2, n_heads=4, corpus_bytes=4 << 20, eval_bytes=32 << 10),
    ("lm", True): Preset(train_len=64, eval_mults=(1, 2, 4), steps=100, batch_size=16, lr=6e-3, d_model=64,
                         n_layers=2, n_heads=4, corpus_bytes=1 << 20, eval_bytes=8 << 10),
    ("copy", False): Preset(train_len=32, eval_mults=(1, 2, 4, 8), steps=1000, batch_size=32, lr=4e-3, d_model=128,
                            n_layers=2, n_heads=4, eval_sequences=64, vocab=128),
    ("copy", True): Preset(train_len=16, eval_mults=(1, 2, 4), steps=150, batch_size=16, lr=4e-3, d_model=64,
                           n_layers=2, n_heads=4, eval_sequences=16, vocab=32),
}


@dataclass(frozen=True)
class Settings:
    """One fully resolved run (everything that decides the numbers, plus where they go)."""

    task: str
    methods: tuple[str, ...]
    train_len: int
    eval_lens: tuple[int, ...]
    steps: int
    seed: int
    device: str
    quick: bool
    batch_size: int
    lr: float
    d_model: int
    n_layers: int
    n_heads: int
    corpus_bytes: int
    eval_bytes: int
    eval_sequences: int
    vocab: int
    text: str | None = None
    threads: int = THREADS
    theta: float = 10000.0
    notes: list[str] = field(default_factory=list, compare=False)

    @property
    def trained(self) -> tuple[str, ...]:
        """The models to train, in METHODS order."""
        kinds = {TRAINED_AS[m] for m in self.methods}
        return tuple(k for k in dict.fromkeys(TRAINED_AS[m] for m in METHODS) if k in kinds)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("notes")
        d["methods"] = list(self.methods)
        d["eval_lens"] = list(self.eval_lens)
        return d

    def command(self, out: str | None = None, as_json: bool = False) -> list[str]:
        """argv that repeats this run exactly (every setting spelled out)."""
        argv = ["posenc", "experiment", self.task]
        if self.quick:
            argv.append("--quick")
        argv += ["--methods", ",".join(self.methods), "--train-len", str(self.train_len),
                 "--eval-lens", ",".join(map(str, self.eval_lens)), "--steps", str(self.steps),
                 "--seed", str(self.seed), "--device", self.device]
        if self.text is not None:
            argv += ["--text", self.text]
        if out is not None:
            argv += ["--out", out]
        if as_json:
            argv.append("--json")
        return argv


def parse_methods(text: str | None) -> tuple[str, ...]:
    """``nope,rope,alibi`` -> the methods in METHODS order; ``all`` or None -> every method."""
    if text is None or text.strip().lower() == "all":
        return METHODS
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names:
        raise PosencError(f"--methods is empty; use a comma list of: {', '.join(METHODS)} (or all)")
    for name in names:
        if name not in METHODS:
            raise PosencError(f"--methods: {name!r} is not known; use a comma list of: {', '.join(METHODS)}")
    return tuple(m for m in METHODS if m in names)


_MULT = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*x\s*$", re.IGNORECASE)


def parse_eval_lens(text: str | None, train_len: int, default_mults: tuple[int, ...]) -> tuple[int, ...]:
    """``1x,2x,4x`` (multiples of the training length) or ``128,256,1k``; sorted, without repeats."""
    if text is None:
        return tuple(train_len * m for m in default_mults)
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise PosencError("--eval-lens is empty; give e.g. 1x,2x,4x,8x or 128,256,512")
    out: list[int] = []
    for item in items:
        match = _MULT.match(item)
        if match:
            exact = Fraction(match[1]) * train_len
            if exact.denominator != 1 or exact < 1:
                raise PosencError(f"--eval-lens: {item} x train length {train_len} = {float(exact):g} is not a "
                                  "whole number of positions; use a multiple like 2x or a length like 256")
            out.append(int(exact))
        else:
            out.append(parse_length(item, name="--eval-lens value"))
    return tuple(sorted(set(out)))


def _check_len(value: int, name: str, task: str) -> None:
    if task == "copy" and (value < 4 or value % 2):
        raise PosencError(f"{name} {value} does not fit the copy task: it needs an even length of at least 4 "
                          "(start token, n symbols, separator, the n symbols again)")
    if value < 2:
        raise PosencError(f"{name} must be at least 2, got {value}")
    if value > MAX_LEN:
        raise PosencError(f"{name} {value} is longer than {MAX_LEN}, the longest length posenc experiment runs")


def resolve(
    task: str,
    *,
    methods: str | None = None,
    train_len: str | None = None,
    eval_lens: str | None = None,
    steps: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    quick: bool = False,
    text: str | None = None,
) -> Settings:
    """Check every option and fill the rest from the preset; every problem is one PosencError."""
    if task not in TASKS:
        raise PosencError(f"task {task!r} is not known; use one of: {', '.join(TASKS)}")
    preset = PRESETS[(task, quick)]
    chosen = parse_methods(methods)
    tl = preset.train_len if train_len is None else parse_length(train_len, name="--train-len")
    _check_len(tl, "--train-len", task)
    lens = parse_eval_lens(eval_lens, tl, preset.eval_mults)
    for n in lens:
        _check_len(n, "--eval-lens value", task)
    n_steps = preset.steps if steps is None else steps
    if isinstance(n_steps, bool) or not 1 <= n_steps <= MAX_STEPS:
        raise PosencError(f"--steps {n_steps}: allowed 1 to {MAX_STEPS}")
    if not 0 <= seed <= MAX_SEED:
        raise PosencError(f"--seed {seed}: allowed 0 to {MAX_SEED}")
    if device not in ("cpu", "cuda"):
        raise PosencError(f"--device {device!r} is not known; use cpu or cuda")
    if text is not None:
        if task != "lm":
            raise PosencError("--text applies to the lm task only")
        if not os.path.isfile(text):
            raise PosencError(f"--text {text}: no such file")
    notes: list[str] = []
    if "learned" in chosen and any(n > tl for n in lens):
        notes.append(f"learned: its table has {tl} positions (the training length); lengths past it are not "
                     "applicable and show as n/a")
    return Settings(
        task=task, methods=chosen, train_len=tl, eval_lens=lens, steps=n_steps, seed=seed, device=device,
        quick=quick, batch_size=preset.batch_size, lr=preset.lr, d_model=preset.d_model,
        n_layers=preset.n_layers, n_heads=preset.n_heads, corpus_bytes=preset.corpus_bytes,
        eval_bytes=preset.eval_bytes, eval_sequences=preset.eval_sequences, vocab=preset.vocab, text=text,
        notes=notes,
    )
