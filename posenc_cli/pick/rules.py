"""The decision-rule engine behind ``posenc pick`` (stdlib + PyYAML; no numpy).

A rules file is data, read with PyYAML's safe loader (``yaml.safe_load`` semantics, libyaml when available) and
checked strictly (unknown keys, facts, operators and template names are errors). Schema, in short
(``rules/schema.json`` has the machine-readable form)::

    version: 1
    constants:                    # the plan's numbers (posenc_cli.pick.planning), each {value, source}; see CONSTANTS
      training_free_cap: {value: 4, source: "..."}
    tables:                       # rows {up_to, value, source}, up_to rising, the last one null
      theta_by_length: [{up_to: 8192, value: 500000, source: "..."}, {up_to: null, ...}]
    derived:                      # facts computed from other facts, in order
      scale: {ratio: [ctx, trained_ctx]}          # ratio | product | min | max, of facts or numbers
    rules:                        # first match wins; the last rule must have `when: []` (catch-all)
      - id: some-id
        when:                     # all must hold
          - {fact: scale, op: ">", value: 1}      # ops: == != < <= > >= in between
        encoding: RoPE
        reason: one sentence, may use {templates}
        hyperparameters: {theta: 500000, head_dim: "{head_dim}"}
        extension: {method: yarn, factor: scale, fine_tune: false, tokens: "none"}   # or keep, abf; or null
        test_plan:
          - niah: {length: ctx, pass_rate: 0.9}
          - perplexity: {length: ctx, baseline: trained_ctx, margin: 0.1}
          - regression: {length: trained_ctx, margin: 0.02}   # required when positions change
          - text: anything else
        fallback: what to do if the long-context evaluation fails
        why: the evidence behind the rule

Templates are ``{fact}`` or ``{fact:spec}`` where spec is ``len`` (131072 -> 128k), ``tokens`` (2e9 -> 2B) or a
Python number format such as ``.3g``. Hard guards (see :data:`GUARDS`) veto a rule's answer whatever the file
says; evaluation then continues with the next rule.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from posenc_cli.errors import PosencError
from posenc_cli.files import read_text
from posenc_cli.units import format_length, format_tokens

#: Facts the picker supplies, with their types. Rules may only refer to these and to derived facts.
INPUT_FACTS: dict[str, type] = {
    "ctx": int,  # target context at inference
    "trained_ctx": int,  # pre-trained (or to-be-trained) length
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
             "funded_final_jump": (1.0, 8.0)}
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
LONG_CONTEXT = 32768  # from here on a recommendation counts as long-context for the NIAH guard
_TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]*))?\}")
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


@dataclass(eq=False)
class RuleSet:
    source: str
    version: int
    derived: dict[str, tuple[str, list[Any]]]
    rules: list[Rule]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    constants: dict[str, Constant] = field(default_factory=dict)
    tables: dict[str, list[TableRow]] = field(default_factory=dict)

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


def shipped_path(*parts: str) -> Path:
    """A file of ``rules/`` as shipped in the wheel (``posenc_cli/rules/...``), or in a source checkout.

    A regular install has the file next to this module, which is checked first without importing
    ``importlib.resources`` (that import alone costs ``posenc pick`` about 4 ms, a tenth of its start-up);
    other loaders (zip imports) go through ``importlib.resources``.
    """
    here = Path(__file__).resolve().parent.parent  # posenc_cli/, which holds rules/ in a wheel
    packaged = here.joinpath("rules", *parts)
    if packaged.is_file():
        return packaged
    checkout = here.parent.joinpath("rules", *parts)  # an editable install of a source checkout
    if checkout.is_file() and (here.parent / "pyproject.toml").is_file():
        return checkout
    from importlib import resources

    return Path(str(resources.files("posenc_cli").joinpath("rules", *parts)))


def default_rules_path() -> Path:
    """``default.yaml`` as shipped (see :func:`shipped_path`)."""
    return shipped_path("default.yaml")


#: The safe loader (no tags beyond plain YAML, so no Python objects); libyaml's C version when PyYAML has it.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _safe_load_with_node(text: str) -> tuple[Any, yaml.Node | None]:
    """``yaml.safe_load(text)`` plus the composed node tree (for line numbers), parsing the text once."""
    loader = SAFE_LOADER(text)
    try:
        root = loader.get_single_node()
        return (loader.construct_document(root) if root is not None else None), root
    finally:
        loader.dispose()


def _node_lines(root: yaml.Node | None) -> tuple[dict[Any, int], list[int | None]]:
    """1-based lines of the top-level keys and of each entry under ``rules:``, from YAML's node marks."""
    if not isinstance(root, yaml.MappingNode):
        return {}, []
    keys: dict[Any, int] = {}
    rules: list[int | None] = []
    for key, value in root.value:
        keys.setdefault(key.value, key.start_mark.line + 1)
        if key.value == "rules" and isinstance(value, yaml.SequenceNode):
            rules = [item.start_mark.line + 1 for item in value.value]
    return keys, rules


def load_rules(path: str | Path | None = None) -> RuleSet:
    """Read and validate a rules file (default: the shipped policy). Raises :class:`RulesError`."""
    p = Path(path) if path is not None else default_rules_path()
    # the shipped file's absolute path says nothing useful and differs per install
    label = str(p) if path is not None else "default.yaml (shipped)"
    if p.is_dir():
        raise RulesError(f"{label} is a directory, not a rules file")
    return parse_rules(read_text(p, label, kind="rules file", error=RulesError), label)


def parse_rules(text: str, label: str = "<rules>") -> RuleSet:
    try:
        data, root = _safe_load_with_node(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(label, mark.line + 1 if mark is not None else None, None, f"YAML error: {problem}") from None
    return _validate(data, label, *_node_lines(root))


def _fail(label: str, line: int | None, rule: str | None, message: str) -> RulesError:
    where = f"{label}" + (f":{line}" if line else "")
    who = f" rule {rule!r}:" if rule else ""
    return RulesError(f"{where}:{who} {message}")


def _check_template(text: Any, known: dict[str, type], fail: Callable[[str], RulesError], where: str) -> None:
    """``known`` maps each fact a template may use to its type (``str`` for text)."""
    if not isinstance(text, str):
        return
    for match in _TEMPLATE.finditer(text):
        name, spec = match.group(1), match.group(2)
        if name not in known:
            raise fail(f"{where}: template {{{name}}} references no known fact; known: {', '.join(sorted(known))}")
        if spec is not None and not _SPEC.match(spec):
            raise fail(f"{where}: template format {spec!r} is not allowed; use len, tokens or e.g. .3g")
        if spec and known[name] is str:
            raise fail(f"{where}: template {{{name}:{spec}}} formats text as a number; write {{{name}}}")


def _validate(data: Any, label: str, key_lines: dict[Any, int], lines: list[int | None]) -> RuleSet:
    if not isinstance(data, dict):
        raise _fail(label, None, None, "the file must be a mapping with version, derived and rules")
    unknown = set(data) - TOP_KEYS
    if unknown:
        first = min(unknown, key=lambda k: key_lines.get(str(k), 0))
        raise _fail(label, key_lines.get(str(first)), None,
                    f"unknown key(s) {sorted(map(str, unknown))}; allowed: {sorted(TOP_KEYS)}")
    if data.get("version") != 1:
        raise _fail(label, key_lines.get("version"), None, f"version must be 1, got {data.get('version')!r}")
    fact_types: dict[str, type] = dict(INPUT_FACTS)
    derived: dict[str, tuple[str, list[Any]]] = {}
    raw_derived = data.get("derived") or {}
    if not isinstance(raw_derived, dict):
        raise _fail(label, None, None, "derived must be a mapping of name: {ratio|product|min|max: [a, b]}")
    for name, spec in raw_derived.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise _fail(label, None, None, f"derived fact {name!r} must be one of {sorted(DERIVATIONS)}: [a, b]")
        (how, args), = spec.items()
        if how not in DERIVATIONS:
            raise _fail(label, None, None, f"derived fact {name!r}: unknown operation {how!r}; "
                                           f"use one of {sorted(DERIVATIONS)}")
        if not isinstance(args, list) or len(args) != 2:
            raise _fail(label, None, None, f"derived fact {name!r}: {how} takes a list of two facts or numbers")
        for a in args:
            if isinstance(a, str) and fact_types.get(a) not in (int, float):
                raise _fail(label, None, None, f"derived fact {name!r}: {a!r} is not a known numeric fact")
            if not isinstance(a, (str, int, float)) or isinstance(a, bool):
                raise _fail(label, None, None, f"derived fact {name!r}: {a!r} is neither a fact nor a number")
        if name in fact_types:
            raise _fail(label, None, None, f"derived fact {name!r} would shadow an existing fact")
        derived[name] = (how, args)
        fact_types[name] = float
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise _fail(label, None, None, "rules must be a non-empty list")
    known_templates: dict[str, type] = {**fact_types, **dict.fromkeys(TEXT_FACTS, str)}
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rules):
        line = lines[index] if index < len(lines) else None
        rid = raw.get("id") if isinstance(raw, dict) else None

        def fail(message: str, line: int | None = line, who: str = str(rid) if rid else f"#{index + 1}") -> RulesError:
            return _fail(label, line, who, message)

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
        conditions = []
        for cond in raw["when"]:
            if not isinstance(cond, dict) or set(cond) != CONDITION_KEYS:
                raise fail(f"condition {cond!r} must have exactly the keys fact, op, value")
            fact, op, value = cond["fact"], cond["op"], cond["value"]
            if not isinstance(fact, str) or not isinstance(op, str):
                raise fail(f"condition {cond!r}: fact and op must be text")
            if fact not in fact_types:
                raise fail(f"condition on unknown fact {fact!r}; known: {', '.join(sorted(fact_types))}")
            if op not in OPERATORS:
                raise fail(f"unknown operator {op!r}; use one of: {' '.join(OPERATORS)}")
            numeric = fact_types[fact] in (int, float)
            if op in _NUMERIC_OPS and not numeric:
                raise fail(f"operator {op!r} needs a numeric fact; {fact!r} is {fact_types[fact].__name__}")
            if op == "between" and not (isinstance(value, list) and len(value) == 2
                                        and all(isinstance(v, (int, float)) for v in value)):
                raise fail(f"between needs [low, high], got {value!r}")
            if op == "in" and not isinstance(value, list):
                raise fail(f"in needs a list, got {value!r}")
            if op in ("<", "<=", ">", ">=") and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise fail(f"operator {op!r} needs a number, got {value!r}")
            conditions.append(Condition(fact, op, value))
        body = {k: v for k, v in raw.items() if k not in ("id", "when")}
        for key in ("encoding", "reason", "fallback", "why"):
            if not isinstance(body[key], str):
                raise fail(f"{key} must be text")
            _check_template(body[key], known_templates, fail, key)
        hyper = body.get("hyperparameters") or {}
        if not isinstance(hyper, dict):
            raise fail("hyperparameters must be a mapping")
        for k, v in hyper.items():
            if not isinstance(v, (str, int, float, bool)) or (isinstance(v, float) and not math.isfinite(v)):
                raise fail(f"hyperparameters.{k} must be a finite number, text or boolean, got {v!r}")
            _check_template(v, known_templates, fail, f"hyperparameters.{k}")
        ext = body.get("extension")
        if ext is not None:
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
                if fact_types.get(factor) not in (int, float):
                    raise fail(f"extension.factor {factor!r} is not a known numeric fact")
            elif isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1:
                raise fail(f"extension.factor must be a number >= 1 or a fact name, got {factor!r}")
            if not isinstance(ext.get("fine_tune", False), bool):
                raise fail("extension.fine_tune must be true or false")
            for k in ("tokens", "note"):
                _check_template(ext.get(k), known_templates, fail, f"extension.{k}")
        plan = body["test_plan"]
        if not isinstance(plan, list):
            raise fail("test_plan must be a list")
        for item in plan:
            if not isinstance(item, dict) or len(item) != 1:
                raise fail(f"test_plan item {item!r} must be one of {sorted(TEST_KINDS)}")
            (kind, spec), = item.items()
            if kind not in TEST_KINDS:
                raise fail(f"test_plan kind {kind!r} is not one of {sorted(TEST_KINDS)}")
            if kind == "text":
                _check_template(spec, known_templates, fail, "test_plan.text")
                continue
            if not isinstance(spec, dict) or set(spec) != TEST_KINDS[kind]:
                raise fail(f"test_plan {kind} needs exactly {sorted(TEST_KINDS[kind] or ())}")
            for key in ("length", "baseline"):
                if key in spec and (not isinstance(spec[key], str) or fact_types.get(spec[key]) not in (int, float)):
                    raise fail(f"test_plan {kind}.{key} {spec[key]!r} must name a numeric fact")
            if kind == "perplexity" and spec["length"] == spec["baseline"]:
                raise fail(f"test_plan perplexity compares {spec['length']} with itself; a short-context check is "
                           "`regression: {length, margin}` (the model with and without the change)")
            for key, high, allowed in (("pass_rate", 1.0, "from 0 to 1"), ("margin", float("inf"), ">= 0")):
                v = spec.get(key, 0)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= high:
                    raise fail(f"test_plan {kind}.{key} must be a number {allowed}, got {v!r}")
        rules.append(Rule(rid, line, tuple(conditions), body))
    if rules[-1].when:
        raise _fail(label, rules[-1].line, rules[-1].id, "the last rule must be a catch-all with `when: []`")
    for rule in rules[:-1]:
        if not rule.when:
            raise _fail(label, rule.line, rule.id, "only the last rule may be a catch-all; rules after it never run")
    # the numbers are checked after the rules, so a broken rule is reported first
    constants = _constants(data.get("constants"), label, key_lines.get("constants"))
    tables = _tables(data.get("tables"), label, key_lines.get("tables"))
    return RuleSet(label, 1, derived, rules, data, constants, tables)


def _constants(raw: Any, label: str, line: int | None) -> dict[str, Constant]:
    """``constants: {name: {value: N, source: "..."}}``: every name in :data:`CONSTANTS`, each with its source."""
    if not isinstance(raw, dict):
        raise _fail(label, line, None, f"constants must be a mapping with {sorted(CONSTANTS)}")
    out: dict[str, Constant] = {}
    for name, (low, high) in CONSTANTS.items():
        entry = raw.get(name)
        if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
            raise _fail(label, line, None, f"constants.{name} must be {{value: number, source: text}}")
        value, source = entry["value"], entry["source"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise _fail(label, line, None, f"constants.{name} = {value!r} must be a number from {low:g} to {high:g}")
        if not isinstance(source, str) or not source.strip():
            raise _fail(label, line, None, f"constants.{name} needs a source")
        out[name] = Constant(float(value), source)
    unknown = set(raw) - set(CONSTANTS)
    if unknown:
        raise _fail(label, line, None, f"unknown constant(s) {sorted(unknown)}; allowed: {sorted(CONSTANTS)}")
    if out["training_free_cap_asked"].value < out["training_free_cap"].value:
        raise _fail(label, line, None, "constants.training_free_cap_asked must not be below training_free_cap")
    if out["funded_final_jump"].value > out["training_free_cap"].value:
        raise _fail(label, line, None, "constants.funded_final_jump must not be above training_free_cap")
    return out


def _tables(raw: Any, label: str, line: int | None) -> dict[str, list[TableRow]]:
    """``tables: {theta_by_length: [{up_to: N or null, value: N, source: "..."}, ...]}``, rising, ending unbounded."""
    if not isinstance(raw, dict) or set(raw) != TABLES:
        raise _fail(label, line, None, f"tables must be a mapping with exactly {sorted(TABLES)}")
    out: dict[str, list[TableRow]] = {}
    for name, rows in raw.items():
        if not isinstance(rows, list) or not rows:
            raise _fail(label, line, None, f"tables.{name} must be a non-empty list of rows")
        parsed = []
        for row in rows:
            if not isinstance(row, dict) or set(row) != {"up_to", "value", "source"}:
                raise _fail(label, line, None, f"tables.{name}: each row is {{up_to, value, source}}, got {row!r}")
            up_to, value, source = row["up_to"], row["value"], row["source"]
            if up_to is not None and (isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 1):
                raise _fail(label, line, None, f"tables.{name}: up_to {up_to!r} must be a length or null")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1:
                raise _fail(label, line, None, f"tables.{name}: value {value!r} must be a number above 1")
            if not isinstance(source, str) or not source.strip():
                raise _fail(label, line, None, f"tables.{name}: every row needs a source")
            parsed.append(TableRow(up_to, float(value), source))
        bounded = [r.up_to for r in parsed[:-1] if r.up_to is not None]
        if parsed[-1].up_to is not None or len(bounded) != len(parsed) - 1 or bounded != sorted(bounded):
            raise _fail(label, line, None, f"tables.{name}: up_to must rise and the last row must be null")
        out[name] = parsed
    return out


def render(text: str, facts: Mapping[str, Any]) -> str:
    """Fill ``{fact}`` / ``{fact:spec}`` templates."""

    def one(match: re.Match[str]) -> str:
        value = facts[match.group(1)]
        spec = match.group(2)
        if spec == "len":
            return format_length(int(value))
        if spec == "tokens":
            return format_tokens(int(value))
        if spec:
            return format(value, spec)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    return _TEMPLATE.sub(one, text)


@dataclass
class Trace:
    """One line of ``--explain``: a rule, each condition's outcome, and a guard veto if any."""

    rule: str
    conditions: list[tuple[str, bool]]
    matched: bool
    vetoed_by: str | None = None


def _is_absolute(encoding: str) -> bool:
    e = encoding.lower()
    return "sinusoid" in e or "learned" in e or "absolute" in e


def guard_absolute_for_new(rule: Rule, facts: Mapping[str, Any], factor: float | None) -> bool:
    """Never sinusoidal or learned absolute positions for a new model (they do not extrapolate)."""
    return not facts["existing"] and _is_absolute(rule.body["encoding"])


def guard_scaling_without_finetune(rule: Rule, facts: Mapping[str, Any], factor: float | None) -> bool:
    """Never RoPE scaling above 8x without a fine-tuning stage (PI, YaRN and LongRoPE all fine-tune past it)."""
    ext = rule.body.get("extension")
    if ext is None or factor is None or factor <= 8:
        return False
    return not ext.get("fine_tune", False) or facts["budget"] <= 0


def guard_niah(rule: Rule, facts: Mapping[str, Any], factor: float | None) -> bool:
    """Never a long-context answer without a needle-in-a-haystack test at the length it deploys (the target, or
    the cap the answer sets)."""
    long_context = facts["ctx"] >= LONG_CONTEXT or rule.body.get("extension") is not None
    if not long_context:
        return False
    # a capped answer deploys at its cap: a training-free jump, ALiBi's 2x, or the window the model already has
    deployed = {"ctx", "capped_ctx", "double_ctx", "window_ctx"}
    return not any("niah" in item and item["niah"]["length"] in deployed for item in rule.body["test_plan"])


def guard_regression(rule: Rule, facts: Mapping[str, Any], factor: float | None) -> bool:
    """Never a change to positions without a short-context regression check (static scaling costs short prompts)."""
    if rule.body.get("extension") is None:
        return False
    return not any("regression" in item for item in rule.body["test_plan"])


GUARDS: dict[str, Callable[[Rule, Mapping[str, Any], float | None], bool]] = {
    "no-absolute-positions-for-new-models": guard_absolute_for_new,
    "no-scaling-above-8x-without-fine-tuning": guard_scaling_without_finetune,
    "niah-at-full-deployed-length": guard_niah,
    "short-context-regression-check": guard_regression,
}


def extension_factor(rule: Rule, facts: Mapping[str, Any]) -> float | None:
    ext = rule.body.get("extension")
    if ext is None:
        return None
    factor = ext.get("factor", 1)
    return float(facts[factor]) if isinstance(factor, str) else float(factor)


def decide(rules: RuleSet, facts: Mapping[str, Any]) -> tuple[Rule, list[Trace]]:
    """First rule whose conditions all hold and that no guard vetoes; plus the trace of every rule tried."""
    traces: list[Trace] = []
    chosen: Rule | None = None
    for rule in rules.rules:
        outcomes = [(c.text(), c.holds(facts)) for c in rule.when]
        matched = all(ok for _, ok in outcomes)
        trace = Trace(rule.id, outcomes, matched)
        traces.append(trace)
        if not matched or chosen is not None:
            continue
        factor = extension_factor(rule, facts)
        veto = next((name for name, guard in GUARDS.items() if guard(rule, facts, factor)), None)
        if veto:
            trace.vetoed_by = veto
            continue
        chosen = rule
    if chosen is None:
        raise RulesError(f"{rules.source}: every matching rule was vetoed by a hard guard, including the catch-all; "
                         "fix the rules file")
    return chosen, traces
