"""What an eval run measures: the grid of cells and the tests with their thresholds (stdlib; no numpy).

A plan comes from one of three places:

* ``pick --json`` output: its ``tests`` list (``niah`` with ``length`` and ``pass_rate``, ``regression`` with
  ``length`` and ``margin``) and its extension (``from`` -> ``to``);
* a model's RoPE (``--config``): lengths around where positions change, read with the same model reader as
  ``inspect`` (:mod:`posenc_cli.rope.windows`);
* explicit ``--lengths`` (the tiny model's grid).

Lengths for a plan from an extension ``from -> to``: ``from / 2`` (inside the trained range, the short-context
regression check), ``from``, the geometric midpoints up to ``to``, and ``to``. From a model: the YaRN ramp's short
edge ``original / beta_fast`` (the shortest wavelength YaRN interpolates), ``original``, the midpoint and the native
window. Each length gets every depth and ``trials`` seeds; a plan's fingerprint (sha256 of its canonical JSON)
ties a results file to it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import MAX_EVAL_LENGTH, MAX_TRIALS, MIN_EVAL_LENGTH
from posenc_cli.evaluation.ruler import TaskSet
from posenc_cli.evaluation.templates import Template, load_any
from posenc_cli.files import dumps_json, load_json
from posenc_cli.models.facts import extended_group, window_of
from posenc_cli.models.sources import describe_source, read_source
from posenc_cli.rope.rope_types import param
from posenc_cli.units import format_length, parse_length

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: The pass rate a needle test asks for when no plan gives one (pick's rules use 0.9 for training-free extensions).
DEFAULT_PASS_RATE = 0.9
#: Short-context mean loss may rise this much (relative) over a baseline run (pick's regression margin).
DEFAULT_MARGIN = 0.02
KINDS = ("niah", "regression", "perplexity", "ruler", "nolima")
#: RULER's effective length: the longest length whose average score is at least Llama-2-7B's at 4k, 85.6
#: (Hsieh et al. 2024, RULER, section 4); as a fraction of 1.
RULER_THRESHOLD = 0.856
#: NoLiMa's effective length: the longest length keeping at least 85% of the model's short-context score
#: (Modarressi et al. 2025, NoLiMa, section 4).
NOLIMA_RATIO = 0.85


@dataclass(frozen=True)
class PlanTest:
    """One pass/fail test of a plan (pick's ``tests`` entries):

    * ``niah``: the pass rate over every depth and trial at ``length`` is at least ``threshold``;
    * ``regression``: perplexity over the first ``length`` positions, against a baseline run of the unscaled model
      (``report --baseline``), rises by at most ``threshold`` (relative);
    * ``perplexity``: perplexity over the first ``length`` positions, against the same run's over the first
      ``baseline`` positions, rises by at most ``threshold`` (the model's own perplexity at its trained length);
    * ``ruler``: a task set's effective length, RULER's definition (average score >= ``threshold``), reaches
      ``length``;
    * ``nolima``: the effective length by NoLiMa's definition (>= ``threshold`` of the shortest length's score)
      reaches ``length``.
    """

    kind: str
    length: int
    threshold: float
    baseline: int | None = None  # perplexity: the length whose perplexity is the reference

    def as_dict(self) -> dict[str, Any]:
        if self.kind == "niah":
            return {"kind": "niah", "length": self.length, "pass_rate": self.threshold}
        if self.kind == "ruler":
            return {"kind": "ruler", "length": self.length, "threshold": self.threshold}
        if self.kind == "nolima":
            return {"kind": "nolima", "length": self.length, "ratio": self.threshold}
        out: dict[str, Any] = {"kind": self.kind, "length": self.length, "margin": self.threshold}
        if self.baseline is not None:
            out["baseline"] = self.baseline
        return out

    def describe(self) -> str:
        if self.kind == "niah":
            return f"needle at {format_length(self.length)}: pass rate >= {self.threshold:g}"
        if self.kind == "ruler":
            return (f"effective length >= {format_length(self.length)}: average task score >= "
                    f"{self.threshold * 100:g} (RULER)")
        if self.kind == "nolima":
            return (f"effective length >= {format_length(self.length)}: >= {self.threshold:.0%} of the shortest "
                    "length's score (NoLiMa)")
        if self.kind == "perplexity":
            return (f"perplexity to {format_length(self.length)} within {self.threshold:.0%} of its own to "
                    f"{format_length(self.baseline or 0)}")
        return f"perplexity to {format_length(self.length)} within {self.threshold:.0%} of the baseline run's"


@dataclass(frozen=True)
class Cell:
    kind: str  # "needle", "loss" or "task" (a RULER task's prompt: ``task`` names it, ``depth`` is 0)
    length: int
    depth: float
    trial: int
    task: str = ""

    @property
    def key(self) -> str:
        if self.task:
            return f"{self.kind}:{self.task}:{self.length}:{self.trial}"
        return f"{self.kind}:{self.length}:{self.depth:g}:{self.trial}"

    @property
    def seed(self) -> int:
        # one seed per (length, depth, trial) or (task, length, trial), stable across runs and machines (no hash
        # randomisation)
        text = (f"{self.task}:{self.length}:{self.trial}" if self.task else
                f"{self.length}:{self.depth:g}:{self.trial}").encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:4], "little")


@dataclass(frozen=True)
class Plan:
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    trials: int
    template: Template | TaskSet  # a needle template (cells at every depth) or RULER tasks (every task)
    tests: tuple[PlanTest, ...] = ()
    loss_trials: int = 1  # per-position loss requests at the longest length (when the server gives logprobs)
    source: str = "--lengths"
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: RULER's tasks sent beside a needle template's cells (a pick plan naming both); their lines are ``task``
    #: cells, the needle's ``needle`` cells, so the report reads each apart
    tasks: TaskSet | None = None

    @property
    def loss_lengths(self) -> list[int]:
        """Where the loss requests go: the longest length (the whole curve), and each regression test's length.

        A regression test compares this run with a run of the unscaled model, which cannot serve the extended
        lengths: both runs send the same loss prompt at the test's length (cells are seeded by length, depth and
        trial), so the comparison is between identical prompts.
        """
        return sorted({max(self.lengths)} | {t.length for t in self.tests if t.kind == "regression"})

    def cells(self, with_loss: bool, loss_lengths: Sequence[int] | None = None) -> list[Cell]:
        """Every cell; loss requests at ``loss_lengths`` (default :attr:`loss_lengths`) when ``with_loss``."""
        # loss first: the cheapest way to see whether the server applied a scaling, and what a baseline run needs
        at = self.loss_lengths if loss_lengths is None else loss_lengths
        out = [Cell("loss", n, 0.5, t) for n in at for t in range(self.loss_trials)] if with_loss else []
        if isinstance(self.template, Template):
            out += [Cell("needle", n, d, t) for n in self.lengths for d in self.depths for t in range(self.trials)]
        task_set = self.task_set
        if task_set is not None:
            out += [Cell("task", n, 0.0, t, task.name) for n in self.lengths for task in task_set.tasks
                    for t in range(self.trials)]
        return out

    @property
    def task_set(self) -> TaskSet | None:
        """The RULER tasks this plan sends: the template itself, or the tasks beside a needle template."""
        return self.template if isinstance(self.template, TaskSet) else self.tasks

    def as_dict(self) -> dict[str, Any]:
        out = {"lengths": list(self.lengths), "depths": list(self.depths), "trials": self.trials,
               "loss_trials": self.loss_trials, "tests": [t.as_dict() for t in self.tests],
               "template": self.template.as_dict(), "source": self.source}
        if self.tasks is not None:  # absent otherwise: a plan of one template keeps its fingerprint
            out["tasks"] = self.tasks.as_dict()
        return out

    def fingerprint(self) -> str:
        """What the results depend on (not where the plan was read from: ``--plan ./p.json`` is ``--plan p.json``)."""
        data = self.as_dict()
        del data["source"]
        canonical = dumps_json(data, indent=None, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_grid(lengths: list[int], depths: list[float], trials: int) -> None:
    if not lengths:
        raise PosencError("the plan has no lengths")
    if any(n < MIN_EVAL_LENGTH for n in lengths):
        raise PosencError(f"--lengths: {min(lengths)} is too short (at least {MIN_EVAL_LENGTH} tokens)")
    if any(n > MAX_EVAL_LENGTH for n in lengths):
        raise PosencError(f"--lengths: {max(lengths)} is too long; allowed {MIN_EVAL_LENGTH} to "
                          f"{format_length(MAX_EVAL_LENGTH)} tokens")
    bad = [d for d in depths if not 0.0 <= d <= 1.0]
    if bad or not depths:
        raise PosencError(f"--depths: {bad[0] if bad else 'none'} (allowed: fractions from 0 to 1, e.g. 0,0.5,1)")
    names = [f"{d:g}" for d in depths]  # how cells are named
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PosencError(f"--depths: {twice[0]} appears twice (at 6 significant digits)")
    if not 1 <= trials <= MAX_TRIALS:
        raise PosencError(f"--trials {trials}: allowed 1 to {MAX_TRIALS}")


def _geometric_steps(start: int, stop: int) -> list[int]:
    """``start``, doubling, up to ``stop`` (both included)."""
    out = [start]
    n = start
    while n * 2 < stop:
        n *= 2
        out.append(n)
    out.append(stop)
    return sorted(set(out))


def from_pick(answer: Any, template: Template | TaskSet, *, depths: tuple[float, ...] = DEFAULT_DEPTHS, trials: int = 2,
              label: str = "pick --json", tasks: TaskSet | None = None) -> Plan:
    """The plan of a ``posenc pick --json`` answer: its machine-readable tests and its extension's lengths.

    With ``tasks`` beside a needle ``template`` the plan sends both and keeps every test either measures."""
    if not isinstance(answer, dict) or not isinstance(answer.get("tests"), list):
        raise PosencError(f"{label}: not a `posenc pick --json` answer (no `tests` list)")
    tests: list[PlanTest] = []
    texts: list[str] = []
    for i, item in enumerate(answer["tests"]):
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind not in (*KINDS, "text"):
            raise PosencError(f"{label}: test {i}: kind {kind!r} is not one of {', '.join(KINDS)}, text")
        try:
            if kind == "niah":
                tests.append(PlanTest("niah", _whole(item["length"]), _fraction(item["pass_rate"])))
            elif kind == "ruler":  # pick's: both effective lengths at one length (ratio: NoLiMa's)
                tests.append(PlanTest("ruler", _whole(item["length"]), _fraction(item["threshold"])))
                if "ratio" in item:
                    tests.append(PlanTest("nolima", _whole(item["length"]), _fraction(item["ratio"])))
            elif kind == "nolima":
                tests.append(PlanTest("nolima", _whole(item["length"]), _fraction(item["ratio"])))
            elif kind == "regression":
                tests.append(PlanTest("regression", _whole(item["length"]), _fraction(item["margin"])))
            elif kind == "perplexity":
                tests.append(PlanTest("perplexity", _whole(item["length"]), _fraction(item["margin"]),
                                      baseline=_whole(item["baseline"])))
            else:
                texts.append(str(item.get("text", "")))
        except (KeyError, TypeError, ValueError) as exc:
            what = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise PosencError(f"{label}: test {i} ({kind}): {what}") from None
    found = answer.get("extension")
    extension: dict[str, Any] = found if isinstance(found, dict) else {}
    start, stop = extension.get("from"), extension.get("to")
    lengths: set[int] = {t.length for t in tests} | {t.baseline for t in tests if t.baseline is not None}
    if isinstance(start, int) and isinstance(stop, int) and stop > start:
        lengths |= {max(start // 2, 8), *_geometric_steps(start, stop)}
    if not lengths:
        raise PosencError(f"{label}: the answer names no length to test (no niah test and no extension)")
    notes = tuple(f"not measured by eval (a sentence, not a test): {t}" for t in texts)
    tests, skipped = _for_template(tests, template, tasks)
    notes += skipped
    return Plan(tuple(sorted(lengths)), depths, trials, template, tuple(tests), source=label, notes=notes,
                tasks=tasks)


def _for_template(tests: list[PlanTest], template: Template | TaskSet,
                  tasks: TaskSet | None = None) -> tuple[list[PlanTest], tuple[str, ...]]:
    """The tests a run with ``template`` (and ``tasks``) measures: a needle template the ``niah`` ones, a task set
    the effective lengths (``ruler``, ``nolima``); the others are noted, not run."""
    measured: tuple[str, ...] = ("ruler", "nolima") if isinstance(template, TaskSet) else ("niah",)
    if tasks is not None:
        measured += ("ruler", "nolima")
    keep = [t for t in tests if t.kind in measured or t.kind in ("regression", "perplexity")]
    other = "a needle template (--template needle)" if isinstance(template, TaskSet) else "--template ruler"
    notes = tuple(f"not measured with this template (needs {other}): {t.describe()}" for t in tests if t not in keep)
    return keep, notes


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"length {value!r} is not a positive whole number of tokens")
    return value


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"threshold {value!r} is not a fraction from 0 to 1")
    return float(value)


def from_model(model: Any, template: Template | TaskSet, *, depths: tuple[float, ...] = DEFAULT_DEPTHS, trials: int = 2,
               label: str = "--config") -> Plan:
    """Lengths where a model's positions change, from the rope group an extension changes and the window the model
    serves, as ``scale`` and ``pick`` read them (:func:`posenc_cli.models.facts.extended_group`,
    :mod:`posenc_cli.rope.windows`)."""
    if model.family != "rope" or not model.layers or model.max_position_embeddings is None:
        raise PosencError(f"{label}: not a RoPE model with a max_position_embeddings; give --lengths")
    layer = extended_group(model)
    served = window_of(model, layer)
    assert served is not None  # max_position_embeddings is set (checked above)
    original, window = served.original, served.native
    base = original or window
    lengths = {window, base, max(base // 2, 8)}
    if original and window > original:
        lengths.add(int(math.sqrt(original * window)) // 64 * 64)
    if layer.params.get("rope_type") == "yarn":
        beta_fast = float(param(layer.params, "beta_fast", "yarn"))
        lengths.add(max(int(base / beta_fast), 8))
    tests = (*_retrieval_tests(window, template, DEFAULT_PASS_RATE),
             PlanTest("regression", max(base // 2, 8), DEFAULT_MARGIN))
    return Plan(tuple(sorted(lengths)), depths, trials, template, tests, source=label)


def _retrieval_tests(length: int, template: Template | TaskSet, pass_rate: float) -> tuple[PlanTest, ...]:
    """At ``length``: a needle test, or for a task set both effective lengths (RULER's and NoLiMa's)."""
    if isinstance(template, TaskSet):
        return PlanTest("ruler", length, RULER_THRESHOLD), PlanTest("nolima", length, NOLIMA_RATIO)
    return (PlanTest("niah", length, pass_rate),)


def from_lengths(lengths: list[int], template: Template | TaskSet, *, depths: tuple[float, ...] = DEFAULT_DEPTHS,
                 trials: int = 4, pass_rate: float | None = None) -> Plan:
    """An explicit grid; ``pass_rate`` makes a needle test at the longest length."""
    if not lengths:
        raise PosencError("--lengths: no length given (for example 64,128,1k)")
    if pass_rate is not None and not 0.0 <= pass_rate <= 1.0:
        raise PosencError(f"--pass-rate {pass_rate}: allowed 0 to 1")
    if isinstance(template, TaskSet):
        if pass_rate is not None:
            raise PosencError("--pass-rate is a needle test's; a task set's tests are its effective lengths "
                              "(RULER's 85.6 and NoLiMa's 85%, at the longest length)")
        tests = _retrieval_tests(max(lengths), template, 0.0)
    else:
        tests = (PlanTest("niah", max(lengths), pass_rate),) if pass_rate is not None else ()
    return Plan(tuple(sorted(set(lengths))), depths, trials, template, tests)


def plan_for(*, plan_file: str | None = None, config: str | None = None, lengths: str | None = None,
             template: str | None = None, depths: str | None = None, trials: int | None = None,
             pass_rate: float | None = None) -> Plan:
    """The plan ``posenc eval run`` sends, from exactly one of: a ``pick --json`` answer (``plan_file``), a model
    (``config``: config.json, folder, Hub id or GGUF) or comma-separated ``lengths``; checked against the grid caps.
    A ``pick --json`` answer naming a task set (``tasks``) runs the needle template and those tasks, unless
    ``template`` picks one.

    Defaults: the passkey template and 4 trials for bare lengths (the tiny model's grid), else needle and 2;
    ``depths`` comma-separated fractions (default :data:`DEFAULT_DEPTHS`); ``pass_rate`` only with ``lengths`` (a
    plan or a model brings its own thresholds).
    """
    given = [name for name, value in (("--plan", plan_file), ("--config", config), ("--lengths", lengths))
             if value is not None]
    if len(given) != 1:
        raise PosencError("give exactly one of --plan, --config or --lengths" +
                          (f" (got {', '.join(given)})" if given else ""))
    if pass_rate is not None and lengths is None:
        raise PosencError("--pass-rate goes with --lengths; a plan or a model brings its own thresholds")
    # a plan naming a task set, with no --template, runs both: its needle tests and the tasks
    answer = load_json(plan_file) if plan_file is not None else None  # once: "-" is stdin
    named = _tasks_of(answer) if template is None else None
    beside = load_any(named) if named is not None else None
    chosen = load_any(template if template is not None else ("passkey" if lengths else "needle"))
    depth_list = tuple(_floats(depths, "--depths")) if depths is not None else DEFAULT_DEPTHS
    if plan_file is not None:
        plan = from_pick(answer, chosen, depths=depth_list, trials=_or(trials, 2),
                         label=f"pick --json ({plan_file})",
                         tasks=beside if isinstance(beside, TaskSet) else None)
    elif config is not None:
        plan = from_model(describe_source(read_source(config)), chosen, depths=depth_list, trials=_or(trials, 2),
                          label=f"model {config}")
    else:
        grid = [parse_length(x.strip(), name="--lengths") for x in (lengths or "").split(",") if x.strip()]
        plan = from_lengths(grid, chosen, depths=depth_list, trials=_or(trials, 4), pass_rate=pass_rate)
    check_grid(list(plan.lengths), list(plan.depths), plan.trials)
    return plan


def _tasks_of(answer: Any) -> str | None:
    """The task set a ``pick --json`` answer names (``tasks``), sent beside its needle tests."""
    tasks = answer.get("tasks") if isinstance(answer, dict) else None
    return tasks if isinstance(tasks, str) else None


def _or(value: int | None, default: int) -> int:
    """``value`` unless it was not given (``--trials 0`` must reach the range check, not become the default)."""
    return default if value is None else value


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PosencError(f"{name} {text!r}: expected numbers separated by commas (e.g. 0,0.5,1)") from None
