"""Whether a run measures the per-position loss, and up to which length (stdlib only).

The loss requests (one prompt at the plan's longest length for the curve, plus one at each regression test's
length) are the most expensive requests of a run on some engines: llama-cpp-python answers ``echo`` + ``logprobs``
by sorting the whole vocabulary in Python at every prompt position, so one request costs time and memory linear in
the prompt length times the vocabulary (see :data:`SLOW_LOSS_PATHS`). The choice, in order:

* ``--no-loss``: no loss request ("off"); tests that need the loss are then "not run";
* the server gives no prompt log-probabilities: nothing to send ("unavailable");
* no ``--loss`` and no ``--loss-max-length``, the plan has no test that needs the loss (only needle tests, or none)
  and the engine's loss path is known to be slow: no loss request ("off", said why);
* otherwise the loss is measured ("on"), at lengths capped by ``--loss-max-length``, else by the slow path's
  default cap: a request that would pass the cap is sent at the cap ("capped"), and a regression or perplexity test
  longer than the cap is "not run".

``probe`` shows the choice without a plan (what a run would do with the same flags); the run writes it to its
manifest and the report says whether the loss was measured and at which lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import MAX_EVAL_LENGTH, MIN_EVAL_LENGTH
from posenc_cli.units import format_length, parse_length

if TYPE_CHECKING:
    from posenc_cli.evaluation.plan import Plan
    from posenc_cli.evaluation.probe import Capabilities

#: Plan tests that are judged on the loss (the needle test is judged on answers).
LOSS_TESTS = ("regression", "perplexity")


@dataclass(frozen=True)
class SlowPath:
    """An engine whose prompt-logprob path costs far more than the forward pass over the prompt."""

    cap: int  # default longest loss request, in tokens of context
    why: str  # what makes it slow, with the measurement behind ``cap``


#: Keyed by the engine name :func:`posenc_cli.evaluation.probe.probe` reports. llama-cpp-python 0.3.36's
#: ``create_completion`` with ``echo`` and ``logprobs`` keeps the logits of every prompt position (n_vocab floats
#: each) and sorts all of them in Python per position. Measured on its server, SmolLM2-135M (49,152-token
#: vocabulary, float32 GGUF, 2 threads; docs/pending/eval-real-model.md): 14.5, 28 and 66 CPU-seconds and 0.29,
#: 0.65 and 1.16 GB above the plain request's peak at 512, 1k and 2k tokens, against 2-11 CPU-seconds for the same
#: prompt without echo. 2k is the longest power of two whose request stays near one CPU-minute and 1 GB there;
#: the curve to 2k still covers 22 of the 26 half-octave bins a curve to 8k has.
SLOW_LOSS_PATHS: dict[str, SlowPath] = {
    "llama-cpp-python": SlowPath(
        cap=2048,
        why="llama-cpp-python's echo sorts the whole vocabulary at every prompt position (time and memory grow "
            "with length x vocabulary: measured about 30 ms of CPU and 0.6 MB per token with a 49k vocabulary)"),
}


@dataclass(frozen=True)
class LossChoice:
    """What a run sends for the loss: ``mode`` is on, capped, off or unavailable; ``lengths`` the loss requests."""

    mode: str
    lengths: tuple[int, ...]
    cap: int | None
    why: str

    @property
    def measured(self) -> bool:
        return bool(self.lengths)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "lengths": list(self.lengths), "cap": self.cap, "why": self.why}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LossChoice:
        return cls(str(data["mode"]), tuple(int(n) for n in data["lengths"]), data.get("cap"), str(data["why"]))

    def describe(self) -> str:
        """One line: ``on at 1k, 16k``, ``capped at 2k: why``, ``off: why``."""
        at = f" at {', '.join(format_length(n) for n in self.lengths)}" if self.lengths else ""
        head = f"capped at {format_length(self.cap)}{' (requests' + at + ')' if at else ''}" \
            if self.mode == "capped" and self.cap is not None else f"{self.mode}{at}"
        return f"{head}: {self.why}" if self.why else head


def check_flags(want: bool | None, cap: str | None) -> int | None:
    """The ``--loss/--no-loss`` and ``--loss-max-length`` flags, checked; the cap in tokens (None: not given)."""
    if cap is None:
        return None
    if want is False:
        raise PosencError(f"--loss-max-length {cap}: goes with a loss to measure, and --no-loss sends none "
                          "(give one of the two)")
    tokens = parse_length(cap, name="--loss-max-length")
    if not MIN_EVAL_LENGTH <= tokens <= MAX_EVAL_LENGTH:
        raise PosencError(f"--loss-max-length {cap}: allowed {MIN_EVAL_LENGTH} to {format_length(MAX_EVAL_LENGTH)} "
                          "tokens")
    return tokens


def choose(plan: Plan | None, caps: Capabilities, want: bool | None = None, cap: int | None = None) -> LossChoice:
    """The loss requests of ``plan`` on this server (see the module's rules); without a plan, the policy alone."""
    if want is False:
        return LossChoice("off", (), None, "--no-loss")
    if caps.prompt_logprobs is None:
        return LossChoice("unavailable", (), None, f"the server gives no prompt log-probabilities "
                          f"({caps.logprobs_detail})")
    slow = SLOW_LOSS_PATHS.get(caps.engine)
    needs = [t for t in plan.tests if t.kind in LOSS_TESTS] if plan is not None else []
    if want is None and cap is None and slow is not None and not needs:
        if plan is None:
            return LossChoice("auto", (), slow.cap, f"sent only when a test needs it (regression, perplexity), "
                              f"then capped at {format_length(slow.cap)}; --loss to force it: {slow.why}")
        return LossChoice("off", (), None, f"no test of the plan needs it and {slow.why}; --loss to measure it "
                          f"(capped at {format_length(slow.cap)})")
    limit = cap if cap is not None else slow.cap if slow is not None else None
    source = "--loss-max-length" if cap is not None else slow.why if slow is not None else ""
    if plan is None:
        if limit is None:
            return LossChoice("on", (), None, "at the plan's longest length and each regression test's")
        return LossChoice("capped", (), limit, source)
    wanted = plan.loss_lengths
    if limit is None or max(wanted) <= limit:
        why = "" if limit is None else f"every loss request within the cap {format_length(limit)}"
        return LossChoice("on", tuple(wanted), limit, why)
    kept = sorted({min(max(plan.lengths), limit)} | {n for n in wanted if n <= limit})
    dropped = [t.length for t in needs if t.length > limit]
    why = source + (f"; tests at {', '.join(format_length(n) for n in sorted(set(dropped)))} are not run"
                    if dropped else "")
    return LossChoice("capped", tuple(kept), limit, why)
