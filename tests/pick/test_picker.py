"""The policy points practitioners would argue with, each pinned through `posenc pick` (the CLI, and over grids the
picker the CLI calls):

* a budget that pays every stage trains at the target; a smaller one trains as far as it pays (at most a
  training-free x4 left), from the constant ``funded_final_jump`` of the rules file;
* any answer that serves dynamic NTK says that engines differ on it, whichever rule gave it;
* the ABF answer carries its new ``rope_theta`` and window as a config, like any extension, and the command it
  quotes prints the same config;
* ``--typical-ctx`` answers test the length they deploy;
* every number in every rule's fallback is the fact the sentence names (rendered over a grid, checked against
  numbers computed here from the inputs).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run, write_json
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from trained_variants import card_patched, trained_length, unscaled_models, written_on_the_way

from posenc_cli.errors import PosencError
from posenc_cli.pick.picker import PickInputs, pick
from posenc_cli.pick.rules import load_rules, render
from posenc_cli.rope import scaling
from posenc_cli.units import format_length, format_tokens

K = 1024
ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
EXAMPLES = ROOT / "docs" / "examples"
RULES = load_rules()
CONST = {name: c.value for name, c in RULES.constants.items()}
DYNAMIC_4K = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096,
              "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
T5 = {"model_type": "t5", "d_model": 512, "num_heads": 8, "d_kv": 64, "n_positions": 512}


def pick_json(*args: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(ok(run("pick", *args, "--json")).stdout)
    return answer


def niah_lengths(answer: dict[str, Any]) -> list[int]:
    return [t["length"] for t in answer["tests"] if t["kind"] == "niah"]


# ---------------------------------------------------------------- 1. staged plans train at the target when paid for


@pytest.mark.parametrize(("budget", "rule", "train_to", "stages", "final"), [
    ("1.5B", "existing-rope-staged", 128 * K, 3, 1.0),  # 3 stages x 500M: 4k -> 16k -> 64k -> 128k
    ("20B", "existing-rope-staged", 128 * K, 3, 1.0),
    ("1.4B", "existing-rope-staged-partial", 64 * K, 2, 2.0),  # pays two stages: as far as that goes, x2 on top
    ("1B", "existing-rope-staged-partial", 64 * K, 2, 2.0),
    ("999M", "existing-rope-cap", 32 * K, 2, 4.0),  # short of the least plan (to 32k, x4 left): capped
])
def test_the_budget_decides_how_far_the_stages_train(budget: str, rule: str, train_to: int, stages: int,
                                                     final: float) -> None:
    a = pick_json("--ctx", "128k", "--config", str(EXAMPLES / "llama-4k.json"), "--budget", budget)
    assert a["rule"] == rule
    p = a["plan"]
    assert (p["train_to"], p["stages"], p["final_jump"]) == (train_to, stages, final)
    assert (p["target_stages"], p["target_tokens_min"]) == (3, 1_500_000_000)
    ext = a["extension"]
    if rule == "existing-rope-cap":
        assert ext["to"] == 16 * K and not ext["fine_tune"]
        return
    assert (ext["to"], ext["fine_tune"]) == (128 * K, True)
    text = " ".join([a["reason"], ext["note"]])
    if final == 1:
        # nothing training-free is claimed: every stage is fine-tuned, the last at the target
        assert "then a training-free" not in a["reason"] and "x4" not in text
        assert "the last stage trains at 128k" in ext["note"]
        assert niah_lengths(a) == [128 * K]
    else:
        assert f"then a training-free x{final:g} to 128k" in a["reason"]
        assert f"the last jump (x{final:g}, {format_length(train_to)} -> 128k) is training-free" in ext["note"]
        assert niah_lengths(a) == [128 * K, train_to]


def test_a_new_model_with_the_budget_trains_every_stage() -> None:
    a = pick_json("--ctx", "1M", "--trained-ctx", "8k", "--budget", "2B")
    assert a["rule"] == "new-staged"  # 8k -> 32k -> 128k -> 512k -> 1M: 4 x 500M
    assert (a["plan"]["train_to"], a["plan"]["stages"], a["plan"]["final_jump"]) == (1024 * K, 4, 1.0)
    assert "(32k, 128k, 512k and 1M)" in " ".join(a["test_plan"])
    short = pick_json("--ctx", "1M", "--trained-ctx", "8k", "--budget", "1.9B")
    assert short["rule"] == "new-staged-partial"
    assert (short["plan"]["train_to"], short["plan"]["final_jump"]) == (512 * K, 2.0)


def test_the_policy_is_the_rules_files_constant(tmp_path: Path) -> None:
    """funded_final_jump 4 brings back the other policy (train to a quarter, x4 training-free): it is data."""
    text = (ROOT / "rules" / "default.yaml").read_text(encoding="utf-8")
    old = "  funded_final_jump:"
    assert text.count(old) == 1
    start = text.index(old)
    value = text.index("value: 1\n", start)
    path = tmp_path / "quarter.yaml"
    path.write_text(text[:value] + "value: 4\n" + text[value + len("value: 1\n"):], encoding="utf-8")
    args = ("--ctx", "128k", "--config", str(EXAMPLES / "llama-4k.json"), "--budget", "20B")
    assert pick_json(*args)["plan"]["train_to"] == 128 * K
    quarter = pick_json(*args, "--rules", str(path))
    assert (quarter["plan"]["train_to"], quarter["plan"]["final_jump"]) == (32 * K, 4.0)
    assert quarter["rule"] == "existing-rope-staged-partial"
    shown = ok(run("rules", "show")).stdout
    assert re.search(r"funded_final_jump = 1 +\(.*DeepSeek-V3", shown), shown
    # a jump above the training-free cap is refused with the constant's name
    path.write_text(text[:value] + "value: 6\n" + text[value + len("value: 1\n"):], encoding="utf-8")
    result = run("rules", "validate", str(path))
    assert result.exit_code == 2 and "funded_final_jump" in result.stderr


# ---------------------------------------------------------------- 2. dynamic NTK always carries the engine caveat


def _grid_answers(tmp_path: Path) -> list[tuple[PickInputs, Any]]:
    """Inputs across the policy: new models, and existing ones of every kind the rules tell apart."""
    configs = {"dynamic": write_json(tmp_path, DYNAMIC_4K, "dynamic.json"),
               "t5": write_json(tmp_path, T5, "t5.json")}
    existing = [
        (str(EXAMPLES / "llama-4k.json"), None), (str(EXAMPLES / "llama-8k.json"), None),
        (str(EXAMPLES / "qwen-32k.json"), None), (str(EXAMPLES / "bloom.json"), 2 * K),
        (str(EXAMPLES / "gpt2.json"), None), (str(ROOT / "tests" / "fixtures" / "phi-3-mini-128k.json"), None),
        (str(CORPUS / "phi-4.json"), None), (str(CORPUS / "gemma-4-26b-a4b.json"), None),
        (str(CORPUS / "llama-3.1-8b-instruct.json"), None), (configs["dynamic"], None), (configs["t5"], 512),
    ]
    budgets = (0, 100 * 10**6, 700 * 10**6, 2 * 10**9, 20 * 10**9, 300 * 10**9)
    out = []
    for (config, trained), ctx, budget, extrapolation in itertools.product(
            existing, (4 * K, 8 * K, 16 * K, 32 * K, 128 * K, 1024 * K), budgets, ("none", "moderate")):
        inp = PickInputs(ctx=ctx, config=config, trained_ctx=trained, budget=budget, extrapolation=extrapolation)
        out.append((inp, pick(inp)))
    for ctx, trained, budget, extrapolation in itertools.product(
            (4 * K, 24 * K, 32 * K, 128 * K, 1024 * K), (None, 8 * K, 16 * K, 32 * K), budgets,
            ("none", "moderate", "strong")):
        inp = PickInputs(ctx=ctx, trained_ctx=trained, budget=budget, extrapolation=extrapolation)
        out.append((inp, pick(inp)))
    return out


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[PickInputs, Any]]:
    return _grid_answers(tmp_path_factory.mktemp("grid"))


def _serves_dynamic(answer: dict[str, Any]) -> bool:
    """Read from the answer's own parts: the config it emits, or the model it keeps as it is."""
    ext = answer["extension"]
    if ext is not None:
        params = json.dumps(ext["config_v5"])
        return '"rope_type": "dynamic"' in params
    return bool(answer["inputs"]["existing"] and answer["inputs"]["model_rope_type"] == "dynamic")


def test_every_answer_that_serves_dynamic_ntk_says_engines_differ(grid: list[tuple[PickInputs, Any]]) -> None:
    serving: set[str] = set()
    for inp, result in grid:
        a = result.answer
        if not _serves_dynamic(a):
            assert a["caveats"] == [], (inp, a["rule"])
            continue
        serving.add(a["rule"])
        assert len(a["caveats"]) == 1, (inp, a["rule"])
        caveat = a["caveats"][0]
        for engine in ("vLLM", "SGLang", "llama.cpp", "static base", "no dynamic NTK"):
            assert engine in caveat, (engine, caveat)
        said = a["extension"]["note"] if a["extension"] is not None else a["reason"]
        assert caveat in said, (inp, a["rule"])
    # every rule that can give dynamic NTK was seen giving it: the ones whose extension is dynamic, and the ones
    # that keep a dynamic model as it is
    dynamic_rules = {r.id for r in RULES.rules if (r.body.get("extension") or {}).get("method") == "dynamic"}
    assert dynamic_rules == {"new-moderate"}
    assert serving >= dynamic_rules | {"existing-dynamic", "existing-rope-other-type", "existing-within-trained"}


def test_the_caveat_is_in_the_text_output_too(tmp_path: Path) -> None:
    out = ok(run("pick", "--ctx", "32k", "--trained-ctx", "16k", "--extrapolation", "moderate")).stdout
    ext = out[out.index("3. Extension"):out.index("4. Test plan")]
    assert "dynamic x2" in ext and "llama.cpp has no dynamic NTK" in ext
    # 2x its trained 4k (the window its factor 2 serves): the rules keep dynamic up to 2x from the trained length
    kept = ok(run("pick", "--ctx", "8k", "--config", write_json(tmp_path, DYNAMIC_4K))).stdout
    assert "keep dynamic NTK" in kept
    assert "vLLM and SGLang compute one static base" in kept[:kept.index("2. Hyperparameters")]


def test_a_custom_rule_cannot_drop_the_caveat(tmp_path: Path) -> None:
    text = (ROOT / "rules" / "default.yaml").read_text(encoding="utf-8")
    head = text[:text.index("\nrules:\n")]
    path = tmp_path / "dyn.yaml"
    path.write_text(head + """
rules:
  - id: always-dynamic
    when: []
    encoding: RoPE
    reason: house style
    extension: {method: dynamic, factor: 2, fine_tune: false, tokens: none}
    test_plan:
      - niah: {length: ctx, pass_rate: 0.9}
      - regression: {length: trained_ctx, margin: 0.02}
    fallback: none
    why: because
""", encoding="utf-8")
    a = pick_json("--ctx", "16k", "--trained-ctx", "8k", "--rules", str(path))
    assert a["extension"]["method"] == "dynamic" and a["extension"]["note"] == a["caveats"][0]


# ---------------------------------------------------------------- 3. ABF carries its config


def test_abf_answer_is_a_config_to_merge_and_a_command_that_prints_it(tmp_path: Path) -> None:
    qwen = str(EXAMPLES / "qwen-32k.json")
    a = pick_json("--ctx", "1M", "--config", qwen, "--budget", "300B")
    assert a["rule"] == "existing-rope-abf"
    ext = a["extension"]
    theta = a["hyperparameters"]["theta"]
    assert theta == 1e8 and a["plan"]["train_to"] == 1024 * K  # trained to 1M: the table's theta for 1M
    assert (ext["method"], ext["from"], ext["to"], ext["fine_tune"]) == ("abf", 32 * K, 1024 * K, True)
    assert ext["config"] == {"rope_theta": 1e8, "rope_scaling": None, "max_position_embeddings": 1024 * K}
    assert ext["config_v5"] == {"rope_parameters": {"rope_type": "default", "rope_theta": 1e8},
                                "max_position_embeddings": 1024 * K}
    assert ext["config_format"] == "hf" and ext["config_v4"] == ext["config"]
    assert "1e+06 -> 1e+08" in ext["note"]
    argv = shlex.split(ext["command"])
    assert argv[:2] == ["posenc", "scale"] and qwen in argv
    assert json.loads(ok(run(*argv[1:])).stdout) == ext["config"]
    # merged into the model, it reads back as plain RoPE with the new theta and window
    model = json.loads(Path(qwen).read_text())
    merged = write_json(tmp_path, {**model, **ext["config"]}, "merged.json")
    seen = json.loads(ok(run("inspect", merged, "--json")).stdout)
    assert seen["rope_type"] == "default" and seen["max_position_embeddings"] == 1024 * K
    out = ok(run("pick", "--ctx", "1M", "--config", qwen, "--budget", "300B")).stdout
    assert '"rope_theta": 100000000.0' in out[out.index("3. Extension"):out.index("4. Test plan")]


def test_abf_config_keeps_the_models_format(tmp_path: Path) -> None:
    """A rope_parameters (transformers 5) file gets rope_parameters; a scaled model loses its own scaling."""
    cfg = json.loads((CORPUS / "llama-3.1-8b-instruct.json").read_text())
    v5 = {k: v for k, v in cfg.items() if k not in ("rope_scaling", "rope_theta")}
    v5["rope_parameters"] = {**cfg["rope_scaling"], "rope_theta": cfg["rope_theta"]}
    path = write_json(tmp_path, v5, "llama31-v5.json")
    a = pick_json("--ctx", "1M", "--config", path, "--budget", "400B")
    ext = a["extension"]
    assert a["rule"] == "existing-rope-abf" and ext["config_format"] == "hf-v5"
    assert ext["config"]["rope_parameters"] == {"rope_type": "default", "rope_theta": 1e8}
    assert ext["config"]["max_position_embeddings"] == 1024 * K
    assert "replaces the model's own llama3 scaling" in ext["note"]
    argv = shlex.split(ext["command"])
    assert json.loads(ok(run(*argv[1:])).stdout) == ext["config"]


def test_abf_short_of_the_target_adds_the_training_free_jump(tmp_path: Path) -> None:
    """With a rules file whose ABF budget pays only two of the three stages, the config is the new theta plus a
    training-free yarn jump from the trained window to the target."""
    text = (ROOT / "rules" / "default.yaml").read_text(encoding="utf-8")
    old = "  abf_budget:\n    value: 100000000000\n"
    assert text.count(old) == 1
    path = tmp_path / "cheap-abf.yaml"
    path.write_text(text.replace(old, "  abf_budget:\n    value: 1000000000\n"), encoding="utf-8")
    a = pick_json("--ctx", "128k", "--config", str(EXAMPLES / "llama-4k.json"), "--budget", "1.2B",
                  "--rules", str(path))
    assert a["rule"] == "existing-rope-abf"
    assert (a["plan"]["train_to"], a["plan"]["final_jump"]) == (64 * K, 2.0)
    ext = a["extension"]
    theta = a["hyperparameters"]["theta"]
    assert theta == 1e7  # the table's theta for 64k
    assert ext["config"]["rope_theta"] == theta
    assert ext["config"]["rope_scaling"] == {"rope_type": "yarn", "factor": 2.0,
                                             "original_max_position_embeddings": 64 * K}
    assert ext["config"]["max_position_embeddings"] == 128 * K
    assert "training-free yarn x2" in ext["note"]
    argv = shlex.split(ext["command"])
    assert json.loads(ok(run(*argv[1:])).stdout) == ext["config"]


# ---------------------------------------------------------------- 4. --typical-ctx tests what it deploys


QWEN25 = str(CORPUS / "qwen2.5-7b-instruct.json")


def test_typical_ctx_tests_the_deployed_length() -> None:
    a = pick_json("--ctx", "128k", "--config", QWEN25, "--typical-ctx", "64k")
    assert a["extension"]["to"] == 64 * K
    assert niah_lengths(a) == [64 * K]  # not the full 128k the config is not sized for
    assert "65,536 tokens, the length deployed for --typical-ctx" in a["test_plan"][0]
    regression = [t for t in a["tests"] if t["kind"] == "regression"]
    assert regression == [{"kind": "regression", "length": 32 * K, "margin": 0.02}]  # with vs without the x2
    later = [t["text"] for t in a["tests"] if t["kind"] == "text"]
    assert any("a needle test at 128k (131,072 tokens)" in t for t in later), later
    full = pick_json("--ctx", "128k", "--config", QWEN25)
    assert niah_lengths(full) == [128 * K] and full["extension"]["to"] == 128 * K


def test_typical_ctx_inside_the_window_changes_nothing_and_tests_no_change() -> None:
    a = pick_json("--ctx", "128k", "--config", QWEN25, "--typical-ctx", "16k")
    assert a["extension"] is None
    assert niah_lengths(a) == [32 * K]
    # no regression check of the model against itself: it could not fail
    assert not any(t["kind"] == "regression" for t in a["tests"])
    assert "no scaling is applied" in a["reason"]


# ---------------------------------------------------------------- 5. every number in every fallback


def _chain(trained: int, ctx: int, ratio: float) -> list[int]:
    out, length = [], trained
    while length < ctx:
        length = min(ctx, int(length * ratio))
        out.append(length)
    return out


def _meant(rule: str, inp: PickInputs, a: dict[str, Any]) -> set[str]:
    """The numbers each rule's fallback means, computed from the inputs and the constants (not from the facts)."""
    i = a["inputs"]
    ctx, trained = i["ctx"], i["trained_ctx"]
    scale = ctx / trained
    asked = i["extrapolation"] != "none"
    cap = CONST["training_free_cap"]
    free_cap = CONST["training_free_cap_asked"] if asked else cap
    ratio, least = CONST["stage_ratio"], CONST["stage_tokens_min"]
    to_target = [ctx] if trained < ctx <= trained * free_cap else _chain(trained, ctx, ratio)
    target_tokens = format_tokens(int(len(to_target) * least))
    lowest = min(ctx, max(2 * trained, 1 << math.ceil(math.log2(ctx / cap))))
    L, x = format_length, (lambda v: f"x{v:g}")
    stage_chain = {L(n) for n in [trained, *to_target]} | {str(n + 1) for n in range(len(to_target))}
    return {
        "existing-within-trained": set(),
        "existing-alibi-double": {L(ctx), "65k"},
        "existing-alibi-finetune": {L(2 * trained)},
        "existing-alibi-cap": {L(ctx)},
        "existing-learned-positions": {L(trained)},
        "existing-unknown": {L(trained)},
        "existing-longrope": {L(trained), L(ctx)},
        "existing-phi3": {L(trained)},
        "existing-dynamic": {L(trained), L(ctx)},
        "existing-rope-other-type": {L(trained), L(ctx), target_tokens, str(len(to_target))} | stage_chain,
        "existing-rope-unwritable": {L(trained), L(ctx), target_tokens, str(len(to_target))} | stage_chain,
        "existing-rope-finetune": {x(scale)},
        "existing-rope-training-free": {L(trained)},
        "existing-rope-training-free-asked": {x(cap), L(int(trained * cap)), L(ctx), target_tokens},
        "existing-rope-abf": {x(cap), L(ctx), target_tokens},
        "existing-rope-staged": {x(cap)},
        "existing-rope-staged-partial": {x(cap), target_tokens, L(ctx)},
        "existing-rope-cap": {format_tokens(int(len(_chain(trained, lowest, ratio)) * least))},
        "new-strong": {L(ctx), L(int(trained * min(scale, free_cap)))},
        "new-moderate": {x(scale), L(trained), L(ctx), target_tokens},
        "new-finetune": {x(scale)},
        "new-training-free": {L(ctx)},
        "new-training-free-asked": {x(cap), L(int(trained * cap)), L(ctx), target_tokens},
        "new-staged": {"32k"},  # "as Qwen2.5 did at 32k": the publication's number
        "new-staged-partial": {target_tokens, L(ctx), "32k"},
        "new-staged-short-budget": set(),
        "new-rope": {L(ctx)},
        "catch-all": set(),
    }[rule]


# a number as the text writes it: 128k, 1.5B, x4, 3 (not the 7B of "MPT-7B" or the 2.5 of "Qwen2.5")
NUMBER = re.compile(r"(?<![\w.-])x?\d+(?:\.\d+)?[kMB]?(?![\w.]\w)")


def test_every_rules_fallback_renders_the_numbers_it_means(grid: list[tuple[PickInputs, Any]]) -> None:
    """Each rule's fallback, rendered with the facts of every grid input its conditions hold for (it would fire
    there if no earlier rule did), names exactly the numbers the sentence means."""
    rendered: dict[str, int] = {}
    for inp, result in grid:
        for trace in result.traces:
            if not trace.matched:
                continue
            rule = next(r for r in RULES.rules if r.id == trace.rule)
            text = render(rule.body["fallback"], result.facts)
            found = set(NUMBER.findall(text))
            meant = _meant(rule.id, inp, result.answer)
            assert found == meant, (rule.id, inp, text, meant)
            rendered[rule.id] = rendered.get(rule.id, 0) + 1
    assert set(rendered) == {r.id for r in RULES.rules}, {r.id for r in RULES.rules} - set(rendered)


def test_the_fallbacks_that_were_wrong() -> None:
    """The lines the audit fixed, as users see them."""
    asked = pick_json("--ctx", "64k", "--config", str(EXAMPLES / "llama-8k.json"), "--extrapolation", "moderate")
    assert asked["fallback"].startswith("Drop to a training-free x4 (32k)")  # was "(64k at most 4x)"
    other = pick_json("--ctx", "1M", "--config", str(CORPUS / "gemma-4-26b-a4b.json"))
    assert other["rule"] == "existing-rope-other-type"
    assert "a budget of 0" not in other["fallback"] and "500M over 1 stage(s)" in other["fallback"]
    moderate = pick_json("--ctx", "24k", "--trained-ctx", "16k", "--extrapolation", "moderate")
    assert moderate["rule"] == "new-moderate" and moderate["fallback"].startswith("If x1.5 fails")


# ---------------------------------------------------------------- 6. --theta / --head-dim do not override a model


@pytest.mark.parametrize(("option", "value", "own"), [("--theta", "2e6", "1e+06"), ("--head-dim", "64", "128")])
def test_theta_or_head_dim_other_than_the_models_is_refused(option: str, value: str, own: str) -> None:
    from clihelpers import assert_usage_error

    qwen = str(EXAMPLES / "qwen-32k.json")
    line = assert_usage_error(run("pick", "--ctx", "128k", "--config", qwen, option, value), option, own)
    assert "differs from the model's own" in line
    # the model's own value is accepted and changes nothing
    same = "1e6" if option == "--theta" else "128"
    assert pick_json("--ctx", "128k", "--config", qwen, option, same) == pick_json("--ctx", "128k", "--config", qwen)


def test_the_plan_names_ruler_tasks_with_the_rules_thresholds(tmp_path: Path) -> None:
    """Beside the needle test: RULER's task set at the longest needle length, with RULER's 85.6 and NoLiMa's 85%
    from the rules file's constants (a custom file's values come through), and no task set without a needle test."""
    args = ("--ctx", "128k", "--config", str(CORPUS / "qwen2.5-7b-instruct.json"))
    answer = pick_json(*args)
    n = max(niah_lengths(answer))
    assert answer["tasks"] == "ruler"
    assert [t for t in answer["tests"] if t["kind"] == "ruler"] == [
        {"kind": "ruler", "length": n, "threshold": CONST["ruler_threshold"] / 100, "ratio": CONST["nolima_ratio"]}]
    assert (CONST["ruler_threshold"], CONST["nolima_ratio"]) == (85.6, 0.85)
    assert "RULER's 11 no-download tasks" in answer["test_plan"][-1]
    text = (ROOT / "rules" / "default.yaml").read_text(encoding="utf-8")
    start = text.index("  ruler_threshold:")
    value = text.index("value: 85.6\n", start)
    path = tmp_path / "strict.yaml"
    path.write_text(text[:value] + "value: 90\n" + text[value + len("value: 85.6\n"):], encoding="utf-8")
    strict = pick_json(*args, "--rules", str(path))
    assert [t["threshold"] for t in strict["tests"] if t["kind"] == "ruler"] == [0.9]


# --- the trained length, not the served window, is where pick's caps start ------------------------------------------


def _picked(path: Path, ctx: int, budget: int) -> dict[str, Any]:
    """What ``pick --ctx CTX --config PATH`` decides, without what names the file or the window it serves as is."""
    result = pick(PickInputs(ctx=ctx, config=str(path), budget=budget))
    a = json.loads(json.dumps(result.answer).replace(str(path), "FILE"))
    ext = a["extension"]
    if ext is not None:
        for key in ("config", "config_v4", "config_v5", "command"):  # the file's own keys and its "same numbers"
            del ext[key]
    served = result.requests.served if result.requests is not None else None
    # what describes the file as it is (its rope type, original length, window) may differ, and the reason names
    # the model's own rope type
    a["inputs"] = {"trained_ctx": a["inputs"]["trained_ctx"]}
    del a["reason"]
    return {**a, "rope": None if served is None else (scaling.rope_parameters(served),
                                                       scaling.max_position_embeddings(served))}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(unscaled_models()), st.sampled_from((2, 4)), st.sampled_from((1, 1.5, 2, 4, 8, 16)),
       st.sampled_from((0, 10**9, 10**10)))
def test_pick_answers_a_file_patched_on_the_way_as_the_file_it_came_from(
        tmp_path: Path, name: str, reach: int, past: float, budget: int) -> None:
    """The unpatched corpus file, its card-patched twin and the file ``posenc scale yarn --target W -o`` wrote
    (W = reach x the trained length) get the same answer for one target: trained_ctx is the trained length, the
    rule, the extension with its final rope, its warnings and the test plan the same."""
    trained = trained_length(name)
    ctx = int(trained * reach * past)
    assume(ctx <= 1 << 24)
    try:
        direct = _picked(CORPUS / name, ctx, budget)
        on_the_way = written_on_the_way(name, "yarn", trained * reach, tmp_path)
    except PosencError:
        assume(False)  # the model's class takes no yarn
        raise
    assert direct["inputs"]["trained_ctx"] == trained
    for variant in (card_patched(name, reach, tmp_path), on_the_way):
        assert _picked(variant, ctx, budget) == direct, variant.name


def test_pick_on_a_gguf_ends_in_the_command_that_writes_the_new_gguf() -> None:
    gguf = Path(__file__).parents[2] / "docs" / "examples" / "llama-3.1-twin.gguf"
    ext = pick(PickInputs(ctx=262144, config=str(gguf))).answer["extension"]
    assert ext["output"] == "NEW.gguf" and shlex.split(ext["command"])[-2:] == ["-o", "NEW.gguf"]
    out = ok(run("pick", "--ctx", "256k", "--config", str(gguf))).stdout
    assert "merge into config.json" not in out and f"next: posenc scale llama3 --config {gguf} --target 256k -o " \
        "NEW.gguf" in out
    assert pick(PickInputs(ctx=262144, config=str(CORPUS / "llama-3.1-8b-instruct.json"))).answer["extension"][
        "output"] is None
