"""`posenc pick` through the real CLI: the five-part answer, --json, --explain, the README scenarios with their
key numbers, bad input (one `error:` line, exit 2) and the import guard (no numpy, no matplotlib).

Expected numbers come from the scenario itself (factor = target / trained length) or from independent references
(the ALiBi recipe is re-implemented here recursively, as in the paper's code); the extension config must be the very
output of `posenc scale`.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json
from reference import alibi_slopes_official

from posenc_cli.engines.hf import format_hf
from posenc_cli.models.config_keys import ABSENT, text_config
from posenc_cli.pick.rules import GUARDS, load_rules
from posenc_cli.rope.scaling import make_request
from posenc_cli.units import format_length

DEFAULT_RULE_IDS = [rule.id for rule in load_rules().rules]
ROOT_RULES = Path(__file__).resolve().parents[2] / "rules" / "default.yaml"
HEADINGS = ("1. Encoding", "2. Hyperparameters", "3. Extension", "4. Test plan", "5. Fallback")
K = 1024


def pick_json(*args: str) -> dict[str, Any]:
    result = ok(run("pick", *args, "--json"))
    answer: dict[str, Any] = json.loads(result.stdout)  # stdout is the JSON and nothing else
    return answer


# The model configs of the README scenarios (the same content is quoted in the scenario table).
LLAMA_8K = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192,
            "rope_theta": 500000}
LLAMA_4K = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096,
            "rope_theta": 10000}
QWEN_32K = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 32768,
            "rope_theta": 1000000}
BLOOM = {"model_type": "bloom", "hidden_size": 4096, "n_head": 32, "n_layer": 30}  # no length key, like bloom-7b1
GPT2 = {"model_type": "gpt2", "n_positions": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12}


@pytest.fixture
def configs(tmp_path: Path) -> dict[str, str]:
    return {name: write_json(tmp_path, cfg, f"{name}.json") for name, cfg in
            (("llama8k", LLAMA_8K), ("llama4k", LLAMA_4K), ("qwen32k", QWEN_32K), ("bloom", BLOOM), ("gpt2", GPT2))}


def niah_lengths(answer: dict[str, Any]) -> list[int]:
    """Token counts of the needle-in-a-haystack lines of a test plan."""
    out = []
    for line in answer["test_plan"]:
        if "needle-in-a-haystack" in line:
            match = re.search(r"\(([\d,]+) tokens", line)
            assert match, line
            out.append(int(match.group(1).replace(",", "")))
    return out


def assert_niah_at_deployed_length(answer: dict[str, Any]) -> None:
    """Every plan tests retrieval where it deploys: the target, or the extension's own length when it is capped."""
    ctx = answer["inputs"]["ctx"]
    if ctx < 32 * K and answer["extension"] is None:
        return
    lengths = niah_lengths(answer)
    deployed = answer["extension"]["to"] if answer["extension"] else ctx
    assert deployed in lengths or ctx in lengths, (deployed, answer["test_plan"])


def assert_regression_with_extension(answer: dict[str, Any]) -> None:
    if answer["extension"] is not None:
        assert any(t.startswith("short-context regression") for t in answer["test_plan"]), answer["test_plan"]


# ---------------------------------------------------------------- the five parts


def test_pick_128k_prints_the_five_parts() -> None:
    out = ok(run("pick", "--ctx", "128k")).stdout
    positions = [out.index(h) for h in HEADINGS]
    assert positions == sorted(positions)
    assert re.search(r"^rule: new-rope: ", out, re.M), out
    assert "131,072 tokens" in out  # the needle test at the full deployed length
    assert not out.lstrip().startswith("{")


def test_pick_text_shows_the_extension_config(configs: dict[str, str]) -> None:
    out = ok(run("pick", "--ctx", "32k", "--config", configs["llama8k"])).stdout
    ext = out[out.index("3. Extension"):out.index("4. Test plan")]
    assert "yarn x4: 8k -> 32k" in ext
    assert '"original_max_position_embeddings": 8192' in ext
    assert f"posenc scale yarn --config {configs['llama8k']} --target 32k" in ext


def test_json_shape(configs: dict[str, str]) -> None:
    for args in (("--ctx", "128k"), ("--ctx", "32k", "--config", configs["llama8k"])):
        a = pick_json(*args)
        for key in ("encoding", "reason", "fallback", "rule", "why"):
            assert isinstance(a[key], str) and a[key], key
        assert a["rule"] in DEFAULT_RULE_IDS
        assert isinstance(a["hyperparameters"], dict)
        assert isinstance(a["hyperparameters"]["head_dim"], int)  # a number in every answer
        assert isinstance(a["test_plan"], list) and a["test_plan"]
        assert all(isinstance(t, str) and t for t in a["test_plan"])
        assert isinstance(a["vetoed"], list)
        assert set(a["plan"]) >= {"theta_new", "free_cap", "stages", "plan_tokens", "missing_tokens", "stage_plan"}
        ext = a["extension"]
        if ext is not None:
            assert {"method", "factor", "config"} <= set(ext)
            assert isinstance(ext["config"], dict)
    assert pick_json("--ctx", "128k")["extension"] is None
    assert pick_json("--ctx", "32k", "--config", configs["llama8k"])["extension"]["method"] == "yarn"


def test_json_has_no_template_left_unfilled(configs: dict[str, str]) -> None:
    for args in SCENARIO_ARGS.values():
        text = json.dumps(pick_json(*[configs.get(a, a) for a in args]))
        assert not re.search(r"\{[a-z_]+(:[^{}]*)?\}", text), text


# ---------------------------------------------------------------- README scenarios

# name -> pick arguments; config names are replaced by the fixture's paths
SCENARIO_ARGS: dict[str, tuple[str, ...]] = {
    "new-4k": ("--ctx", "4k"),
    "new-128k": ("--ctx", "128k"),
    "new-8k-to-128k-20B": ("--ctx", "128k", "--trained-ctx", "8k", "--budget", "20B"),
    "new-strong": ("--ctx", "128k", "--trained-ctx", "32k", "--extrapolation", "strong"),
    "llama8k-to-32k": ("--ctx", "32k", "--config", "llama8k"),
    "llama4k-to-128k": ("--ctx", "128k", "--config", "llama4k"),
    "llama4k-to-128k-2B": ("--ctx", "128k", "--config", "llama4k", "--budget", "2B"),
    "qwen32k-to-1M": ("--ctx", "1M", "--config", "qwen32k"),
    "qwen32k-to-1M-10B": ("--ctx", "1M", "--config", "qwen32k", "--budget", "10B"),
    "bloom": ("--ctx", "8k", "--config", "bloom", "--trained-ctx", "2k"),
    "gpt2": ("--ctx", "4k", "--config", "gpt2"),
}


def scenario(name: str, configs: dict[str, str]) -> dict[str, Any]:
    return pick_json(*[configs.get(a, a) for a in SCENARIO_ARGS[name]])


@pytest.mark.parametrize(("ctx", "theta"), [("4k", 500000), ("8k", 500000), ("32k", 1e6), ("128k", 1e7),
                                            ("256k", 1e7), ("1M", 1e8)])
def test_new_model_theta_follows_the_trained_length(ctx: str, theta: float) -> None:
    a = pick_json("--ctx", ctx)
    assert a["rule"] == "new-rope" and a["extension"] is None
    assert a["hyperparameters"]["theta"] == theta


def test_new_model_theta_is_echoed() -> None:
    a = pick_json("--ctx", "32k", "--theta", "2e6")
    assert a["hyperparameters"]["theta"] == 2000000 and "--theta" in a["reason"]


def test_new_model_staged_plan_is_sized_by_the_budget() -> None:
    a = pick_json("--ctx", "128k", "--trained-ctx", "8k", "--budget", "20B")
    assert a["rule"] == "new-staged"
    p = a["plan"]
    # the budget pays for both x4 stages (2 x 500M), so the plan trains at the target: no training-free jump
    assert (p["train_to"], p["stages"], p["final_jump"]) == (131072, 2, 1.0)
    assert p["plan_tokens"] == 20 * 10**9 and "20B" in a["extension"]["fine_tune_tokens"]
    assert "8k -> 32k" in a["reason"] and "32k -> 128k" in a["reason"] and "training-free" not in a["reason"]
    # one stage's worth: 8k -> 32k trained, the last x4 training-free
    one = pick_json("--ctx", "128k", "--trained-ctx", "8k", "--budget", "700M")
    assert one["rule"] == "new-staged-partial"
    assert (one["plan"]["train_to"], one["plan"]["stages"], one["plan"]["final_jump"]) == (32768, 1, 4.0)
    assert "training-free x4 to 128k" in one["reason"] and "1 of the 2" in one["reason"]
    assert niah_lengths(one) == [131072, 32768]
    small = pick_json("--ctx", "128k", "--trained-ctx", "8k", "--budget", "100M")
    assert small["rule"] == "new-staged-short-budget" and small["plan"]["missing_tokens"] == 400 * 10**6
    assert small["extension"]["to"] == 32768  # a training-free x4 meanwhile


def test_strong_extrapolation_says_no_encoding_retrieves_there_untrained(configs: dict[str, str]) -> None:
    a = scenario("new-strong", configs)
    assert a["rule"] == "new-strong" and "RoPE" in a["encoding"]
    assert "layers without positions" in a["reason"]
    assert "ALiBi only for recency-heavy" in a["hyperparameters"]["options"]
    assert a["extension"]["to"] == 131072 and a["extension"]["fine_tune"] is False
    assert_regression_with_extension(a)


def test_existing_8k_rope_to_32k_no_budget_uses_scale_code(configs: dict[str, str]) -> None:
    a = scenario("llama8k-to-32k", configs)
    assert a["rule"] == "existing-rope-training-free"
    assert a["inputs"]["model_encoding"] == "rope" and a["inputs"]["trained_ctx"] == 8192
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["from"], ext["to"], ext["fine_tune"]) == ("yarn", 4, 8192, 32768, False)
    expected = format_hf(make_request("yarn", original_max=8192, target=32768, theta=500000.0, head_dim=128))
    assert ext["config"] == expected
    # the command pick quotes gives the same config for this model
    argv = shlex.split(ext["command"].replace("MODEL", configs["llama8k"]))
    assert argv[:2] == ["posenc", "scale"]
    assert json.loads(ok(run(*argv[1:])).stdout) == ext["config"]
    assert_niah_at_deployed_length(a)
    assert_regression_with_extension(a)


def test_existing_4k_to_128k_no_budget_is_capped_at_x4(configs: dict[str, str]) -> None:
    a = scenario("llama4k-to-128k", configs)
    assert a["rule"] == "existing-rope-cap"
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["from"], ext["to"], ext["fine_tune"]) == ("yarn", 4, 4096, 16384, False)
    assert a["plan"]["missing_tokens"] == 10**9  # two stages x 500M
    assert_niah_at_deployed_length(a)
    assert_regression_with_extension(a)


def test_existing_4k_to_128k_with_2b_budget_is_staged(configs: dict[str, str]) -> None:
    a = scenario("llama4k-to-128k-2B", configs)
    assert a["rule"] == "existing-rope-staged"
    assert a["vetoed"] == []
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["to"], ext["fine_tune"]) == ("yarn", 32, 131072, True)
    # 2B pays three x4 stages of 500M to the target itself (YaRN, DeepSeek-V3 and Llama 3.1 trained there)
    assert "2B over 3 stage(s)" in ext["fine_tune_tokens"]
    assert "4k -> 16k" in a["reason"] and "16k -> 64k" in a["reason"] and "64k -> 128k" in a["reason"]
    assert "then a training-free" not in a["reason"] and "training-free" not in ext["note"]
    assert a["plan"]["final_jump"] == 1 and a["plan"]["train_to"] == 131072
    assert "(16k, 64k and 128k)" in " ".join(a["test_plan"])
    assert_niah_at_deployed_length(a)


def test_existing_32k_to_1m(configs: dict[str, str]) -> None:
    capped = scenario("qwen32k-to-1M", configs)
    assert capped["rule"] == "existing-rope-cap"
    ext = capped["extension"]
    assert (ext["factor"], ext["to"], ext["fine_tune"]) == (4, 131072, False)
    staged = scenario("qwen32k-to-1M-10B", configs)
    assert staged["rule"] == "existing-rope-staged"
    # 10B pays the three stages to 1M (32k -> 128k -> 512k -> 1M), so the plan trains at 1M
    assert staged["plan"]["train_to"] == 1048576 and staged["plan"]["final_jump"] == 1
    assert staged["plan"]["stages"] == 3 and staged["plan"]["plan_tokens_min"] == 15 * 10**8
    assert_niah_at_deployed_length(staged)


def test_a_large_budget_offers_abf(configs: dict[str, str]) -> None:
    a = pick_json("--ctx", "1M", "--config", configs["qwen32k"], "--budget", "300B")
    assert a["rule"] == "existing-rope-abf"
    # ABF trains to the target (1M): theta 1e8, the table's row beyond 256k (GLM-4-9B-Chat-1M)
    assert a["hyperparameters"]["theta"] == 1e8 and "1e+06" in a["reason"]


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct.json", "deepseek-v3.json", "gpt-oss-20b.json"])
def test_shipped_extended_models_are_kept_within_their_window(name: str) -> None:
    path = str(Path(__file__).resolve().parents[1] / "corpus" / name)
    cfg = json.loads(Path(path).read_text())
    window = cfg["max_position_embeddings"]
    a = pick_json("--ctx", str(window), "--config", path)
    assert a["rule"] == "existing-within-trained" and a["extension"] is None


@pytest.mark.parametrize(("name", "method"), [("llama-3.1-8b-instruct.json", "llama3"),
                                              ("gpt-oss-20b.json", "yarn"), ("deepseek-v3.json", "yarn")])
def test_extending_an_extended_model_keeps_its_family(name: str, method: str) -> None:
    path = str(Path(__file__).resolve().parents[1] / "corpus" / name)
    cfg = json.loads(Path(path).read_text())
    window = cfg["max_position_embeddings"]
    a = pick_json("--ctx", str(2 * window), "--config", path)
    ext = a["extension"]
    assert ext["method"] == method and ext["to"] == 2 * window
    original = cfg["rope_scaling"]["original_max_position_embeddings"]
    # the model's own factor times the jump from its window (Llama 3.1: x8 -> x16 for 128k -> 256k)
    assert ext["from"] == original and ext["factor"] == 2 * cfg["rope_scaling"]["factor"]
    own = {k: v for k, v in cfg["rope_scaling"].items() if k in ("beta_fast", "beta_slow", "truncate", "mscale",
                                                                 "mscale_all_dim", "low_freq_factor",
                                                                 "high_freq_factor")}
    params = ext["config_v5"]["rope_parameters"]
    assert {k: params[k] for k in own} == own
    # the emitted config reads back as the same family in posenc inspect
    with_ext = {**cfg, "rope_scaling": None, **ext["config"]}
    out = ok(run("inspect", "-", "--json", input=json.dumps(with_ext)))
    assert json.loads(out.stdout)["rope_type"] == method


def test_phi3_longrope_is_not_given_a_yarn_dict() -> None:
    path = str(Path(__file__).resolve().parents[1] / "fixtures" / "phi-3-mini-128k.json")
    a = pick_json("--ctx", "256k", "--config", path)
    assert a["rule"] == "existing-longrope" and a["extension"] is None
    assert "LongRoPE's evolutionary search" in " ".join(a["test_plan"])


def test_training_free_past_x4_only_when_asked(configs: dict[str, str]) -> None:
    default = pick_json("--ctx", "64k", "--config", configs["llama8k"])
    assert default["extension"]["to"] == 32768  # x4, with the rest left to training
    asked = pick_json("--ctx", "64k", "--config", configs["llama8k"], "--extrapolation", "moderate")
    assert asked["rule"] == "existing-rope-training-free-asked" and asked["extension"]["to"] == 65536
    assert "Warning" in asked["extension"]["note"] and "pass rate >= 80%" in " ".join(asked["test_plan"])


def test_typical_ctx_sizes_the_training_free_factor() -> None:
    path = str(Path(__file__).resolve().parents[1] / "corpus" / "qwen2.5-7b-instruct.json")
    a = pick_json("--ctx", "128k", "--config", path, "--typical-ctx", "64k")
    assert a["extension"]["factor"] == 2 and a["extension"]["to"] == 65536
    assert "--typical-ctx" in a["extension"]["note"]


def test_alibi_model_from_config(configs: dict[str, str]) -> None:
    a = scenario("bloom", configs)
    assert a["inputs"]["model_encoding"] == "alibi"
    assert a["rule"] == "existing-alibi-cap"  # 4x past its 2k: beyond ALiBi's evidence without training
    assert a["extension"] is None and a["hyperparameters"]["deploy"] == "4k"
    assert [float(s) for s in a["hyperparameters"]["slopes"].split(",")] == pytest.approx(
        alibi_slopes_official(32), rel=1e-5)
    near = pick_json("--ctx", "4k", "--trained-ctx", "2k", "--config", configs["bloom"])
    assert near["rule"] == "existing-alibi-double"
    assert "Far retrieval is not promised" in " ".join(near["test_plan"])
    funded = pick_json("--ctx", "64k", "--trained-ctx", "2k", "--config", configs["bloom"], "--budget", "1B")
    assert funded["rule"] == "existing-alibi-finetune"
    assert_usage_error(run("pick", "--ctx", "8k", "--config", configs["bloom"]), "--trained-ctx")


def test_learned_position_model_from_config(configs: dict[str, str]) -> None:
    a = scenario("gpt2", configs)
    assert a["inputs"]["model_encoding"] == "learned" and a["inputs"]["trained_ctx"] == 1024
    assert a["rule"] == "existing-learned-positions"
    assert a["extension"] is None
    assert "1k" in a["encoding"]  # capped at the table's length


def test_scenarios_are_distinct_and_test_where_they_deploy(configs: dict[str, str]) -> None:
    answers = {name: scenario(name, configs) for name in SCENARIO_ARGS}
    keys = {name: (a["rule"], a["hyperparameters"].get("theta"),
                   a["extension"] and (a["extension"]["factor"], a["extension"]["to"]))
            for name, a in answers.items()}
    assert len(set(keys.values())) == len(keys), keys
    for a in answers.values():
        assert_niah_at_deployed_length(a)
        assert_regression_with_extension(a)
        # no plan compares a length with itself
        assert not any(re.search(r"perplexity at (\S+) within .* at \1$", t) for t in a["test_plan"])


def test_target_shorter_than_trained_is_an_answer_not_an_error(configs: dict[str, str]) -> None:
    a = pick_json("--ctx", "8k", "--config", configs["qwen32k"])
    assert a["rule"] == "existing-within-trained"
    assert a["extension"] is None
    assert "within" in a["reason"] and "32k" in a["reason"] and "8k" in a["reason"]
    b = pick_json("--ctx", "8k", "--trained-ctx", "32k")
    assert b["extension"] is None and b["encoding"] == "RoPE"


def test_extrapolation_is_honoured_with_a_config(configs: dict[str, str]) -> None:
    a = pick_json("--ctx", "64k", "--config", configs["llama8k"], "--extrapolation", "moderate")
    b = pick_json("--ctx", "64k", "--config", configs["llama8k"])
    assert a["rule"] != b["rule"] and a["inputs"]["extrapolation"] == "moderate"


# ---------------------------------------------------------------- --explain


def test_explain_goes_to_stderr_and_json_stays_clean(configs: dict[str, str]) -> None:
    result = ok(run("pick", "--ctx", "128k", "--config", configs["llama4k"], "--explain", "--json"))
    answer = json.loads(result.stdout)
    assert answer["rule"] == "existing-rope-cap"
    trace = result.stderr
    positions = [trace.index(f"  {rid}: ") for rid in DEFAULT_RULE_IDS]
    assert positions == sorted(positions)
    assert trace.count("FIRED") == 1
    assert re.search(r"existing-rope-cap: FIRED", trace)
    assert "held" in trace and "failed" in trace


def test_explain_with_text_output() -> None:
    result = ok(run("pick", "--ctx", "4k", "--explain"))
    assert "1. Encoding" in result.stdout and "FIRED" not in result.stdout
    assert result.stderr.count("FIRED") == 1 and "new-rope: FIRED" in result.stderr


@pytest.mark.parametrize("ctx", ["", "abc", "0", "-1k", "1e999", "128kk", "12.5.3k"])
def test_bad_ctx(ctx: str) -> None:
    assert_usage_error(run("pick", "--ctx", ctx), "--ctx", repr(ctx))


@pytest.mark.parametrize("budget", ["lots", "-1B"])
def test_bad_budget(budget: str) -> None:
    assert_usage_error(run("pick", "--ctx", "4k", "--budget", budget), "--budget", repr(budget))


def test_bad_extrapolation() -> None:
    assert_usage_error(run("pick", "--ctx", "4k", "--extrapolation", "extreme"), "'extreme'", "strong")


def test_missing_config(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    assert_usage_error(run("pick", "--ctx", "4k", "--config", missing), missing)


def test_malformed_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"model_type": "llama",', encoding="utf-8")
    assert_usage_error(run("pick", "--ctx", "4k", "--config", str(path)), str(path), "JSON")


def test_missing_rules(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    assert_usage_error(run("pick", "--ctx", "4k", "--rules", missing), missing)


def test_odd_head_dim() -> None:
    assert_usage_error(run("pick", "--ctx", "4k", "--head-dim", "7"), "--head-dim", "7")


@pytest.mark.parametrize(("option", "value"), [("--heads", "0"), ("--theta", "nan"), ("--theta", "0"),
                                               ("--trained-ctx", "abc")])
def test_other_bad_numbers(option: str, value: str) -> None:
    assert_usage_error(run("pick", "--ctx", "4k", option, value), option)


def test_missing_ctx() -> None:
    assert_usage_error(run("pick"), "--ctx")


# ---------------------------------------------------------------- rules show / validate


def test_rules_show_lists_rules_in_order_and_guards() -> None:
    out = ok(run("rules", "show")).stdout
    positions = [out.index(f" {rid}: when ") for rid in DEFAULT_RULE_IDS]
    assert positions == sorted(positions)
    for guard in GUARDS:
        assert guard in out
    assert out.index("hard guards") > positions[-1]


def test_rules_show_json() -> None:
    data = json.loads(ok(run("rules", "show", "--json")).stdout)
    assert [r["id"] for r in data["rules"]] == DEFAULT_RULE_IDS
    assert data["guards"] == list(GUARDS)
    assert data["version"] == 1


def test_rules_validate_default() -> None:
    default = str(Path(__file__).resolve().parents[2] / "rules" / "default.yaml")
    result = ok(run("rules", "validate", default))
    assert result.stdout.startswith(f"ok: {default}: {len(DEFAULT_RULE_IDS)} rules")


def test_pick_with_custom_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        rules:
          - id: always-alibi
            when: []
            encoding: ALiBi
            reason: house style
            hyperparameters: {slopes: "{alibi_slopes}"}
            test_plan:
              - niah: {length: ctx, pass_rate: 0.5}
            fallback: none
            why: because
        """) + "\n".join(line for line in (ROOT_RULES.read_text().split("\nderived:")[0].split("\n"))
                         if not line.startswith(("version", "#"))) + "\n", encoding="utf-8")
    a = pick_json("--ctx", "128k", "--heads", "8", "--rules", str(path))
    assert a["rule"] == "always-alibi"
    assert a["rules_file"] == str(path)
    assert [float(s) for s in a["hyperparameters"]["slopes"].split(",")] == [2.0**-i for i in range(1, 9)]


# ---------------------------------------------------------------- import guard

IMPORT_PROBE = """
import io, json, sys
out = io.StringIO()
real, sys.stdout = sys.stdout, out
from posenc_cli.cli import app
try:
    app(["pick", "--ctx", "128k", "--json"], standalone_mode=False)
except SystemExit:
    pass
sys.stdout = real
print(json.dumps({"rule": json.loads(out.getvalue())["rule"],
                  "numpy": "numpy" in sys.modules, "matplotlib": "matplotlib" in sys.modules}))
"""


def test_pick_imports_neither_numpy_nor_matplotlib() -> None:
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"rule": "new-rope", "numpy": False, "matplotlib": False}, report


EMITTING = [("--ctx", "32k", "--config", "llama8k"), ("--ctx", "128k", "--config", "llama4k", "--budget", "2B"),
            ("--ctx", "64k", "--config", "llama8k", "--extrapolation", "moderate")]


@pytest.mark.parametrize("args", EMITTING, ids=[" ".join(a) for a in EMITTING])
def test_every_emitted_config_passes_inspect_and_check(args: tuple[str, ...], configs: dict[str, str],
                                                      tmp_path: Path) -> None:
    a = pick_json(*[configs.get(x, x) for x in args])
    model = json.loads(Path(configs[args[args.index("--config") + 1]]).read_text())
    patched = write_json(tmp_path, {**model, **a["extension"]["config"]}, "patched.json")
    ok(run("inspect", patched, "--lint"))
    assert ok(run("check", patched, "--engines", "hf,vllm,sglang,llama.cpp")).exit_code == 0


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct.json", "gpt-oss-20b.json"])
def test_extending_a_shipped_model_emits_a_config_every_engine_agrees_on(name: str, tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[1] / "corpus" / name
    cfg = json.loads(path.read_text())
    a = pick_json("--ctx", str(2 * cfg["max_position_embeddings"]), "--config", str(path))
    patched = write_json(tmp_path, {**cfg, **a["extension"]["config"]}, "patched.json")
    ok(run("inspect", patched))
    result = run("check", patched, "--engines", "hf,vllm")
    assert result.exit_code == 0, result.stdout


CORPUS = sorted(p for p in (Path(__file__).resolve().parents[1] / "corpus").glob("*.json") if p.name != "SOURCES.json")


@pytest.mark.parametrize("extra", [("--ctx", "256k"), ("--ctx", "1M", "--budget", "10B")],
                         ids=["256k-free", "1M-10B"])
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_no_shipped_model_is_given_a_config_it_would_misread(path: Path, extra: tuple[str, ...],
                                                            tmp_path: Path) -> None:
    """Whatever pick emits for a real config lints clean (no remapped or ignored keys) and matches in transformers."""
    cfg = json.loads(path.read_text())
    result = run("pick", *extra, "--config", str(path), "--json")
    if result.exit_code == 2:  # a config pick cannot read positions from: one clean line, nothing to emit
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
        return
    answer = json.loads(ok(result).stdout)
    if answer["extension"] is None:
        return
    emitted = answer["extension"]["config"]
    if "text_config" in cfg:  # a multimodal model's answer goes into its text_config
        assert set(emitted) == {"text_config"}, emitted
    where = text_config(cfg)[2].removesuffix(ABSENT)
    if where:  # the answer is nested where the file keeps its language model (text_config, language_config, ...)
        assert set(emitted) == {where.split(".")[0]}, (where, emitted)

    def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        return {**base, **{k: merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict)
                           and k in where.split(".") else v for k, v in new.items()}}

    merged = merge(cfg, emitted)
    assert ("rope_parameters" in json.dumps(emitted)) == ("rope_parameters" in json.dumps(cfg)
                                                          and "rope_scaling" not in json.dumps(cfg)), emitted
    patched = write_json(tmp_path, merged, "patched.json")

    def lint_codes(config_path: str) -> set[str]:
        out = run("inspect", config_path, "--lint", "--json")
        assert out.exit_code in (0, 1), out.stderr
        # Ollama's converter drops any YaRN of a llama/qwen2 config (models/ollama_convert.py): not pick's to avoid
        return {p["code"] for p in json.loads(out.stdout)["lint"]} - {"ollama-converter-drops"}

    # no problem the shipped file did not already have (Gemma 3's engine caveat about linear scaling stays)
    assert lint_codes(patched) <= lint_codes(str(path))
    ok(run("check", patched, "--engines", "hf"))


def corpus(name: str) -> str:
    return str(Path(__file__).resolve().parents[1] / "corpus" / name)


def test_phi3_model_without_longrope_gets_no_yarn_dict() -> None:
    a = pick_json("--ctx", "64k", "--config", corpus("phi-4.json"))
    assert a["rule"] == "existing-phi3" and a["extension"] is None
    # the way out it names is a rope type Phi3Config keeps
    # the way out it names is a rope type Phi3Config keeps, as a command naming the model, which runs
    line = f"posenc scale ntk --config {corpus('phi-4.json')} --target 64k"
    assert line in " ".join(a["test_plan"])
    assert ok(run(*shlex.split(line)[1:])).exit_code == 0
    # Phi3Config rejects any other scaling dict, so posenc refuses to write one
    assert_usage_error(run("scale", "linear", "--config", corpus("phi-4.json"), "--target", "64k"), "longrope")


def test_gemma3_linear_keeps_its_factor_and_its_sliding_layers() -> None:
    cfg = json.loads(Path(corpus("gemma-3-4b-it.json")).read_text())
    old = cfg["text_config"]["rope_scaling"]["factor"]
    a = pick_json("--ctx", "256k", "--config", corpus("gemma-3-4b-it.json"))
    ext = a["extension"]
    # the file names no rope_theta: Gemma3TextConfig's default for global layers is 1e6 (local: 10000)
    assert ext["method"] == "linear" and a["hyperparameters"]["theta"] == 1_000_000
    # 128k -> 256k is x2 on top of the shipped x8, not a replacement of it by x2
    assert ext["config"]["text_config"]["rope_scaling"]["factor"] == old * 2


def test_nested_rope_parameters_change_only_the_extended_group(tmp_path: Path) -> None:
    cfg = json.loads(Path(corpus("gemma-3-4b-it.json")).read_text())
    text = cfg["text_config"]
    nested = {k: v for k, v in text.items() if k not in ("rope_scaling", "rope_theta", "rope_local_base_freq")}
    nested["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}
    path = write_json(tmp_path, {**cfg, "text_config": nested}, "gemma3-v5.json")
    a = pick_json("--ctx", "256k", "--config", path)
    params = a["extension"]["config"]["text_config"]["rope_parameters"]
    assert params["sliding_attention"] == nested["rope_parameters"]["sliding_attention"]
    assert params["full_attention"]["factor"] == 16.0 and "--engine" not in a["extension"]["command"]
    assert a["extension"]["config_format"] == "hf-v5"
    # the "same numbers" command names the file and prints the same fragment (scale keeps the file's v5 format)
    argv = shlex.split(a["extension"]["command"])
    assert argv[:2] == ["posenc", "scale"] and path in argv
    assert json.loads(ok(run(*argv[1:])).stdout) == a["extension"]["config"]
    merged = write_json(tmp_path, {**cfg, "text_config": {**nested, **a["extension"]["config"]["text_config"]}},
                        "merged.json")
    ok(run("check", merged, "--engines", "hf"))


def test_a_rope_type_pick_cannot_keep_is_not_replaced() -> None:
    a = pick_json("--ctx", "1M", "--config", corpus("gemma-4-26b-a4b.json"))
    assert a["rule"] == "existing-rope-other-type" and a["extension"] is None
    assert a["hyperparameters"]["head_dim"] == 512  # the full-attention layers' global_head_dim
    # a budget for ABF does not change that: a new rope_theta would replace proportional rope too
    funded = pick_json("--ctx", "1M", "--config", corpus("gemma-4-26b-a4b.json"), "--budget", "100B")
    assert funded["rule"] == "existing-rope-unwritable" and funded["extension"] is None


@pytest.mark.parametrize(("budget", "rule", "tuned"), [
    ("0", "existing-rope-training-free", False),
    ("100M", "existing-rope-training-free", False),  # below one stage's 500M: not worth a stage
    ("20B", "existing-rope-finetune", True),  # Code Llama's 4k -> 16k
    ("400B", "existing-rope-abf", None),  # Llama 2 Long's budget raises theta
])
def test_the_budget_shapes_a_short_extension(budget: str, rule: str, tuned: bool | None,
                                             configs: dict[str, str]) -> None:
    a = pick_json("--ctx", "16k", "--config", configs["llama4k"], "--budget", budget)
    assert a["rule"] == rule
    if tuned is None:
        assert a["extension"]["method"] == "abf" and a["hyperparameters"]["theta"] > 10000
    else:
        assert a["extension"]["fine_tune"] is tuned and a["extension"]["factor"] == 4.0
        assert a["plan"]["stages"] == int(tuned) and a["plan"]["plan_tokens"] == (2 * 10**10 if tuned else 0)


@pytest.mark.parametrize("name", list(SCENARIO_ARGS))
def test_the_test_plan_is_also_data(name: str, configs: dict[str, str]) -> None:
    """`tests` is `test_plan` as numbers a harness can run: the same tests, lengths and thresholds."""
    a = scenario(name, configs)
    assert len(a["tests"]) == len(a["test_plan"]) and a["tests"]
    for spec, line in zip(a["tests"], a["test_plan"], strict=True):
        if spec["kind"] == "text":
            assert spec == {"kind": "text", "text": line}
            continue
        assert isinstance(spec["length"], int)
        if spec["kind"] == "ruler":  # RULER's tasks: both effective lengths, the threshold x100 and NoLiMa's ratio
            assert f"up to {format_length(spec['length'])}: " in line
            assert f"average score >= {spec['threshold'] * 100:g}" in line and f">= {spec['ratio']:.0%}" in line
            continue
        if spec["kind"] == "niah":
            assert f"({spec['length']:,} tokens" in line
        else:
            assert f"at {format_length(spec['length'])} " in line
        threshold = spec.get("pass_rate", spec.get("margin"))
        assert isinstance(threshold, float) and 0 < threshold <= 1 and f"{threshold:.0%}" in line
    assert any(t["kind"] == "niah" for t in a["tests"])


@pytest.mark.parametrize(("budget", "rule"), [("0", "new-training-free"), ("5B", "new-finetune")])
def test_a_new_models_budget_buys_a_stage_at_the_target(budget: str, rule: str) -> None:
    a = pick_json("--ctx", "128k", "--trained-ctx", "32k", "--budget", budget)
    assert a["rule"] == rule and a["extension"]["factor"] == 4.0
    assert a["extension"]["fine_tune"] is (rule == "new-finetune")
    assert a["hyperparameters"]["theta"] == 1e6  # theta_by_length at 32k


@pytest.mark.parametrize(("value", "needle"), [("256k", "between 1 and --ctx"), ("0", "--typical-ctx"),
                                               ("lots", "--typical-ctx")])
def test_bad_typical_ctx(value: str, needle: str) -> None:
    assert_usage_error(run("pick", "--ctx", "128k", "--typical-ctx", value), needle)


def test_every_assumed_value_is_named() -> None:
    """A new model's plan rests on posenc's default head_dim unless one is given: said on stderr and in the JSON."""
    result = run("pick", "--ctx", "128k")
    assert result.exit_code == 0
    assert "note: assumed head_dim 128 (no --head-dim and no --config); pass your model's" in result.stderr
    assert json.loads(run("pick", "--ctx", "128k", "--json").stdout)["inputs"]["assumed"] == {"head_dim": 128}
    given = run("pick", "--ctx", "128k", "--head-dim", "64", "--json")
    assert json.loads(given.stdout)["inputs"]["assumed"] == {} and "assumed" not in given.stderr
    qwen = ROOT_RULES.parents[1] / "tests" / "corpus" / "qwen2.5-7b-instruct.json"
    model = run("pick", "--ctx", "128k", "--config", str(qwen))
    assert model.exit_code == 0 and "assumed" not in model.stderr


def test_a_round_decimal_length_is_noted_and_used_as_given() -> None:
    decimal = run("pick", "--ctx", "128000", "--json")
    assert decimal.exit_code == 0
    assert "note: --ctx 128000 tokens is 125k; 128k is 131,072" in decimal.stderr
    assert json.loads(decimal.stdout)["inputs"]["ctx"] == 128000
    assert "tokens is" not in run("pick", "--ctx", "128k").stderr
