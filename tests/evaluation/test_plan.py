"""Unit tests of eval's pieces that need no server: templates and exact-length prompts, plans (from `pick --json`,
from a model's config, fingerprints, seeds) and the report's verdicts on run folders written here.

Expected values come from the inputs themselves (the pick answer, the config file, the counter, the definition of a
cell's seed), not from numbers copied out of the code under test.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation import plan as plans
from posenc_cli.evaluation.intervals import wilson
from posenc_cli.evaluation.plan import Cell, Plan, PlanTest
from posenc_cli.evaluation.probe import Capabilities
from posenc_cli.evaluation.report import FAIL, NOT_RUN, PASS, loss_curve, summarise
from posenc_cli.evaluation.run import FORMAT, MANIFEST, RESULTS
from posenc_cli.evaluation.templates import (
    SHIPPED,
    LengthError,
    Template,
    TemplateError,
    build_prompt,
    load_any,
    load_template,
    parse_template,
)
from posenc_cli.models.sources import describe_source, read_source

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PASSKEY = load_template("passkey")
NEEDLE = load_template("needle")
TEMPLATES = {"passkey": PASSKEY, "needle": NEEDLE}
DIGITS = re.compile(r"\d+")


def template_data(**changes: Any) -> dict[str, Any]:
    """The passkey template as YAML data, with ``changes`` applied (a value of None deletes the key)."""
    data: dict[str, Any] = {"version": 1, **copy.deepcopy(PASSKEY.as_dict())}
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def words(text: str) -> int:
    return len(text.split())


def word_counter(text: str) -> int:
    """A coarse tokenizer: BOS plus two tokens per word, so only odd counts exist."""
    return 2 * words(text) + 1


def fixed_tokens(template: Template, count: Callable[[str], int]) -> int:
    return count(template.prefix + template.needle.replace("{key}", "1" * template.key_digits) + template.question)


def check_structure(template: Template, prompt: Any, depth: float) -> None:
    """prefix + filler + needle + filler + question, the needle within one sentence of the depth asked for."""
    text = prompt.text
    needle = template.needle.replace("{key}", prompt.key)
    assert text.startswith(template.prefix) and text.endswith(template.question)
    assert text[prompt.needle_char:].startswith(needle)
    before = prompt.needle_char - len(template.prefix)
    filler = len(text) - len(template.prefix) - len(needle) - len(template.question)
    assert 0 <= before <= filler
    longest = max(len(s) for s in template.filler)
    assert abs(before - depth * filler) <= longest, (before, depth, filler)
    if filler:
        assert prompt.depth == pytest.approx(before / filler)


# --- templates ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_templates_load(name: str) -> None:
    template = load_template(name)
    assert template.name == name
    assert template.source == f"{name} (shipped)"
    assert "{key}" in template.needle and template.filler and template.max_tokens >= template.key_digits
    assert parse_template({"version": 1, **template.as_dict()}, "again") == dataclasses.replace(template,
                                                                                                source="again")
    assert load_template(None) == PASSKEY


@pytest.mark.parametrize(("changes", "needle"), [
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"needle": None}, "missing key 'needle'"),
    ({"filler": None}, "missing key 'filler'"),
    ({"needle": "the key is here. "}, "needle 'the key is here. ' must contain {key}"),
    ({"needle": "the key is {key} {other}. "}, "no other {...} field"),
    ({"filler": ["the year is 1999. "]}, "match: digits needs prefix, filler and question free of digits"),
    ({"question": "what are the 5 digits? "}, "free of digits"),
    ({"max_tokens": 0}, "max_tokens 0"),
    ({"max_tokens": 5000}, "max_tokens 5000"),
    ({"max_tokens": "6"}, "max_tokens '6'"),
    ({"max_tokens": True}, "max_tokens True"),
    ({"match": "fuzzy"}, "match 'fuzzy'"),
    ({"key": {"digits": 0}}, "key digits 0"),
    ({"key": {"letters": 5}}, "key must be {digits: N}"),
    ({"filler": []}, "filler must be a non-empty list"),
    ({"version": 2}, "version 2"),
])
def test_bad_templates_name_the_problem(changes: dict[str, Any], needle: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse_template(template_data(**changes), "mine.yaml")
    assert str(caught.value).startswith("mine.yaml: ")
    assert needle in str(caught.value)


def test_digits_in_filler_are_fine_when_matching_exactly() -> None:
    template = parse_template(template_data(filler=["the year is 1999. "], match="exact"))
    assert template.filler == ("the year is 1999. ",)


def test_template_files(tmp_path: Path) -> None:
    import yaml

    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(template_data(name="mine")), encoding="utf-8")
    assert load_template(good).name == "mine"
    assert load_template(str(good)).source == str(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(template_data(extra=1)), encoding="utf-8")
    with pytest.raises(TemplateError, match="unknown key 'extra'"):
        load_template(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: [1\n", encoding="utf-8")
    with pytest.raises(TemplateError, match="YAML error"):
        load_template(broken)
    with pytest.raises(TemplateError, match="'nosuch': not a file and not a shipped template"):
        load_template("nosuch")


@settings(max_examples=150, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(TEMPLATES)), depth=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75,
                                                                                        0.9, 1.0]),
       seed=st.integers(0, 2**32 - 1))
def test_byte_counter_prompts_have_the_exact_length(data: Any, name: str, depth: float, seed: int) -> None:
    template = TEMPLATES[name]
    length = data.draw(st.integers(max(50, fixed_tokens(template, bytevocab.count)), 2000), label="length")
    prompt = build_prompt(template, length=length, depth=depth, seed=seed, count=bytevocab.count)
    assert prompt.tokens == length == bytevocab.count(prompt.text)
    check_structure(template, prompt, depth)
    assert len(prompt.key) == template.key_digits and prompt.key[0] != "0"
    if template is PASSKEY:
        assert prompt.text.count(prompt.key) == 1
        assert DIGITS.findall(prompt.text) == [prompt.key]  # the key is the only run of digits
    else:
        assert set(DIGITS.findall(prompt.text)) == {prompt.key}


def test_byte_counter_prompts_over_a_grid_of_lengths() -> None:
    depths = (0.0, 0.25, 0.5, 0.75, 1.0)
    for length in range(50, 2001):
        depth = depths[length % len(depths)]
        prompt = build_prompt(PASSKEY, length=length, depth=depth, seed=length, count=bytevocab.count)
        assert prompt.tokens == length == bytevocab.count(prompt.text), length
        check_structure(PASSKEY, prompt, depth)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(TEMPLATES)), depth=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
       seed=st.integers(0, 2**32 - 1))
def test_a_coarse_counter_gets_the_longest_prompt_not_over_the_length(data: Any, name: str, depth: float,
                                                                      seed: int) -> None:
    template = TEMPLATES[name]
    length = data.draw(st.integers(fixed_tokens(template, word_counter) + 2, 2000), label="length")
    prompt = build_prompt(template, length=length, depth=depth, seed=seed, count=word_counter)
    assert prompt.tokens == word_counter(prompt.text) <= length
    # every odd count is reachable (one word more is two tokens more): exact when odd, else one short
    assert prompt.tokens == (length if length % 2 else length - 1)
    check_structure(template, prompt, depth)


def test_a_length_below_the_fixed_text_is_refused() -> None:
    fixed = fixed_tokens(PASSKEY, bytevocab.count)
    with pytest.raises(LengthError, match=f"length {fixed - 1}: .* {fixed} tokens"):
        build_prompt(PASSKEY, length=fixed - 1, depth=0.5, seed=0, count=bytevocab.count)
    assert build_prompt(PASSKEY, length=fixed, depth=0.5, seed=0, count=bytevocab.count).tokens == fixed
    with pytest.raises(LengthError, match="depth"):
        build_prompt(PASSKEY, length=200, depth=1.5, seed=0, count=bytevocab.count)


def test_seeds() -> None:
    def make(seed: int) -> Any:
        return build_prompt(PASSKEY, length=300, depth=0.5, seed=seed, count=bytevocab.count)

    assert make(7) == make(7)
    prompts = [make(seed) for seed in range(20)]
    assert len({p.key for p in prompts}) > 1
    assert len({p.text for p in prompts}) > 1
    expected = PASSKEY.make_key(random.Random(7))  # the key is the seed's first draws
    assert make(7).key == expected


@pytest.mark.parametrize(("match", "reply", "passed"), [
    ("digits", "12345", True),
    ("digits", " the key is 12345.", True),
    ("digits", "12345 and 99999", True),
    ("digits", "99999 then 12345", False),  # only the first run of digits counts
    ("digits", "123456", False),
    ("digits", "1234", False),
    ("digits", "", False),
    ("exact", " 12345 \n", True),
    ("exact", "12345.", False),
    ("exact", "the key is 12345", False),
])
def test_score(match: str, reply: str, passed: bool) -> None:
    template = dataclasses.replace(PASSKEY, match=match)
    assert template.score("12345", reply) is passed


# --- plans -------------------------------------------------------------------------------------------------------


def pick_answer(*args: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(ok(run("pick", *args, "--json")).stdout)
    return answer


def test_plan_from_pick_without_extension() -> None:
    answer = pick_answer("--ctx", "128k")
    plan = plans.from_pick(answer, NEEDLE)
    niah = [t for t in answer["tests"] if t["kind"] == "niah"]
    texts = [t["text"] for t in answer["tests"] if t["kind"] == "text"]
    assert niah and texts  # this answer has both, or the test below proves nothing
    assert {PlanTest("niah", t["length"], t["pass_rate"]) for t in niah} <= set(plan.tests)
    assert {t["length"] for t in niah} <= set(plan.lengths)
    assert all(any(text in note for note in plan.notes) for text in texts)
    assert all(t.kind in plans.KINDS for t in plan.tests)
    assert plan.trials == 2 and plan.depths == plans.DEFAULT_DEPTHS


def test_plan_from_pick_with_an_extension() -> None:
    answer = pick_answer("--ctx", "128k", "--config", str(CORPUS / "qwen3-8b.json"))
    extension = answer["extension"]
    assert extension is not None
    plan = plans.from_pick(answer, NEEDLE, trials=3, depths=(0.0, 1.0))
    lengths = set(plan.lengths)
    assert {extension["from"], extension["to"], extension["from"] // 2} <= lengths
    assert {t["length"] for t in answer["tests"] if "length" in t} <= lengths
    assert min(lengths) >= extension["from"] // 2 and max(lengths) == max(extension["to"], *lengths)
    expected = set()
    for t in answer["tests"]:
        if t["kind"] == "niah":
            expected.add(PlanTest("niah", t["length"], t["pass_rate"]))
        elif t["kind"] in ("regression", "perplexity"):
            expected.add(PlanTest("regression", t["length"], t["margin"]))
    assert expected and set(plan.tests) == expected
    assert {t.kind for t in plan.tests} == {"niah", "regression"}
    assert plan.trials == 3 and plan.depths == (0.0, 1.0)
    assert len(plan.cells(with_loss=False)) == len(lengths) * 2 * 3


@pytest.mark.parametrize(("answer", "needle"), [
    ([], "not a `posenc pick --json` answer"),
    ({"tests": [{"kind": "vibes"}]}, "test 0: kind 'vibes'"),
        ({"tests": [{"kind": "niah", "length": "1k", "pass_rate": 0.9}]}, "test 0 (niah): length '1k'"),
        ({"tests": [{"kind": "regression", "length": 4096}]}, "test 0 (regression): no 'margin'"),
        ({"tests": [{"kind": "perplexity", "length": 4096, "margin": 0.1}]}, "no 'baseline'"),
    ({"tests": [{"kind": "text", "text": "a sentence"}]}, "names no length"),
])
def test_plan_from_a_bad_pick_answer(answer: Any, needle: str) -> None:
    with pytest.raises(PosencError, match=re.escape(needle)):
        plans.from_pick(answer, NEEDLE)


def rope_config(name: str) -> tuple[dict[str, Any], Any]:
    path = CORPUS / name
    return json.loads(path.read_text(encoding="utf-8")), describe_source(read_source(str(path)))


def test_plan_from_a_yarn_model() -> None:
    config, model = rope_config("deepseek-v3.json")
    scaling = config["rope_scaling"]
    assert scaling.get("rope_type", scaling.get("type")) == "yarn"
    original, native = scaling["original_max_position_embeddings"], config["max_position_embeddings"]
    plan = plans.from_model(model, NEEDLE)
    lengths = set(plan.lengths)
    assert {original, native, original // 2, int(original / scaling["beta_fast"])} <= lengths
    assert min(lengths) == int(original / scaling["beta_fast"])  # the ramp's short edge is the shortest length
    assert any(original < n < native for n in lengths)  # a midpoint between the two windows
    assert PlanTest("niah", native, plans.DEFAULT_PASS_RATE) in plan.tests
    assert PlanTest("regression", original // 2, plans.DEFAULT_MARGIN) in plan.tests


def test_plan_from_a_llama3_model() -> None:
    config, model = rope_config("llama-3.1-8b-instruct.json")
    scaling = config["rope_scaling"]
    assert scaling["rope_type"] == "llama3"
    original, native = scaling["original_max_position_embeddings"], config["max_position_embeddings"]
    plan = plans.from_model(model, NEEDLE)
    lengths = set(plan.lengths)
    assert {original, native, original // 2} <= lengths
    assert min(lengths) == original // 2  # no YaRN ramp edge for llama3
    assert any(original < n < native for n in lengths)
    assert max(lengths) == native
    assert {t.kind: t.length for t in plan.tests} == {"niah": native, "regression": original // 2}


def test_plan_from_an_unscaled_model() -> None:
    config, model = rope_config("qwen3-8b.json")
    plan = plans.from_model(model, NEEDLE)
    # Qwen3's max_position_embeddings 40,960 reserves output room past the 32,768 it was trained at
    assert config["max_position_embeddings"] == 40960
    window = 32768
    assert set(plan.lengths) == {window, window // 2}


def test_plan_from_lengths_and_the_grid_check() -> None:
    plan = plans.from_lengths([256, 64, 64, 128], PASSKEY, pass_rate=0.75)
    assert plan.lengths == (64, 128, 256)
    assert plan.tests == (PlanTest("niah", 256, 0.75),)
    assert plans.from_lengths([64], PASSKEY).tests == ()
    with pytest.raises(PosencError, match="--pass-rate 1.5"):
        plans.from_lengths([64], PASSKEY, pass_rate=1.5)
    plans.check_grid([8], [0.0, 1.0], 1)
    bad: list[tuple[tuple[list[int], list[float], int], str]] = [
        (([], [0.5], 1), "no lengths"), (([7], [0.5], 1), "7 is too short"), (([64], [1.5], 1), "1.5"),
        (([64], [], 1), "none"), (([64], [0.5], 0), "--trials 0"), (([64], [0.5], 1001), "--trials 1001")]
    for args, needle in bad:
        with pytest.raises(PosencError, match=re.escape(needle)):
            plans.check_grid(*args)


def base_plan() -> Plan:
    return Plan((64, 128), (0.0, 0.5, 1.0), 2, PASSKEY, (PlanTest("niah", 128, 0.9),), 1, "--lengths")


@pytest.mark.parametrize("change", [
    {"lengths": (64, 256)},
    {"depths": (0.0, 1.0)},
    {"trials": 3},
    {"template": dataclasses.replace(PASSKEY, max_tokens=7)},
    {"template": dataclasses.replace(PASSKEY, filler=(*PASSKEY.filler, "one more. "))},
    {"template": NEEDLE},
    {"tests": ()},
    {"tests": (PlanTest("niah", 128, 0.8),)},
    {"tests": (PlanTest("niah", 128, 0.9), PlanTest("regression", 64, 0.02))},
    {"loss_trials": 2},
    {"tasks": load_any("ruler")},
])
def test_fingerprint_changes_with_every_plan_field(change: dict[str, Any]) -> None:
    plan = base_plan()
    assert dataclasses.replace(plan, **change).fingerprint() != plan.fingerprint()


def test_fingerprint_ignores_where_the_plan_was_read_from() -> None:
    plan = base_plan()
    for source in ("pick --json (a.json)", "pick --json (./a.json)", "pick --json (-)"):
        assert dataclasses.replace(plan, source=source).fingerprint() == plan.fingerprint()


def test_fingerprint_is_stable() -> None:
    plan = base_plan()
    assert base_plan().fingerprint() == plan.fingerprint()
    assert dataclasses.replace(plan, notes=("a note",)).fingerprint() == plan.fingerprint()
    again = Plan((64, 128), (0.0, 0.5, 1.0), 2, load_template("passkey"), (PlanTest("niah", 128, 0.9),))
    assert again.fingerprint() == plan.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{16}", plan.fingerprint())
    # the template's file label is not part of what is measured
    assert dataclasses.replace(plan, template=dataclasses.replace(PASSKEY, source="x.yaml")).fingerprint() == \
        plan.fingerprint()


def test_cell_seed_and_key() -> None:
    plan = base_plan()
    cells = plan.cells(with_loss=True)
    for cell in cells:
        text = f"{cell.length}:{cell.depth:g}:{cell.trial}".encode()
        assert cell.seed == int.from_bytes(hashlib.sha256(text).digest()[:4], "little")
        assert cell.key == f"{cell.kind}:{cell.length}:{cell.depth:g}:{cell.trial}"
    needles = [c for c in cells if c.kind == "needle"]
    assert len({c.seed for c in needles}) == len(needles)
    assert len({c.key for c in cells}) == len(cells)
    loss = [c for c in cells if c.kind == "loss"]
    assert len(loss) == plan.loss_trials and all(c.length == max(plan.lengths) for c in loss)
    assert Cell("needle", 64, 0.5, 1).seed == Cell("loss", 64, 0.5, 1).seed != Cell("needle", 64, 0.5, 0).seed


# --- report ------------------------------------------------------------------------------------------------------


def caps(logprobs: str | None = "echo") -> Capabilities:
    return Capabilities("http://127.0.0.1:1", "tiny", "vllm", 4096, "/v1/models max_model_len", "vllm", 0, logprobs,
                        "echo + logprobs" if logprobs else "echo rejected: HTTP 400")


def write_run(folder: Path, plan: Plan, records: list[dict[str, Any]], *, logprobs: str | None = "echo",
              label: str | None = None, torn: str = "") -> Path:
    folder.mkdir(parents=True)
    manifest = {"format": FORMAT, "fingerprint": plan.fingerprint(), "plan": plan.as_dict(), "model": "tiny",
                "server": caps(logprobs).as_dict(), "label": label, "created": "2025-01-01T00:00:00Z"}
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    (folder / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in records) + torn, encoding="utf-8")
    return folder


def needle_records(plan: Plan, passed: Callable[[Cell], bool]) -> list[dict[str, Any]]:
    return [{"cell": c.key, "kind": c.kind, "length": c.length, "depth": c.depth, "trial": c.trial,
             "tokens": c.length, "served_tokens": c.length, "length_ok": True, "passed": passed(c), "requests": 1,
             "seconds": 0.5} for c in plan.cells(with_loss=False)]


def loss_record(length: int, value: Callable[[int], float | None], trial: int = 0) -> dict[str, Any]:
    return {"cell": Cell("loss", length, 0.5, trial).key, "kind": "loss", "length": length, "depth": 0.5,
            "trial": trial, "tokens": length, "served_tokens": length, "length_ok": True,
            "logprobs": [None] + [value(p) for p in range(1, length)], "requests": 1, "seconds": 0.5}


def niah_plan(rate: float) -> Plan:
    return Plan((64, 128), (0.0, 0.5, 1.0), 2, PASSKEY, (PlanTest("niah", 128, rate),))


def test_niah_verdicts(tmp_path: Path) -> None:
    plan = niah_plan(0.5)

    def half(cell: Cell) -> bool:  # at 128: depths 0 and 0.5 pass, 1.0 fails: 4 of 6
        return cell.length == 64 or cell.depth < 1.0

    rate = 4 / 6
    summary = summarise(write_run(tmp_path / "a", plan, needle_records(plan, half)))
    assert summary["by_length"]["128"] == {"pass_rate": round(rate, 4), "passed": 4, "cells": 6, "planned": 6,
                                           "refused": 0, "mismatched": 0,
                                           "interval": [round(x, 4) for x in wilson(4, 6)]}
    assert summary["pass_rate"] == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert summary["tests"][0]["result"] == PASS and summary["result"] == PASS
    assert summary["tests"][0]["measured"] == pytest.approx(rate, abs=1e-4)
    assert summary["requests"] == 12 and summary["seconds"] == pytest.approx(6.0)

    strict = niah_plan(0.7)
    summary = summarise(write_run(tmp_path / "b", strict, needle_records(strict, half)))
    assert summary["tests"][0]["result"] == FAIL and summary["result"] == FAIL

    partial = needle_records(plan, half)[:-1]  # one cell at 128 missing
    summary = summarise(write_run(tmp_path / "c", plan, partial))
    assert summary["tests"][0]["result"] == NOT_RUN and summary["result"] == NOT_RUN
    assert summary["by_length"]["128"]["cells"] == 5

    empty = Plan((64,), (0.5,), 1, PASSKEY)
    assert summarise(write_run(tmp_path / "d", empty, needle_records(empty, half)))["result"] == NOT_RUN


def test_a_torn_line_and_a_cell_written_twice_count_once(tmp_path: Path) -> None:
    plan = niah_plan(0.5)
    records = needle_records(plan, lambda c: True)
    twice = dict(records[0], passed=False)
    summary = summarise(write_run(tmp_path / "a", plan, [*records, twice], torn='{"cell": "needle:12'))
    assert summary["by_length"]["64"] == {"pass_rate": round(5 / 6, 4), "passed": 5, "cells": 6, "planned": 6,
                                          "refused": 0, "mismatched": 0,
                                          "interval": [round(x, 4) for x in wilson(5, 6)]}


def test_mismatched_lengths_are_left_out_and_listed(tmp_path: Path) -> None:
    plan = niah_plan(0.5)
    records = needle_records(plan, lambda c: True)
    bad = [r for r in records if r["length"] == 128][:2]
    for r in bad:
        r |= {"served_tokens": r["tokens"] + 1, "length_ok": False}
    summary = summarise(write_run(tmp_path / "a", plan, records))
    assert sorted(summary["mismatched_lengths"]) == sorted(r["cell"] for r in bad)
    assert summary["by_length"]["128"]["cells"] == 4 and summary["by_length"]["64"]["cells"] == 6
    assert summary["tests"][0]["result"] == NOT_RUN  # a left-out cell is a missing cell, never a pass


def regression_plan(margin: float = 0.02) -> Plan:
    return Plan((64, 256), (0.5,), 1, PASSKEY, (PlanTest("regression", 64, margin),))


@pytest.mark.parametrize(("rise", "result"), [(0.0, PASS), (0.015, PASS), (-0.1, PASS), (0.03, FAIL), (0.5, FAIL)])
def test_regression_against_a_baseline(tmp_path: Path, rise: float, result: str) -> None:
    """``rise`` is the perplexity rise: every token's loss grows by log(1 + rise) on the shared loss prompt."""
    plan = regression_plan(0.02)
    assert plan.loss_lengths == [64, 256]  # the test's own length, which an unscaled baseline server can serve
    needles = needle_records(plan, lambda c: True)

    def base(p: int) -> float:
        return -1.0 - (p % 7) / 10

    mine = loss_record(64, lambda p: base(p) - math.log1p(rise))
    # the run's long loss request says nothing about the short-context regression (here: a broken model)
    long_one = loss_record(256, lambda p: -9.0)
    baseline = write_run(tmp_path / "base", plan, [*needles, loss_record(64, base)])
    summary = summarise(write_run(tmp_path / "run", plan, [*needles, mine, long_one]), baseline)
    verdict = summary["tests"][0]
    assert verdict["result"] == result and summary["result"] == result
    assert verdict["measured"] == pytest.approx(rise, abs=1e-4)
    expected_base = sum(-base(p) for p in range(1, 64)) / 63
    assert verdict["baseline_loss"] == pytest.approx(expected_base, abs=1e-4)


def test_perplexity_against_the_runs_own_shorter_positions(tmp_path: Path) -> None:
    plan = Plan((64, 256), (0.5,), 1, PASSKEY, (PlanTest("perplexity", 256, 0.1, baseline=64),))
    needles = needle_records(plan, lambda c: True)
    # loss 1 nat per token below 64, 1.5 from 64 on: over 1..255 the mean is (63 + 192 * 1.5) / 255
    run_folder = write_run(tmp_path / "a", plan, [*needles, loss_record(256, lambda p: -1.0 if p < 64 else -1.5)])
    verdict = summarise(run_folder)["tests"][0]
    expected = math.exp((63 + 192 * 1.5) / 255 - 1.0) - 1
    assert verdict["measured"] == pytest.approx(expected, abs=1e-4)
    assert verdict["result"] == FAIL  # about +34%: over the 10% margin


def test_regression_not_run(tmp_path: Path) -> None:
    plan = regression_plan()
    needles = needle_records(plan, lambda c: True)
    with_loss = write_run(tmp_path / "a", plan, [*needles, loss_record(256, lambda p: -1.0)])
    summary = summarise(with_loss)
    assert summary["tests"][0]["result"] == NOT_RUN and "baseline" in summary["tests"][0]["why"]
    no_logprobs = write_run(tmp_path / "b", plan, needles, logprobs=None)
    summary = summarise(no_logprobs, with_loss)
    assert summary["tests"][0]["result"] == NOT_RUN
    assert summary["loss"] == {"available": False, "measured": False, "lengths": [], "curve": [],
                               "why": caps(None).logprobs_detail}
    no_cells = write_run(tmp_path / "c", plan, needles)  # logprobs available, but no loss line written yet
    assert summarise(no_cells, with_loss)["tests"][0]["result"] == NOT_RUN


@pytest.mark.parametrize("per_octave", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [2, 3, 100, 1000, 4097])
def test_loss_curve_bins_cover_every_position_once(length: int, per_octave: int) -> None:
    gaps = {17, 18, 500}  # positions the server gave no value for

    def value(p: int) -> float | None:
        return None if p in gaps else -float(p)

    record = loss_record(length, value)
    wrong = dict(loss_record(length, lambda p: -1000.0, trial=1), length_ok=False)  # left out of the curve
    curve = loss_curve([record, wrong], per_octave)
    positions = [p for p in range(1, length) if p not in gaps]
    assert curve[0]["from"] == 1
    for a, b in zip(curve, curve[1:], strict=False):
        assert a["to"] <= b["from"]
    assert sum(b["tokens"] for b in curve) == len(positions)
    for p in positions:
        bins = [b for b in curve if b["from"] <= p < b["to"]]
        assert len(bins) == 1, (p, bins)
    for b in curve:
        inside = [p for p in positions if b["from"] <= p < b["to"]]
        assert b["tokens"] == len(inside)
        assert b["loss"] == pytest.approx(sum(inside) / len(inside), abs=1e-4)
