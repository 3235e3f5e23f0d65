"""A rules file's schema and its strict check: the facts rules may test, the operators, derivations, keys and
test kinds a file may use, the records a checked file becomes (:class:`RuleSet`), and :func:`check_rules`, which
reports the first mistake with the file, line and rule (see :mod:`posenc_cli.pick.rules` for the format).

stdlib only: PyYAML parses the file in :mod:`posenc_cli.pick.rules`; this module checks what it parsed.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from posenc_cli.errors import PosencError

#: Facts the picker supplies, with their types. Rules may only refer to these and to derived facts.
INPUT_FACTS: dict[str, type] = {
    "ctx": int,  # target context at inference
    "trained_ctx": int,  # pre-trained (or to-be-trained) length: where a jump is measured from
    "served_ctx": int,  # the window the existing model's file serves as it is (past trained_ctx: training-free); 0: new
    "budget": int,  # fine-tuning tokens available for a long-context stage
    "extrapolation": str,  # none | moderate | strong
    "existing": bool,  # a model config was given
    "model_encoding": str,  # rope | alibi | learned | unknown | none (new model)
    "model_rope_type": str,  # the existing model's rope_type, or none
    "head_dim": int,
    "heads": int,
    "theta": float,  # the existing model's (or --theta) rope_theta; 0 when unknown
    "original_ctx": int,  # the length the model's own scaling refers to (0: none; see models.windows)
    "typical_ctx": int,  # the length most requests use (--typical-ctx; 0: not given)
    "model_scaled": bool,  # the existing model ships with rope scaling of its own
    "model_keepable": bool,  # posenc can extend the model's own rope type (picker.KEEP)
    "model_replaceable": bool,  # posenc may replace the model's rope type (not one it cannot write: proportional)
    "yarn_remapped": bool,  # the model's config class turns a yarn dict into longrope (phi3)
    # the plan (posenc_cli.pick.planning), from the constants and tables of the rules file
    "theta_new": float,  # rope_theta for a new model (tables.theta_by_length, or --theta)
    "theta_stage": float,  # rope_theta for the longest length the plan trains at (ABF)
    "free_cap": float,  # the furthest training-free jump allowed for these inputs
    "base_cap": float,  # constants.training_free_cap: the training-free jump shipped models deploy (x4)
    "train_to": int,  # the longest length the plan trains at
    "stages": int,  # fine-tuning stages to reach train_to (0: none)
    "stage_tokens": int,  # tokens per stage the plan uses
    "plan_tokens_min": int,  # the least the plan needs (stages x constants.stage_tokens_min)
    "plan_tokens_full": int,  # what the published results used (stages x constants.stage_tokens)
    "plan_tokens": int,  # what the plan spends: the whole budget when it covers plan_tokens_min, else 0
    "missing_tokens": int,  # plan_tokens_min - budget when the budget is short, else 0
    "final_jump": float,  # the training-free factor after the last stage (1: the plan trains at the target)
    "target_stages": int,  # stages to train all the way to ctx, whatever the budget
    "target_tokens_min": int,  # the least that training to ctx takes (target_stages x constants.stage_tokens_min)
    "abf_margin": float,  # budget / constants.abf_budget: >= 1 buys raising theta with continued pre-training
    "stage_margin": float,  # budget / constants.stage_tokens_min: >= 1 buys one fine-tuning stage
}
#: Facts only templates may use (text made by the picker).
# "model": the --config as the user gave it (shell-quoted; MODEL without one), for the commands a text prints
TEXT_FACTS = {"alibi_slopes", "command", "stage_plan", "stage_ends", "target_plan", "theta_source", "model"}

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "between": lambda a, b: b[0] <= a <= b[1],
}
_NUMERIC_OPS = {"<", "<=", ">", ">=", "between"}
DERIVATIONS: dict[str, Callable[[list[float]], float]] = {
    "ratio": lambda xs: xs[0] / xs[1],
    "product": lambda xs: xs[0] * xs[1],
    "min": min,
    "max": max,
}
TOP_KEYS = {"version", "constants", "tables", "derived", "rules"}
#: Numbers the plan is computed from; each is stated in the rules file with its source.
CONSTANTS = {"training_free_cap": (1.0, 8.0), "training_free_cap_asked": (1.0, 8.0), "stage_ratio": (2.0, 8.0),
             "stage_tokens_min": (1.0, 1e15), "stage_tokens": (1.0, 1e15), "abf_budget": (0.0, 1e16),
             "funded_final_jump": (1.0, 8.0), "ruler_threshold": (0.0, 100.0), "nolima_ratio": (0.0, 1.0)}
TABLES = {"theta_by_length"}
RULE_KEYS = {"id", "when", "encoding", "reason", "hyperparameters", "extension", "test_plan", "fallback", "why"}
REQUIRED_RULE_KEYS = {"id", "when", "encoding", "reason", "test_plan", "fallback", "why"}
CONDITION_KEYS = {"fact", "op", "value"}
EXTENSION_KEYS = {"method", "factor", "fine_tune", "tokens", "note"}
TEST_KINDS = {"niah": {"length", "pass_rate"}, "perplexity": {"length", "baseline", "margin"},
              "regression": {"length", "margin"}, "text": None}
# longrope is left out: its per-pair factor lists come from a search, not from a rules file
# "keep": the existing model's own scaling family (llama3 stays llama3, yarn keeps beta/mscale/truncate)
# "abf": raise rope_theta to theta_stage and set the window the plan trains to (train_to), with a training-free yarn
# jump on top when the plan stops short of the target
EXTENSION_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3", "keep", "abf")
TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]*))?\}")
_SPEC = re.compile(r"^(len|tokens|[,_]?(\.\d+)?[gfe%]?)$")


class RulesError(PosencError):
    """A broken rules file; the message names the file, the line when known, and the rule."""


class Condition(NamedTuple):  # NamedTuples, not dataclasses: cheaper to define, and pick's start-up counts
    fact: str
    op: str
    value: Any

    def holds(self, facts: Mapping[str, Any]) -> bool:
        return bool(OPERATORS[self.op](facts[self.fact], self.value))

    def text(self) -> str:
        return f"{self.fact} {self.op} {self.value!r}"


class Rule(NamedTuple):
    id: str
    line: int | None
    when: tuple[Condition, ...]
    body: dict[str, Any]


class Constant(NamedTuple):
    value: float
    source: str


class TableRow(NamedTuple):
    up_to: int | None  # None: no upper bound
    value: float
    source: str


class RuleSet(NamedTuple):
    source: str
    version: int
    derived: dict[str, tuple[str, list[Any]]]
    rules: list[Rule]
    raw: dict[str, Any]
    constants: dict[str, Constant]
    tables: dict[str, list[TableRow]]

    def lookup(self, table: str, length: int) -> TableRow:
        """The first row of ``table`` whose ``up_to`` is at least ``length``."""
        return next(row for row in self.tables[table] if row.up_to is None or length <= row.up_to)

    def facts(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Input facts plus the derived ones, computed in file order."""
        facts = dict(inputs)
        for name, (how, args) in self.derived.items():
            values = [float(facts[a] if isinstance(a, str) else a) for a in args]
            if how == "ratio" and values[1] == 0:
                raise RulesError(f"{self.source}: derived fact {name!r} = ratio({args[0]}, {args[1]}) divides by "
                                 "zero for these inputs")
            facts[name] = DERIVATIONS[how](values)
        return facts


def located(label: str, line: int | None, rule: str | None, message: str) -> RulesError:
    """A :class:`RulesError` naming the file, the line when known, and the rule."""
    where = f"{label}" + (f":{line}" if line else "")
    who = f" rule {rule!r}:" if rule else ""
    return RulesError(f"{where}:{who} {message}")


def _check_template(text: Any, known: dict[str, type], fail: Callable[[str], RulesError], where: str) -> None:
    """``known`` maps each fact a template may use to its type (``str`` for text)."""
    if not isinstance(text, str):
        return
    for match in TEMPLATE.finditer(text):
        name, spec = match.group(1), match.group(2)
        if name not in known:
            raise fail(f"{where}: template {{{name}}} references no known fact; known: {', '.join(sorted(known))}")
        if spec is not None and not _SPEC.match(spec):
            raise fail(f"{where}: template format {spec!r} is not allowed; use len, tokens or e.g. .3g")
        if spec and known[name] is str:
            raise fail(f"{where}: template {{{name}:{spec}}} formats text as a number; write {{{name}}}")


def check_rules(data: Any, label: str, key_lines: dict[Any, int], lines: list[int | None]) -> RuleSet:
    """The rules file ``data`` checked strictly, as a :class:`RuleSet`: the top level, the derived facts, each rule
    in order, the catch-all last, then the constants and tables."""
    _check_top(data, label, key_lines)
    fact_types: dict[str, type] = dict(INPUT_FACTS)
    derived = _derived(data.get("derived") or {}, label, fact_types)
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise located(label, None, None, "rules must be a non-empty list")
    check = _RuleCheck(label, fact_types, {**fact_types, **dict.fromkeys(TEXT_FACTS, str)})
    seen: set[str] = set()
    rules = [check.rule(raw, index, lines[index] if index < len(lines) else None, seen)
             for index, raw in enumerate(raw_rules)]
    if rules[-1].when:
        raise located(label, rules[-1].line, rules[-1].id, "the last rule must be a catch-all with `when: []`")
    for rule in rules[:-1]:
        if not rule.when:
            raise located(label, rule.line, rule.id, "only the last rule may be a catch-all; rules after it never run")
    # the numbers are checked after the rules, so a broken rule is reported first
    constants = _constants(data.get("constants"), label, key_lines.get("constants"))
    tables = _tables(data.get("tables"), label, key_lines.get("tables"))
    return RuleSet(label, 1, derived, rules, data, constants, tables)


def _check_top(data: Any, label: str, key_lines: dict[Any, int]) -> None:
    if not isinstance(data, dict):
        raise located(label, None, None, "the file must be a mapping with version, derived and rules")
    unknown = set(data) - TOP_KEYS
    if unknown:
        first = min(unknown, key=lambda k: key_lines.get(str(k), 0))
        raise located(label, key_lines.get(str(first)), None,
                    f"unknown key(s) {sorted(map(str, unknown))}; allowed: {sorted(TOP_KEYS)}")
    if data.get("version") != 1:
        raise located(label, key_lines.get("version"), None, f"version must be 1, got {data.get('version')!r}")


def _derived(raw: Any, label: str, fact_types: dict[str, type]) -> dict[str, tuple[str, list[Any]]]:
    """``derived: {name: {ratio|product|min|max: [a, b]}}`` checked in order; each name joins ``fact_types``."""
    if not isinstance(raw, dict):
        raise located(label, None, None, "derived must be a mapping of name: {ratio|product|min|max: [a, b]}")
    derived: dict[str, tuple[str, list[Any]]] = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise located(label, None, None, f"derived fact {name!r} must be one of {sorted(DERIVATIONS)}: [a, b]")
        (how, args), = spec.items()
        if how not in DERIVATIONS:
            raise located(label, None, None, f"derived fact {name!r}: unknown operation {how!r}; "
                                           f"use one of {sorted(DERIVATIONS)}")
        if not isinstance(args, list) or len(args) != 2:
            raise located(label, None, None, f"derived fact {name!r}: {how} takes a list of two facts or numbers")
        for a in args:
            if isinstance(a, str) and fact_types.get(a) not in (int, float):
                raise located(label, None, None, f"derived fact {name!r}: {a!r} is not a known numeric fact")
            if not isinstance(a, (str, int, float)) or isinstance(a, bool):
                raise located(label, None, None, f"derived fact {name!r}: {a!r} is neither a fact nor a number")
        if name in fact_types:
            raise located(label, None, None, f"derived fact {name!r} would shadow an existing fact")
        derived[name] = (how, args)
        fact_types[name] = float
    return derived


class _RuleCheck(NamedTuple):
    """The strict check of one rule at a time: ``facts`` the conditions may test (with their types), ``templates``
    the facts a text may name."""

    label: str
    facts: dict[str, type]
    templates: dict[str, type]

    def rule(self, raw: Any, index: int, line: int | None, seen: set[str]) -> Rule:
        rid = raw.get("id") if isinstance(raw, dict) else None

        def fail(message: str, line: int | None = line, who: str = str(rid) if rid else f"#{index + 1}") -> RulesError:
            return located(self.label, line, who, message)

        if not isinstance(raw, dict):
            raise fail("each rule must be a mapping")
        unknown = set(raw) - RULE_KEYS
        if unknown:
            raise fail(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(RULE_KEYS)}")
        missing = REQUIRED_RULE_KEYS - set(raw)
        if missing:
            raise fail(f"missing key(s) {sorted(missing)}")
        if not isinstance(rid, str) or not rid:
            raise fail("id must be a non-empty string")
        if rid in seen:
            raise fail(f"duplicate id {rid!r}")
        seen.add(rid)
        if not isinstance(raw["when"], list):
            raise fail("when must be a list of conditions ([] for the catch-all)")
        conditions = tuple(self.condition(cond, fail) for cond in raw["when"])
        body = {k: v for k, v in raw.items() if k not in ("id", "when")}
        self.texts(body, fail)
        if body.get("extension") is not None:
            self.extension(body["extension"], fail)
        self.test_plan(body["test_plan"], fail)
        return Rule(rid, line, conditions, body)

    def condition(self, cond: Any, fail: Callable[[str], RulesError]) -> Condition:
        if not isinstance(cond, dict) or set(cond) != CONDITION_KEYS:
            raise fail(f"condition {cond!r} must have exactly the keys fact, op, value")
        fact, op, value = cond["fact"], cond["op"], cond["value"]
        if not isinstance(fact, str) or not isinstance(op, str):
            raise fail(f"condition {cond!r}: fact and op must be text")
        if fact not in self.facts:
            raise fail(f"condition on unknown fact {fact!r}; known: {', '.join(sorted(self.facts))}")
        if op not in OPERATORS:
            raise fail(f"unknown operator {op!r}; use one of: {' '.join(OPERATORS)}")
        numeric = self.facts[fact] in (int, float)
        if op in _NUMERIC_OPS and not numeric:
            raise fail(f"operator {op!r} needs a numeric fact; {fact!r} is {self.facts[fact].__name__}")
        if op == "between" and not (isinstance(value, list) and len(value) == 2
                                    and all(isinstance(v, (int, float)) for v in value)):
            raise fail(f"between needs [low, high], got {value!r}")
        if op == "in" and not isinstance(value, list):
            raise fail(f"in needs a list, got {value!r}")
        if op in ("<", "<=", ">", ">=") and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise fail(f"operator {op!r} needs a number, got {value!r}")
        return Condition(fact, op, value)

    def texts(self, body: dict[str, Any], fail: Callable[[str], RulesError]) -> None:
        """The answer's texts and hyperparameters, with the facts their templates name."""
        for key in ("encoding", "reason", "fallback", "why"):
            if not isinstance(body[key], str):
                raise fail(f"{key} must be text")
            _check_template(body[key], self.templates, fail, key)
        hyper = body.get("hyperparameters") or {}
        if not isinstance(hyper, dict):
            raise fail("hyperparameters must be a mapping")
        for k, v in hyper.items():
            if not isinstance(v, (str, int, float, bool)) or (isinstance(v, float) and not math.isfinite(v)):
                raise fail(f"hyperparameters.{k} must be a finite number, text or boolean, got {v!r}")
            _check_template(v, self.templates, fail, f"hyperparameters.{k}")

    def extension(self, ext: Any, fail: Callable[[str], RulesError]) -> None:
        if not isinstance(ext, dict):
            raise fail("extension must be a mapping or null")
        unknown = set(ext) - EXTENSION_KEYS
        if unknown:
            raise fail(f"extension: unknown key(s) {sorted(unknown)}; allowed: {sorted(EXTENSION_KEYS)}")
        if ext.get("method") == "longrope":
            raise fail("extension.method 'longrope' needs searched per-pair factor lists, which a rules file "
                       "cannot supply; use `posenc scale longrope` and mention it in a note")
        if ext.get("method") not in EXTENSION_METHODS:
            raise fail(f"extension.method {ext.get('method')!r} is not one of {', '.join(EXTENSION_METHODS)}")
        factor = ext.get("factor")
        if isinstance(factor, str):
            if self.facts.get(factor) not in (int, float):
                raise fail(f"extension.factor {factor!r} is not a known numeric fact")
        elif isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1:
            raise fail(f"extension.factor must be a number >= 1 or a fact name, got {factor!r}")
        if not isinstance(ext.get("fine_tune", False), bool):
            raise fail("extension.fine_tune must be true or false")
        for k in ("tokens", "note"):
            _check_template(ext.get(k), self.templates, fail, f"extension.{k}")

    def test_plan(self, plan: Any, fail: Callable[[str], RulesError]) -> None:
        if not isinstance(plan, list):
            raise fail("test_plan must be a list")
        for item in plan:
            if not isinstance(item, dict) or len(item) != 1:
                raise fail(f"test_plan item {item!r} must be one of {sorted(TEST_KINDS)}")
            (kind, spec), = item.items()
            if kind not in TEST_KINDS:
                raise fail(f"test_plan kind {kind!r} is not one of {sorted(TEST_KINDS)}")
            if kind == "text":
                _check_template(spec, self.templates, fail, "test_plan.text")
                continue
            if not isinstance(spec, dict) or set(spec) != TEST_KINDS[kind]:
                raise fail(f"test_plan {kind} needs exactly {sorted(TEST_KINDS[kind] or ())}")
            for key in ("length", "baseline"):
                if key in spec and (not isinstance(spec[key], str) or self.facts.get(spec[key]) not in (int, float)):
                    raise fail(f"test_plan {kind}.{key} {spec[key]!r} must name a numeric fact")
            if kind == "perplexity" and spec["length"] == spec["baseline"]:
                raise fail(f"test_plan perplexity compares {spec['length']} with itself; a short-context check is "
                           "`regression: {length, margin}` (the model with and without the change)")
            for key, high, allowed in (("pass_rate", 1.0, "from 0 to 1"), ("margin", float("inf"), ">= 0")):
                v = spec.get(key, 0)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= high:
                    raise fail(f"test_plan {kind}.{key} must be a number {allowed}, got {v!r}")


def _constants(raw: Any, label: str, line: int | None) -> dict[str, Constant]:
    """``constants: {name: {value: N, source: "..."}}``: every name in :data:`CONSTANTS`, each with its source."""
    if not isinstance(raw, dict):
        raise located(label, line, None, f"constants must be a mapping with {sorted(CONSTANTS)}")
    out: dict[str, Constant] = {}
    for name, (low, high) in CONSTANTS.items():
        entry = raw.get(name)
        if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
            raise located(label, line, None, f"constants.{name} must be {{value: number, source: text}}")
        value, source = entry["value"], entry["source"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise located(label, line, None, f"constants.{name} = {value!r} must be a number from {low:g} to {high:g}")
        if not isinstance(source, str) or not source.strip():
            raise located(label, line, None, f"constants.{name} needs a source")
        out[name] = Constant(float(value), source)
    unknown = set(raw) - set(CONSTANTS)
    if unknown:
        raise located(label, line, None, f"unknown constant(s) {sorted(unknown)}; allowed: {sorted(CONSTANTS)}")
    if out["training_free_cap_asked"].value < out["training_free_cap"].value:
        raise located(label, line, None, "constants.training_free_cap_asked must not be below training_free_cap")
    if out["funded_final_jump"].value > out["training_free_cap"].value:
        raise located(label, line, None, "constants.funded_final_jump must not be above training_free_cap")
    return out


def _tables(raw: Any, label: str, line: int | None) -> dict[str, list[TableRow]]:
    """``tables: {theta_by_length: [{up_to: N or null, value: N, source: "..."}, ...]}``, rising, ending unbounded."""
    if not isinstance(raw, dict) or set(raw) != TABLES:
        raise located(label, line, None, f"tables must be a mapping with exactly {sorted(TABLES)}")
    out: dict[str, list[TableRow]] = {}
    for name, rows in raw.items():
        if not isinstance(rows, list) or not rows:
            raise located(label, line, None, f"tables.{name} must be a non-empty list of rows")
        parsed = []
        for row in rows:
            if not isinstance(row, dict) or set(row) != {"up_to", "value", "source"}:
                raise located(label, line, None, f"tables.{name}: each row is {{up_to, value, source}}, got {row!r}")
            up_to, value, source = row["up_to"], row["value"], row["source"]
            if up_to is not None and (isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 1):
                raise located(label, line, None, f"tables.{name}: up_to {up_to!r} must be a length or null")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1:
                raise located(label, line, None, f"tables.{name}: value {value!r} must be a number above 1")
            if not isinstance(source, str) or not source.strip():
                raise located(label, line, None, f"tables.{name}: every row needs a source")
            parsed.append(TableRow(up_to, float(value), source))
        bounded = [r.up_to for r in parsed[:-1] if r.up_to is not None]
        if parsed[-1].up_to is not None or len(bounded) != len(parsed) - 1 or bounded != sorted(bounded):
            raise located(label, line, None, f"tables.{name}: up_to must rise and the last row must be null")
        out[name] = parsed
    return out
