"""The decision-rule engine behind `posenc pick`: strict validation of rules files, the operators, derived facts,
first-match-wins and the three hard guards that veto answers whatever the file says.

Rules files are written here as YAML text (parse_rules) or as files in tmp_path (load_rules, the CLI).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from clihelpers import assert_usage_error, run, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.pick.picker import PickInputs, pick
from posenc_cli.pick.rules import GUARDS, load_rules, parse_rules
from posenc_cli.pick.rules_schema import RulesError

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
SCHEMA = json.loads((RULES_DIR / "schema.json").read_text(encoding="utf-8"))
SHIPPED = sorted(RULES_DIR.glob("*.yaml"))

# A small valid file. Line numbers matter below: rule 'first' starts on line 5, rule 'last' on line 14.
VALID = """\
version: 1
derived:
  scale: {ratio: [ctx, trained_ctx]}
rules:
  - id: first
    when:
      - {fact: ctx, op: "<=", value: 8192}
    encoding: RoPE
    reason: short {ctx:len}
    test_plan:
      - text: loss flat to {ctx:len}
    fallback: nothing to do
    why: because
  - id: last
    when: []
    encoding: RoPE
    reason: the default
    test_plan:
      - niah: {length: ctx, pass_rate: 0.9}
    fallback: cap the context
    why: catch-all
""" + """\
constants:
  training_free_cap: {value: 4, source: a}
  training_free_cap_asked: {value: 8, source: b}
  stage_ratio: {value: 4, source: c}
  stage_tokens_min: {value: 500000000, source: d}
  stage_tokens: {value: 5000000000, source: e}
  abf_budget: {value: 100000000000, source: f}
  funded_final_jump: {value: 1, source: i}
  ruler_threshold: {value: 85.6, source: j}
  nolima_ratio: {value: 0.85, source: k}
tables:
  theta_by_length:
    - {up_to: 8192, value: 500000, source: g}
    - {up_to: null, value: 1000000, source: h}
"""
FIRST_LINE, LAST_LINE = 5, 14


def edit(old: str, new: str, text: str = VALID) -> str:
    """VALID with one exact edit (fails loudly if `old` is not there, so no case silently tests the valid file)."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


# ---------------------------------------------------------------- shipped rules


def test_the_valid_fixture_is_valid() -> None:
    ruleset = parse_rules(VALID, "valid.yaml")
    assert [r.id for r in ruleset.rules] == ["first", "last"]
    assert [r.line for r in ruleset.rules] == [FIRST_LINE, LAST_LINE]


def test_rules_dir_is_globbed() -> None:
    assert RULES_DIR / "default.yaml" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_rules_file_validates(path: Path) -> None:
    ruleset = load_rules(path)
    assert ruleset.rules[-1].when == ()
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.validate(data, SCHEMA)
    result = run("rules", "validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ok: {path}")


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_default_rules_are_what_pick_loads_by_default() -> None:
    assert [r.id for r in load_rules().rules] == [r.id for r in load_rules(RULES_DIR / "default.yaml").rules]


def test_schema_and_engine_agree_on_the_operator_table() -> None:
    from posenc_cli.pick.rules_schema import EXTENSION_METHODS, OPERATORS

    assert SCHEMA["$defs"]["condition"]["properties"]["op"]["enum"] == list(OPERATORS)
    assert SCHEMA["$defs"]["extension"]["properties"]["method"]["enum"] == list(EXTENSION_METHODS)


# ---------------------------------------------------------------- broken files: one clear error each

# (case id, file text, rule id named or None, line or None, fragment of what is wrong)
BROKEN: list[tuple[str, str, str | None, int | None, str]] = [
    ("yaml-syntax", edit("    reason: short {ctx:len}\n", "    reason: short: {ctx:len}\n"), None, 9,
     "mapping values are not allowed"),
    ("unknown-top-level-key", VALID + "priority: 3\n", None, 36, "priority"),
    ("unknown-rule-key", edit("    encoding: RoPE\n    reason: short", "    encodnig: RoPE\n    reason: short"),
     "first", FIRST_LINE, "encodnig"),
    ("unknown-fact", edit("{fact: ctx, op:", "{fact: context, op:"), "first", FIRST_LINE, "'context'"),
    ("unknown-operator", edit('op: "<="', 'op: "=~"'), "first", FIRST_LINE, "'=~'"),
    ("duplicate-id", edit("  - id: last\n", "  - id: first\n"), "first", LAST_LINE, "duplicate id"),
    ("missing-catch-all", edit("    when: []\n", '    when: [{fact: ctx, op: ">", value: 8192}]\n'), "last",
     LAST_LINE, "catch-all"),
    ("catch-all-not-last", edit('    when:\n      - {fact: ctx, op: "<=", value: 8192}\n', "    when: []\n"),
     "first", FIRST_LINE, "only the last rule may be a catch-all"),
    ("template-unknown-fact", edit("reason: short {ctx:len}", "reason: short {nope}"), "first", FIRST_LINE,
     "{nope}"),
    ("template-bad-spec", edit("reason: short {ctx:len}", "reason: short {ctx:!r}"), "first", FIRST_LINE, "'!r'"),
    ("template-number-format-on-text", edit("reason: short {ctx:len}", "reason: short {extrapolation:.3g}"),
     "first", FIRST_LINE, "{extrapolation:.3g}"),
    ("non-numeric-less-than", edit("value: 8192}", "value: big}"), "first", FIRST_LINE, "'big'"),
    ("between-not-a-pair", edit('op: "<=", value: 8192', "op: between, value: [8192]"), "first", FIRST_LINE,
     "between needs [low, high]"),
    ("between-scalar", edit('op: "<=", value: 8192', "op: between, value: 8192"), "first", FIRST_LINE,
     "between needs [low, high]"),
    ("numeric-op-on-text-fact", edit('{fact: ctx, op: "<="', '{fact: extrapolation, op: "<="'), "first",
     FIRST_LINE, "needs a numeric fact"),
    ("extension-method-unknown", edit("    fallback: nothing", "    extension: {method: magic, factor: 2}\n"
                                                             "    fallback: nothing"),
     "first", FIRST_LINE, "'magic'"),
    ("extension-method-longrope", edit("    fallback: nothing", "    extension: {method: longrope, factor: 2}\n"
                                                              "    fallback: nothing"),
     "first", FIRST_LINE, "longrope"),
    ("extension-factor-unknown-fact", edit("    fallback: nothing", "    extension: {method: yarn, factor: nope}\n"
                                                                  "    fallback: nothing"),
     "first", FIRST_LINE, "'nope'"),
    ("extension-factor-below-one", edit("    fallback: nothing", "    extension: {method: yarn, factor: 0.5}\n"
                                                                  "    fallback: nothing"),
     "first", FIRST_LINE, "0.5"),
    ("test-plan-kind-unknown", edit("      - text: loss flat", "      - bleu: {length: ctx}\n      - text: loss flat"),
     "first", FIRST_LINE, "'bleu'"),
    ("test-plan-length-not-a-fact", edit("{length: ctx, pass_rate: 0.9}", "{length: extrapolation, pass_rate: 0.9}"),
     "last", LAST_LINE, "'extrapolation'"),
    ("test-plan-pass-rate-not-a-number", edit("pass_rate: 0.9}", "pass_rate: high}"), "last", LAST_LINE,
     "'high'"),
    ("test-plan-pass-rate-above-one", edit("pass_rate: 0.9}", "pass_rate: 90}"), "last", LAST_LINE, "90"),
    ("hyperparameter-not-finite", edit("    fallback: nothing",
                                       "    hyperparameters: {theta: .nan}\n    fallback: nothing"),
     "first", FIRST_LINE, "nan"),
    ("version-2", edit("version: 1\n", "version: 2\n"), None, 1, "version must be 1, got 2"),
    ("derived-unknown-operation", edit("{ratio: [ctx, trained_ctx]}", "{quotient: [ctx, trained_ctx]}"), None, None,
     "'quotient'"),
    ("derived-not-a-mapping", edit("derived:\n  scale: {ratio: [ctx, trained_ctx]}\n", "derived: [scale]\n"), None,
     None, "derived must be a mapping"),
    ("condition-fact-not-text", edit("{fact: ctx, op:", "{fact: [ctx], op:"), "first", FIRST_LINE,
     "must be text"),
    ("the-file-is-a-list", "- id: a\n- id: b\n", None, None, "must be a mapping"),
    ("empty-file", "", None, None, "must be a mapping"),
    ("python-tag", '!!python/object/apply:os.system ["echo hi"]\n', None, 1, "YAML error"),
]


@pytest.mark.parametrize(("text", "rule", "line", "fragment"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_rules_text_is_one_clear_error(text: str, rule: str | None, line: int | None, fragment: str) -> None:
    with pytest.raises(RulesError) as info:
        parse_rules(text, "broken.yaml")
    message = str(info.value)
    assert "\n" not in message
    where = f"broken.yaml:{line}:" if line else "broken.yaml:"
    assert message.startswith(where), message
    if rule is not None:
        assert f"rule {rule!r}:" in message, message
    assert fragment in message, message


@pytest.mark.parametrize(("text", "rule", "line", "fragment"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_rules_file_through_the_cli(tmp_path: Path, text: str, rule: str | None, line: int | None,
                                          fragment: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    line_text = assert_usage_error(run("rules", "validate", str(path)))
    assert f"{path}:{line}:" in line_text if line else str(path) in line_text
    if rule is not None:
        assert f"rule {rule!r}" in line_text
    assert fragment in line_text
    # pick with the broken file: the same error, nothing on stdout
    assert assert_usage_error(run("pick", "--ctx", "4k", "--rules", str(path))) == line_text
    assert assert_usage_error(run("rules", "show", "--rules", str(path))) == line_text


def test_yaml_syntax_error_names_the_line_yaml_reports() -> None:
    text = "version: 1\nrules:\n  - id: a\n    when: [\n"  # flow sequence never closed
    with pytest.raises(RulesError, match=r"^x\.yaml:\d+: YAML error"):
        parse_rules(text, "x.yaml")


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)],
                         ids=["python", "libyaml"])
def test_both_safe_loaders_give_the_same_lines_and_errors(monkeypatch: pytest.MonkeyPatch, loader: Any) -> None:
    """posenc uses libyaml when PyYAML has it; the pure-Python loader must behave the same."""
    monkeypatch.setattr("posenc_cli.pick.rules.SAFE_LOADER", loader)
    assert [r.line for r in parse_rules(VALID).rules] == [FIRST_LINE, LAST_LINE]
    for case, text, _rule, line, fragment in BROKEN:
        if case in ("yaml-syntax", "python-tag", "unknown-top-level-key", "duplicate-id"):
            with pytest.raises(RulesError) as info:
                parse_rules(text, "b.yaml")
            assert str(info.value).startswith(f"b.yaml:{line}:") and fragment in str(info.value), (case, info.value)
    with pytest.raises(RulesError, match="could not determine a constructor"):
        parse_rules('!!python/object/apply:os.system ["echo hi"]\n', "b.yaml")


def test_python_tag_is_rejected_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.yaml"
    path.write_text(f'version: !!python/object/apply:os.system ["touch {marker}"]\n' + VALID.split("\n", 1)[1],
                    encoding="utf-8")
    line = assert_usage_error(run("rules", "validate", str(path)))
    assert "YAML error" in line and f"{path}:1:" in line
    assert_usage_error(run("pick", "--ctx", "4k", "--rules", str(path)))
    assert not marker.exists()


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(RulesError, match="no such rules file"):
        load_rules(path)
    line = assert_usage_error(run("rules", "validate", str(path)))
    assert str(path) in line and "no such rules file" in line
    assert assert_usage_error(run("pick", "--ctx", "128k", "--rules", str(path))) == line


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="is a directory"):
        load_rules(tmp_path)
    line = assert_usage_error(run("rules", "validate", str(tmp_path)))
    assert str(tmp_path) in line and "directory" in line
    assert_usage_error(run("pick", "--ctx", "128k", "--rules", str(tmp_path)))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(VALID.replace("because", "caf\xe9").encode("latin-1"))
    line = assert_usage_error(run("rules", "validate", str(path)))
    assert str(path) in line


# ---------------------------------------------------------------- robustness: any junk is a RulesError, never a crash

_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**10) | st.floats(allow_nan=True)
    | st.sampled_from(["ctx", "scale", "{ctx}", "{nope}", "{ctx:len}", "{model_encoding:len}", "yarn", "==", "in",
                       "between", "niah", "text", "longrope", "", "x"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["fact", "op", "value", "method", "factor", "length", "pass_rate", "margin", "niah", "text",
                         "ratio", "min", "a"]), children, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


DEFAULT_DATA = yaml.safe_load((RULES_DIR / "default.yaml").read_text(encoding="utf-8"))
DEFAULT_PATHS = [p for p in _paths(DEFAULT_DATA) if p]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(DEFAULT_PATHS), junk=_JUNK, ctx=st.sampled_from([4096, 131072, 1 << 20]),
       budget=st.sampled_from([0, 2 * 10**9]))
def test_mutated_default_rules_fail_cleanly(where: tuple[Any, ...], junk: Any, ctx: int, budget: int) -> None:
    """Replace any one value of the shipped file with junk: validation and pick raise PosencError or succeed."""
    data = json.loads(json.dumps(DEFAULT_DATA))
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = junk
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        ruleset = parse_rules(text, "mutated.yaml")
    except RulesError as exc:
        assert str(exc).startswith("mutated.yaml:")
        return
    assert ruleset.rules
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mutated.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            answer = pick(PickInputs(ctx=ctx, trained_ctx=4096, budget=budget, rules=str(path))).answer
        except PosencError:
            return
        json.dumps(answer, allow_nan=False)


# ---------------------------------------------------------------- semantics


def tiny(rules: list[dict[str, Any]], derived: dict[str, Any] | None = None) -> str:
    """A rules file: the given rules (short bodies filled in) plus a catch-all 'fallthrough'."""
    body = {"encoding": "RoPE", "reason": "r", "test_plan": [{"niah": {"length": "ctx", "pass_rate": 0.9}},
                                                             {"regression": {"length": "trained_ctx", "margin": 0.02}}],
            "fallback": "f", "why": "w"}
    full = [{**body, **r} for r in rules] + [{**body, "id": "fallthrough", "when": []}]
    doc: dict[str, Any] = {"version": 1, "rules": full}
    if derived is not None:
        doc["derived"] = derived
    numbers = yaml.safe_load(VALID)
    doc["constants"], doc["tables"] = numbers["constants"], numbers["tables"]
    return yaml.safe_dump(doc, sort_keys=False)


def decide_id(text: str, tmp_path: Path, **inputs: Any) -> dict[str, Any]:
    path = tmp_path / "tiny.yaml"
    path.write_text(text, encoding="utf-8")
    return pick(PickInputs(rules=str(path), **inputs)).answer


def test_first_match_wins(tmp_path: Path) -> None:
    text = tiny([
        {"id": "small", "when": [{"fact": "ctx", "op": "<=", "value": 4096}]},
        {"id": "also-small", "when": [{"fact": "ctx", "op": "<=", "value": 8192}]},
    ])
    assert decide_id(text, tmp_path, ctx=4096)["rule"] == "small"
    assert decide_id(text, tmp_path, ctx=8192)["rule"] == "also-small"
    assert decide_id(text, tmp_path, ctx=16384)["rule"] == "fallthrough"


def test_all_conditions_must_hold(tmp_path: Path) -> None:
    text = tiny([{"id": "both", "when": [{"fact": "ctx", "op": ">=", "value": 8192},
                                          {"fact": "budget", "op": ">", "value": 0}]}])
    assert decide_id(text, tmp_path, ctx=8192, budget=1)["rule"] == "both"
    assert decide_id(text, tmp_path, ctx=8192, budget=0)["rule"] == "fallthrough"
    assert decide_id(text, tmp_path, ctx=4096, budget=1)["rule"] == "fallthrough"


# (op, value, ctx values where it holds, ctx values where it does not)
OPERATOR_CASES = [
    ("==", 8192, [8192], [8191, 8193]),
    ("!=", 8192, [8191, 8193], [8192]),
    ("<", 8192, [8191], [8192, 8193]),
    ("<=", 8192, [8191, 8192], [8193]),
    (">", 8192, [8193], [8191, 8192]),
    (">=", 8192, [8192, 8193], [8191]),
    ("in", [4096, 8192], [4096, 8192], [6144, 16384]),
    ("between", [4096, 8192], [4096, 6000, 8192], [4095, 8193]),
]


@pytest.mark.parametrize(("op", "value", "hold", "fail"), OPERATOR_CASES, ids=[c[0] for c in OPERATOR_CASES])
def test_operators(tmp_path: Path, op: str, value: Any, hold: list[int], fail: list[int]) -> None:
    text = tiny([{"id": "hit", "when": [{"fact": "ctx", "op": op, "value": value}]}])
    for ctx in hold:
        assert decide_id(text, tmp_path, ctx=ctx)["rule"] == "hit", (op, ctx)
    for ctx in fail:
        assert decide_id(text, tmp_path, ctx=ctx)["rule"] == "fallthrough", (op, ctx)


def test_text_facts_compare_with_equality_and_in(tmp_path: Path) -> None:
    text = tiny([
        {"id": "strong", "when": [{"fact": "extrapolation", "op": "==", "value": "strong"}]},
        {"id": "some", "when": [{"fact": "extrapolation", "op": "in", "value": ["moderate"]}]},
        {"id": "new", "when": [{"fact": "existing", "op": "==", "value": False}]},
    ])
    assert decide_id(text, tmp_path, ctx=4096, extrapolation="strong")["rule"] == "strong"
    assert decide_id(text, tmp_path, ctx=4096, extrapolation="moderate")["rule"] == "some"
    assert decide_id(text, tmp_path, ctx=4096, extrapolation="none")["rule"] == "new"


def test_derived_facts_are_computed_in_order(tmp_path: Path) -> None:
    derived = {
        "scale": {"ratio": ["ctx", "trained_ctx"]},  # 131072 / 8192 = 16
        "capped": {"min": ["scale", 8]},  # 8
        "floor2": {"max": ["capped", 2]},  # 8
        "reach": {"product": ["trained_ctx", "capped"]},  # 65536
    }
    text = tiny([{"id": "check", "reason": "{scale:g} {capped:g} {floor2:g} {reach:len}",
                  "when": [{"fact": "scale", "op": "==", "value": 16}, {"fact": "capped", "op": "==", "value": 8},
                           {"fact": "floor2", "op": "==", "value": 8},
                           {"fact": "reach", "op": "==", "value": 65536}]}], derived)
    answer = decide_id(text, tmp_path, ctx=131072, trained_ctx=8192)
    assert answer["rule"] == "check"
    assert answer["reason"] == "16 8 8 64k"
    # a smaller scale flows through every later fact: 2 -> capped 2 -> floor2 2 -> reach 16384
    text2 = tiny([{"id": "r", "when": [{"fact": "ctx", "op": ">", "value": 0}],
                   "reason": "{scale:g} {capped:g} {floor2:g} {reach}"}], derived)
    assert decide_id(text2, tmp_path, ctx=16384, trained_ctx=8192)["reason"] == "2 2 2 16384"
    # and max() takes over below its floor: scale 0.5 -> capped 0.5 -> floor2 2
    assert decide_id(text2, tmp_path, ctx=4096, trained_ctx=8192)["reason"] == "0.5 0.5 2 4096"


def test_derived_fact_may_not_use_a_later_one() -> None:
    text = tiny([], {"capped": {"min": ["scale", 8]}, "scale": {"ratio": ["ctx", "trained_ctx"]}})
    with pytest.raises(RulesError, match="'scale' is not a known numeric fact"):
        parse_rules(text)


def test_derived_fact_may_not_shadow_an_input() -> None:
    with pytest.raises(RulesError, match="shadow"):
        parse_rules(tiny([], {"ctx": {"ratio": ["ctx", 2]}}))


def test_ratio_by_zero_is_a_rules_error(tmp_path: Path) -> None:
    text = tiny([], {"per_token": {"ratio": ["ctx", "budget"]}})
    with pytest.raises(RulesError, match="divides by zero"):
        decide_id(text, tmp_path, ctx=4096, budget=0)
    assert decide_id(text, tmp_path, ctx=4096, budget=10)["rule"] == "fallthrough"


def test_templates_render_len_tokens_and_number_formats(tmp_path: Path) -> None:
    text = tiny([{"id": "t", "when": [{"fact": "ctx", "op": ">", "value": 0}],
                  "reason": "{ctx:len} {ctx} {budget:tokens} {theta:.3g} {extrapolation} {heads}"}])
    answer = decide_id(text, tmp_path, ctx=131072, budget=2 * 10**9, theta=500000.0, extrapolation="moderate",
                       heads=12)
    assert answer["reason"] == "128k 131072 2B 5e+05 moderate 12"


# ---------------------------------------------------------------- hard guards


NEW_MODEL_SINUSOIDAL = [{"id": "sinusoidal-for-new", "when": [{"fact": "existing", "op": "==", "value": False}],
                         "encoding": "sinusoidal"}]


def test_guard_names() -> None:
    assert list(GUARDS) == ["no-absolute-positions-for-new-models", "no-scaling-above-8x-without-fine-tuning",
                            "niah-at-full-deployed-length", "short-context-regression-check"]


def test_guard_short_context_regression(tmp_path: Path) -> None:
    """A change to positions needs a check that short prompts did not get worse."""
    no_check = [{"id": "yarn-no-regression", "when": [{"fact": "scale", "op": ">", "value": 1}],
                 "extension": {"method": "yarn", "factor": "scale", "fine_tune": False},
                 "test_plan": [{"niah": {"length": "ctx", "pass_rate": 0.9}}]}]
    text = tiny(no_check, {"scale": {"ratio": ["ctx", "trained_ctx"]}})
    answer = decide_id(text, tmp_path, ctx=16384, config=_rope_config(tmp_path, 4096))
    assert answer["vetoed"] == [{"rule": "yarn-no-regression", "guard": "short-context-regression-check"}]


def test_perplexity_of_a_length_against_itself_is_refused() -> None:
    bad = edit("      - niah: {length: ctx, pass_rate: 0.9}",
               "      - perplexity: {length: ctx, baseline: ctx, margin: 0.02}")
    with pytest.raises(RulesError, match="compares ctx with itself"):
        parse_rules(bad, "r.yaml")


@pytest.mark.parametrize("encoding", ["sinusoidal", "Sinusoidal (Vaswani)", "learned absolute positions"])
def test_guard_no_absolute_positions_for_new_models(tmp_path: Path, encoding: str) -> None:
    rules = [{**NEW_MODEL_SINUSOIDAL[0], "encoding": encoding}]
    answer = decide_id(tiny(rules), tmp_path, ctx=4096)
    assert answer["rule"] == "fallthrough"
    assert answer["vetoed"] == [{"rule": "sinusoidal-for-new", "guard": "no-absolute-positions-for-new-models"}]


def test_guard_absolute_positions_allowed_for_existing_model(tmp_path: Path) -> None:
    """Keeping an existing GPT-2's learned table is not a new-model recommendation."""
    config = write_json(tmp_path, {"model_type": "gpt2", "n_positions": 1024, "n_embd": 768, "n_head": 12}, "gpt2.json")
    rules = [{"id": "keep-learned", "when": [{"fact": "existing", "op": "==", "value": True}],
              "encoding": "learned absolute positions"}]
    answer = decide_id(tiny(rules), tmp_path, ctx=1024, config=config)
    assert answer["rule"] == "keep-learned" and answer["vetoed"] == []


def _rope_config(tmp_path: Path, max_pos: int) -> str:
    return write_json(tmp_path, {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                                 "max_position_embeddings": max_pos, "rope_theta": 10000.0})


def test_guard_no_scaling_above_8x_without_fine_tuning(tmp_path: Path) -> None:
    rules = [{"id": "yarn-untuned", "when": [{"fact": "scale", "op": ">", "value": 1}],
              "extension": {"method": "yarn", "factor": "scale", "fine_tune": False}}]
    text = tiny(rules, {"scale": {"ratio": ["ctx", "trained_ctx"]}})
    config = _rope_config(tmp_path, 4096)
    answer = decide_id(text, tmp_path, ctx=131072, config=config)  # scale 32
    assert answer["rule"] == "fallthrough"
    assert answer["vetoed"] == [{"rule": "yarn-untuned", "guard": "no-scaling-above-8x-without-fine-tuning"}]
    # exactly 8x is allowed without fine-tuning
    answer8 = decide_id(text, tmp_path, ctx=32768, config=config)
    assert answer8["rule"] == "yarn-untuned" and answer8["vetoed"] == []
    assert answer8["extension"]["factor"] == 8


def test_guard_scaling_above_8x_needs_a_budget_too(tmp_path: Path) -> None:
    rules = [{"id": "yarn-tuned", "when": [{"fact": "scale", "op": ">", "value": 1}],
              "extension": {"method": "yarn", "factor": "scale", "fine_tune": True}}]
    text = tiny(rules, {"scale": {"ratio": ["ctx", "trained_ctx"]}})
    config = _rope_config(tmp_path, 4096)
    vetoed = decide_id(text, tmp_path, ctx=131072, config=config, budget=0)
    assert vetoed["vetoed"] == [{"rule": "yarn-tuned", "guard": "no-scaling-above-8x-without-fine-tuning"}]
    funded = decide_id(text, tmp_path, ctx=131072, config=config, budget=2 * 10**9)
    assert funded["rule"] == "yarn-tuned" and funded["extension"]["factor"] == 32


def test_guard_niah_at_full_deployed_length(tmp_path: Path) -> None:
    no_niah = [{"id": "long-no-niah", "when": [{"fact": "ctx", "op": ">=", "value": 32768}],
                "test_plan": [{"text": "looks fine"}]}]
    answer = decide_id(tiny(no_niah), tmp_path, ctx=32768)
    assert answer["rule"] == "fallthrough"
    assert answer["vetoed"] == [{"rule": "long-no-niah", "guard": "niah-at-full-deployed-length"}]
    # a needle test at a shorter length does not count
    short_niah = [{"id": "long-short-niah", "when": [{"fact": "ctx", "op": ">=", "value": 32768}],
                   "test_plan": [{"niah": {"length": "trained_ctx", "pass_rate": 0.9}}]}]
    answer = decide_id(tiny(short_niah), tmp_path, ctx=131072, trained_ctx=4096)
    assert answer["vetoed"] == [{"rule": "long-short-niah", "guard": "niah-at-full-deployed-length"}]
    # below 32k without an extension a plan without a needle test is fine
    short = [{"id": "short", "when": [{"fact": "ctx", "op": "<", "value": 32768}], "test_plan": [{"text": "ok"}]}]
    assert decide_id(tiny(short), tmp_path, ctx=4096)["rule"] == "short"
    # ...but any extension counts as long-context, whatever the length
    short_ext = [{**short[0], "extension": {"method": "dynamic", "factor": 2}}]
    vetoed = decide_id(tiny(short_ext), tmp_path, ctx=4096)
    assert vetoed["vetoed"] == [{"rule": "short", "guard": "niah-at-full-deployed-length"}]


def test_guards_apply_in_trace(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(tiny(NEW_MODEL_SINUSOIDAL), encoding="utf-8")
    result = pick(PickInputs(ctx=4096, rules=str(path)))
    assert [(t.rule, t.matched, t.vetoed_by) for t in result.traces] == [
        ("sinusoidal-for-new", True, "no-absolute-positions-for-new-models"), ("fallthrough", True, None)]


def test_every_rule_vetoed_is_a_rules_error(tmp_path: Path) -> None:
    body = {"encoding": "sinusoidal", "reason": "r", "test_plan": [{"text": "t"}], "fallback": "f", "why": "w"}
    text = yaml.safe_dump({"version": 1, "rules": [{**body, "id": "a", "when": [
        {"fact": "ctx", "op": ">", "value": 0}]}, {**body, "id": "b", "when": []}]})
    path = tmp_path / "all-vetoed.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RulesError, match="vetoed"):
        pick(PickInputs(ctx=4096, rules=str(path)))
    line = assert_usage_error(run("pick", "--ctx", "4k", "--rules", str(path)))
    assert str(path) in line and "vetoed" in line


def test_shipped_rules_never_need_a_veto_for_new_models_at_common_lengths() -> None:
    """The default policy recommends no absolute encoding for a new model at any of these lengths."""
    for ctx in (1024, 4096, 8192, 32768, 131072, 1 << 20):
        for extrapolation in ("none", "moderate", "strong"):
            answer = pick(PickInputs(ctx=ctx, extrapolation=extrapolation)).answer
            assert not re.search(r"sinusoid|learned|absolute", answer["encoding"], re.I), answer
            assert not any(v["guard"] == "no-absolute-positions-for-new-models" for v in answer["vetoed"])
            if ctx >= 32768:
                assert any(f"{ctx:,} tokens" in t for t in answer["test_plan"]), answer["test_plan"]
            assert math.isfinite(float(answer["inputs"]["ctx"]))


def test_the_rules_format_page_lists_every_fact_a_rule_can_use() -> None:
    from posenc_cli.pick.rules_schema import INPUT_FACTS, TEXT_FACTS

    page = (Path(__file__).resolve().parents[2] / "docs" / "rules-format.md").read_text()
    facts = page[page.index("Facts: `ctx`"):page.index("plus the derived ones")]
    assert set(re.findall(r"`(\w+)`", facts)) >= set(INPUT_FACTS) | TEXT_FACTS


def test_keep_on_a_rope_type_posenc_cannot_keep_is_one_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "keep.yaml"
    path.write_text(tiny([{"id": "keep-anything", "when": [{"fact": "scale", "op": ">", "value": 1}],
                           "extension": {"method": "keep", "factor": "scale", "fine_tune": False, "tokens": "none"}}],
                         derived={"scale": {"ratio": ["ctx", "trained_ctx"]}}), encoding="utf-8")
    gemma4 = str(Path(__file__).resolve().parents[1] / "corpus" / "gemma-4-26b-a4b.json")
    result = run("pick", "--ctx", "1M", "--config", gemma4, "--rules", str(path))
    assert_usage_error(result, "keep-anything")
    assert "model_keepable" in result.stderr


# --- the parse cache -------------------------------------------------------------------------------------------------

def _cache_files(root: Path) -> list[Path]:
    return sorted((root / "rules").glob("*.json"))


def _same(a: Any, b: Any) -> bool:
    """Two rule sets hold the same rules (RuleSet compares by identity)."""
    return [getattr(a, f) for f in ("source", "version", "derived", "rules", "raw", "constants", "tables")] == [
        getattr(b, f) for f in ("source", "version", "derived", "rules", "raw", "constants", "tables")]


def test_a_valid_file_is_cached_and_the_cache_gives_the_same_rules(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    text = VALID
    first = parse_rules(text, "valid.yaml")
    [cached] = _cache_files(tmp_path)
    # the second parse reads the JSON, not the YAML: a loader that fails proves it
    monkeypatch.setattr("posenc_cli.pick.rules._safe_load_with_node", lambda _text: pytest.fail("YAML parsed again"))
    second = parse_rules(text, "valid.yaml")
    assert _same(second, first)
    assert json.loads(cached.read_text(encoding="utf-8"))[1] == yaml.safe_load(text)


def test_the_cache_is_keyed_by_the_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    text = VALID
    parse_rules(text)
    parse_rules(text + "\n# a comment changes the key\n")
    assert len(_cache_files(tmp_path)) == 2


def test_an_invalid_file_is_never_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    with pytest.raises(RulesError):
        parse_rules("version: 1\nrules: []\n")
    assert _cache_files(tmp_path) == []


def test_a_damaged_cache_is_read_as_a_miss(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    text = VALID
    expected = parse_rules(text)
    [cached] = _cache_files(tmp_path)
    stamp = json.loads(cached.read_text(encoding="utf-8"))[0]
    other_version = json.dumps([[stamp[0], "0.0", stamp[2]], {"version": 1, "rules": []}, {}, []]).encode()
    other_text = json.dumps([[*stamp[:2], "version: 1"], {"version": 1, "rules": []}, {}, []]).encode()
    for damage in (b"", b"{not json", b"[1, 2]", b'["data", [], []]', other_version, other_text):
        cached.write_bytes(damage)
        assert _same(parse_rules(text), expected)  # parsed from the YAML again, and the cache rewritten
        assert json.loads(cached.read_text(encoding="utf-8"))[1] == yaml.safe_load(text)


def test_a_cache_folder_that_cannot_be_written_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("POSENC_CACHE_DIR", str(blocker))
    text = VALID
    expected = parse_rules(text)
    monkeypatch.setenv("POSENC_CACHE_DIR", "")  # empty: no cache at all
    assert _same(parse_rules(text), expected)
    assert blocker.read_text(encoding="utf-8") == "not a folder"


def test_data_json_cannot_carry_is_not_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from posenc_cli.pick.rules import _snapshot

    assert _snapshot("", {1: "an int key"}, {}, []) is None
    assert _snapshot("", {"x": float("nan")}, {}, []) is None
    assert _snapshot("", {"x": [1, 2.5, None, True]}, {"x": 1}, [None, 3]) is not None
