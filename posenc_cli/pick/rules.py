"""The decision-rule engine behind ``posenc pick`` (stdlib + PyYAML; no numpy): loading a rules file, filling its
templates, the hard guards, and the first-match decision.

A rules file is data, read with PyYAML's safe loader (``yaml.safe_load`` semantics, libyaml when available) and
checked strictly by :mod:`posenc_cli.pick.rules_schema` (unknown keys, facts, operators and template names are
errors). Schema, in short
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

import json
import os
import re
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from posenc_cli.errors import PosencError
from posenc_cli.files import atomic_write_text, read_text
from posenc_cli.pick.rules_schema import TEMPLATE, Rule, RulesError, RuleSet, check_rules, located
from posenc_cli.units import format_length, format_tokens

LONG_CONTEXT = 32768  # from here on a recommendation counts as long-context for the NIAH guard


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
    cache = _cache_file(text)
    parsed = _read_cache(cache, text)
    if parsed is None:
        try:
            data, root = _safe_load_with_node(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise located(label, mark.line + 1 if mark is not None else None, None, f"YAML error: {problem}") from None
        keys, lines = _node_lines(root)
        snapshot = _snapshot(text, data, keys, lines)  # before the schema sees the data
        ruleset = check_rules(data, label, keys, lines)
        _write_cache(cache, snapshot)
        return ruleset
    return check_rules(parsed[0], label, parsed[1], parsed[2])


# --- the parse cache ------------------------------------------------------------------------------------------------
# PyYAML builds the shipped policy (33 kB) in about 5 ms, a fifth of what `posenc pick` adds to `import typer, yaml`;
# the same data read back from JSON takes 0.2 ms. A file that parsed and passed the schema once is kept as JSON under
# the user's cache folder with its whole text and PyYAML's version, and is used only for that exact text and version
# (the file name, a CRC of the text, only finds it: no hash library to load); the schema check still runs every time.
# Data that JSON cannot carry exactly (keys other than strings, NaN) is never cached; a cache that cannot be read or
# written is skipped silently: it is only ever a shortcut to what the YAML says.
_CACHE_FORMAT = 2
_Parsed = tuple[Any, dict[Any, int], list[int | None]]


def _cache_file(text: str) -> Path | None:
    """Where the parse of ``text`` is kept: ``$POSENC_CACHE_DIR`` (or ``$XDG_CACHE_HOME/posenc``, else
    ``~/.cache/posenc``) ``/rules/CRC-LENGTH.json``; None when ``POSENC_CACHE_DIR`` is set empty (no cache)."""
    root = os.environ.get("POSENC_CACHE_DIR")
    if root is None:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "posenc")
    if not root:
        return None
    data = text.encode()
    return Path(root, "rules", f"{zlib.crc32(data):08x}-{len(data)}.json")


def _read_cache(path: Path | None, text: str) -> _Parsed | None:
    if path is None:
        return None
    try:
        stamp, data, keys, lines = json.loads(path.read_bytes())
    except (OSError, ValueError, TypeError):
        return None
    if stamp != [_CACHE_FORMAT, yaml.__version__, text] or not isinstance(keys, dict) or not isinstance(lines, list):
        return None
    return data, keys, lines


def _snapshot(text: str, data: Any, keys: dict[Any, int], lines: list[int | None]) -> str | None:
    """The parse as JSON text, or None where JSON would not give back the same data (non-string keys, NaN)."""
    entry = [[_CACHE_FORMAT, yaml.__version__, text], data, keys, lines]
    try:
        dumped = json.dumps(entry, allow_nan=False)
    except (ValueError, TypeError):
        return None
    return dumped if json.loads(dumped) == entry else None


def _write_cache(path: Path | None, snapshot: str | None) -> None:
    if path is None or snapshot is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, snapshot)
    except (OSError, PosencError):
        return


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

    return TEMPLATE.sub(one, text)


class Trace(NamedTuple):
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
        veto = None
        if matched and chosen is None:
            factor = extension_factor(rule, facts)
            veto = next((name for name, guard in GUARDS.items() if guard(rule, facts, factor)), None)
            if veto is None:
                chosen = rule
        traces.append(Trace(rule.id, outcomes, matched, veto))
    if chosen is None:
        raise RulesError(f"{rules.source}: every matching rule was vetoed by a hard guard, including the catch-all; "
                         "fix the rules file")
    return chosen, traces
