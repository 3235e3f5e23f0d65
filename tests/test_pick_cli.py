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

from posenc_cli.rules import GUARDS, load_rules
from posenc_cli.scaling import format_hf, make_request
from posenc_cli.slopes import alibi_slope_list

DEFAULT_RULE_IDS = [rule.id for rule in load_rules().rules]
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
    ctx = answer["inputs"]["ctx"]
    if ctx < 32 * K and answer["extension"] is None:
        return
    deployed = answer["extension"]["to"] if answer["extension"] else ctx
    lengths = niah_lengths(answer)
    assert deployed in lengths, (deployed, answer["test_plan"])
    assert ctx in lengths, (ctx, answer["test_plan"])


# ---------------------------------------------------------------- the five parts


def test_pick_128k_prints_the_five_parts() -> None:
    out = ok(run("pick", "--ctx", "128k")).stdout
    positions = [out.index(h) for h in HEADINGS]
    assert positions == sorted(positions)
    assert re.search(r"^rule: new-long: ", out, re.M), out
    assert "131,072 tokens" in out  # the needle test at the full deployed length
    assert not out.lstrip().startswith("{")


def test_pick_text_shows_the_extension_config(configs: dict[str, str]) -> None:
    out = ok(run("pick", "--ctx", "32k", "--config", configs["llama8k"])).stdout
    ext = out[out.index("3. Extension"):out.index("4. Test plan")]
    assert "yarn x4: 8k -> 32k" in ext
    assert '"original_max_position_embeddings": 8192' in ext
    assert "posenc scale yarn --original-max 8k --target 32k" in ext


def test_json_shape(configs: dict[str, str]) -> None:
    for args in (("--ctx", "128k"), ("--ctx", "32k", "--config", configs["llama8k"])):
        a = pick_json(*args)
        for key in ("encoding", "reason", "fallback", "rule", "why"):
            assert isinstance(a[key], str) and a[key], key
        assert a["rule"] in DEFAULT_RULE_IDS
        assert isinstance(a["hyperparameters"], dict)
        assert isinstance(a["test_plan"], list) and a["test_plan"]
        assert all(isinstance(t, str) and t for t in a["test_plan"])
        assert isinstance(a["vetoed"], list)
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
    "new-strong": ("--ctx", "128k", "--extrapolation", "strong", "--heads", "12"),
    "llama8k-to-32k": ("--ctx", "32k", "--config", "llama8k"),
    "llama4k-to-128k": ("--ctx", "128k", "--config", "llama4k"),
    "llama4k-to-128k-2B": ("--ctx", "128k", "--config", "llama4k", "--budget", "2B"),
    "qwen32k-to-1M": ("--ctx", "1M", "--config", "qwen32k"),
    "qwen32k-to-1M-10B": ("--ctx", "1M", "--config", "qwen32k", "--budget", "10B"),
    "bloom": ("--ctx", "8k", "--config", "bloom"),
    "gpt2": ("--ctx", "4k", "--config", "gpt2"),
}


def scenario(name: str, configs: dict[str, str]) -> dict[str, Any]:
    return pick_json(*[configs.get(a, a) for a in SCENARIO_ARGS[name]])


def test_new_model_4k(configs: dict[str, str]) -> None:
    a = scenario("new-4k", configs)
    assert a["rule"] == "new-short"
    assert a["encoding"] == "RoPE"
    assert a["hyperparameters"]["theta"] == 10000
    assert a["extension"] is None
    assert a["vetoed"] == []


def test_new_model_128k(configs: dict[str, str]) -> None:
    a = scenario("new-128k", configs)
    assert a["rule"] == "new-long"
    assert a["encoding"] == "RoPE"
    assert float(a["hyperparameters"]["theta"]) >= 1e6
    assert a["extension"] is None
    assert niah_lengths(a) == [131072]


def test_reference_alibi_slopes_known_values() -> None:
    assert alibi_slopes_official(8) == [2.0**-i for i in range(1, 9)]
    assert alibi_slopes_official(12)[8:] == pytest.approx([2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5])


@pytest.mark.parametrize("heads", [12, 32, 40])
def test_new_model_strong_extrapolation_is_alibi_with_official_slopes(heads: int) -> None:
    a = pick_json("--ctx", "128k", "--extrapolation", "strong", "--heads", str(heads))
    assert a["rule"] == "new-extrapolate-strong"
    assert a["encoding"] == "ALiBi"
    assert a["extension"] is None
    slopes = [float(s) for s in a["hyperparameters"]["slopes"].split(",")]
    assert len(slopes) == heads
    assert slopes == pytest.approx(alibi_slope_list(heads), rel=1e-5)
    assert slopes == pytest.approx(alibi_slopes_official(heads), rel=1e-5)
    # the human-readable answer quotes the same slopes
    text = ok(run("pick", "--ctx", "128k", "--extrapolation", "strong", "--heads", str(heads))).stdout
    line = re.search(r"^\s+slopes: (.+)$", text, re.M)
    assert line, text
    assert [float(s) for s in line.group(1).split(",")] == pytest.approx(alibi_slopes_official(heads), rel=1e-5)


def test_existing_8k_rope_to_32k_no_budget_uses_scale_code(configs: dict[str, str]) -> None:
    a = scenario("llama8k-to-32k", configs)
    assert a["rule"] == "existing-rope-yarn-no-finetune"
    assert a["inputs"]["model_encoding"] == "rope" and a["inputs"]["trained_ctx"] == 8192
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["from"], ext["to"], ext["fine_tune"]) == ("yarn", 4, 8192, 32768, False)
    expected = format_hf(make_request("yarn", original_max=8192, target=32768, theta=500000.0, head_dim=128))
    assert ext["config"] == expected
    scale = ok(run("scale", "yarn", "--original-max", "8k", "--target", "32k", "--theta", "500000",
                   "--head-dim", "128"))
    assert ext["config"] == json.loads(scale.stdout)
    # the command pick quotes gives the same config too
    argv = shlex.split(ext["command"])
    assert argv[:2] == ["posenc", "scale"]
    assert json.loads(ok(run(*argv[1:])).stdout) == ext["config"]
    assert_niah_at_deployed_length(a)


def test_existing_4k_to_128k_no_budget_is_capped_by_the_guard(configs: dict[str, str]) -> None:
    a = scenario("llama4k-to-128k", configs)
    assert {"rule": "existing-rope-yarn-no-finetune", "guard": "no-scaling-above-8x-without-fine-tuning"} in a["vetoed"]
    assert a["rule"] == "existing-rope-cap-at-8x"
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["from"], ext["to"], ext["fine_tune"]) == ("yarn", 8, 4096, 32768, False)
    assert ext["config"] == format_hf(make_request("yarn", factor=8.0, original_max=4096, theta=10000.0,
                                                   head_dim=128))
    assert_niah_at_deployed_length(a)


def test_existing_4k_to_128k_with_2b_budget(configs: dict[str, str]) -> None:
    a = scenario("llama4k-to-128k-2B", configs)
    assert a["rule"] == "existing-rope-yarn-finetune"
    assert a["vetoed"] == []
    ext = a["extension"]
    assert (ext["method"], ext["factor"], ext["to"], ext["fine_tune"]) == ("yarn", 32, 131072, True)
    assert "2B" in ext["fine_tune_tokens"]
    assert ext["config"] == format_hf(make_request("yarn", original_max=4096, target=131072, theta=10000.0,
                                                   head_dim=128, fine_tuned=True))
    assert_niah_at_deployed_length(a)


def test_existing_32k_to_1m(configs: dict[str, str]) -> None:
    capped = scenario("qwen32k-to-1M", configs)
    assert capped["rule"] == "existing-rope-cap-at-8x"
    assert any(v["guard"] == "no-scaling-above-8x-without-fine-tuning" for v in capped["vetoed"])
    ext = capped["extension"]
    assert (ext["factor"], ext["to"], ext["fine_tune"]) == (8, 262144, False)
    assert_niah_at_deployed_length(capped)

    staged = scenario("qwen32k-to-1M-10B", configs)
    assert staged["rule"] == "existing-rope-progressive"
    assert staged["vetoed"] == []
    ext = staged["extension"]
    assert (ext["method"], ext["factor"], ext["to"], ext["fine_tune"]) == ("yarn", 32, 1 << 20, True)
    assert "256k" in ext["note"]  # stage 1: x8 to 256k
    assert_niah_at_deployed_length(staged)


def test_alibi_model_from_config(configs: dict[str, str]) -> None:
    a = scenario("bloom", configs)
    assert a["inputs"]["model_encoding"] == "alibi"
    assert a["rule"] == "existing-alibi"
    assert a["extension"] is None
    assert [float(s) for s in a["hyperparameters"]["slopes"].split(",")] == pytest.approx(
        alibi_slopes_official(32), rel=1e-5)
    # with its real trained length, and far past it: still no extension, needle test at the full length
    far = pick_json("--ctx", "32k", "--trained-ctx", "2k", "--config", configs["bloom"])
    assert far["rule"] == "existing-alibi" and far["extension"] is None
    assert_niah_at_deployed_length(far)


def test_learned_position_model_from_config(configs: dict[str, str]) -> None:
    a = scenario("gpt2", configs)
    assert a["inputs"]["model_encoding"] == "learned" and a["inputs"]["trained_ctx"] == 1024
    assert a["rule"] == "existing-learned-positions"
    assert a["extension"] is None
    assert "1k" in a["encoding"]  # capped at the table's length


def test_scenarios_are_distinct_and_long_ones_test_the_full_length(configs: dict[str, str]) -> None:
    answers = {name: scenario(name, configs) for name in SCENARIO_ARGS}
    keys = {name: (a["rule"], a["extension"] and (a["extension"]["factor"], a["extension"]["to"]))
            for name, a in answers.items()}
    assert len(set(keys.values())) == len(keys), keys
    for a in answers.values():
        assert_niah_at_deployed_length(a)


def test_target_shorter_than_trained_is_an_answer_not_an_error(configs: dict[str, str]) -> None:
    a = pick_json("--ctx", "8k", "--config", configs["qwen32k"])
    assert a["rule"] == "existing-within-trained"
    assert a["extension"] is None
    assert "within" in a["reason"] and "32k" in a["reason"] and "8k" in a["reason"]
    # also for a new model planned at a longer pre-training length
    b = pick_json("--ctx", "8k", "--trained-ctx", "32k")
    assert b["extension"] is None and b["encoding"] == "RoPE"


def test_new_model_short_pretraining_without_budget_does_not_loop(configs: dict[str, str]) -> None:
    """--trained-ctx 8k --ctx 128k with no budget: the x16 stage is vetoed, and the answer asks for a budget."""
    a = pick_json("--ctx", "128k", "--trained-ctx", "8k")
    assert {"rule": "new-pretrain-short-then-extend", "guard": "no-scaling-above-8x-without-fine-tuning"} in a["vetoed"]
    assert "--budget" in json.dumps(a["hyperparameters"]) + a["reason"] + a["fallback"]
    funded = pick_json("--ctx", "128k", "--trained-ctx", "8k", "--budget", "2B")
    assert funded["rule"] == "new-pretrain-short-then-extend"
    assert (funded["extension"]["method"], funded["extension"]["factor"]) == ("llama3", 16)


# ---------------------------------------------------------------- --explain


def test_explain_goes_to_stderr_and_json_stays_clean(configs: dict[str, str]) -> None:
    result = ok(run("pick", "--ctx", "128k", "--config", configs["llama4k"], "--explain", "--json"))
    answer = json.loads(result.stdout)
    assert answer["rule"] == "existing-rope-cap-at-8x"
    trace = result.stderr
    positions = [trace.index(f"  {rid}: ") for rid in DEFAULT_RULE_IDS]
    assert positions == sorted(positions)
    assert trace.count("FIRED") == 1
    assert re.search(r"existing-rope-cap-at-8x: FIRED", trace)
    assert "existing-rope-yarn-no-finetune: matched, vetoed by guard no-scaling-above-8x-without-fine-tuning" in trace
    assert "held" in trace and "failed" in trace


def test_explain_with_text_output() -> None:
    result = ok(run("pick", "--ctx", "4k", "--explain"))
    assert "1. Encoding" in result.stdout and "FIRED" not in result.stdout
    assert result.stderr.count("FIRED") == 1 and "new-short: FIRED" in result.stderr


# ---------------------------------------------------------------- bad input


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
    default = str(Path(__file__).resolve().parent.parent / "rules" / "default.yaml")
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
        """), encoding="utf-8")
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
    assert report == {"rule": "new-long", "numpy": False, "matplotlib": False}, report
