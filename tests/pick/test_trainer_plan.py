"""``posenc pick --trainer NAME`` through the real CLI, and the ``posenc scale --seq-len`` it is built on.

Oracles: every run a plan lists (pre-training, each stage) carries its ``posenc scale ... --seq-len L --engine NAME``
command, and that command, run through the CLI, prints exactly the settings and caveats the plan shows (or refuses
with exactly the plan's refusal); ``--engine hf-v5`` of the same command gives the rope dict and window the plan says
the run trains with. The serving config's frequencies equal the last stage's (posenc_cli.rope.frequencies, rtol 1e-6:
both sides are the same float32 computation, so anything above float32 noise, about 6e-8, is a real difference).
A plan written with ``--trainer`` stays readable by ``posenc audit --trained-with``.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.frameworks.audit import trained_rope
from posenc_cli.frameworks.registry import TRAINER, formats
from posenc_cli.pick.trainer_plan import ENGINES, SAMPLES, TRAINERS
from posenc_cli.rope.frequencies import RopeSpec, compute

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
LLAMA31 = str(CORPUS / "llama-3.1-8b-instruct.json")
QWEN3 = str(CORPUS / "qwen3-8b.json")
GPT_OSS = str(CORPUS / "gpt-oss-20b.json")
RTOL = 1e-6  # see the module docstring

#: name -> pick arguments: staged, one stage, --trained-ctx below the window, a new model staged (pre-training
#: first), a new model training-free, ABF, within the window, yarn with a folded attention factor
PLANS: dict[str, list[str]] = {
    "llama31-1m-staged": ["--config", LLAMA31, "--ctx", "1M", "--budget", "10B"],
    "llama31-256k-one-stage": ["--config", LLAMA31, "--ctx", "256k", "--budget", "2B"],
    "qwen3-yarn-x4": ["--config", QWEN3, "--trained-ctx", "32k", "--ctx", "128k", "--budget", "2B"],
    "new-staged": ["--ctx", "128k", "--trained-ctx", "8k", "--budget", "2B"],
    "new-partial": ["--ctx", "1M", "--trained-ctx", "8k", "--budget", "1500M"],
    "new-training-free": ["--ctx", "32k", "--trained-ctx", "8k"],
    "qwen3-abf": ["--config", QWEN3, "--ctx", "1M", "--budget", "200B"],
    "llama31-within": ["--config", LLAMA31, "--ctx", "64k"],
    "gpt-oss-256k": ["--config", GPT_OSS, "--ctx", "256k", "--budget", "2B"],
}


def pick_trainer(args: list[str], trainer: str) -> dict[str, Any]:
    """The ``pick --json --trainer`` answer; the exit code is 0 when every run is expressible, else 1."""
    result = run("pick", *args, "--trainer", trainer, "--json")
    answer: dict[str, Any] = json.loads(result.stdout)
    runnable = answer["trainer"]["runnable"]
    assert result.exit_code == (0 if runnable else 1), (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    assert ("cannot train" in result.stderr) is not runnable
    return answer


def runs_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in [plan["pretraining"], *plan["stages"]] if r is not None]


def check_against_scale(one: dict[str, Any]) -> None:
    """The run's own command through the CLI prints its settings and caveats, or refuses with its refusal."""
    argv = shlex.split(one["command"])
    assert argv[:2] == ["posenc", "scale"]
    result = run(*argv[1:])
    if one["refusal"] is not None:
        line = assert_usage_error(result)
        assert line == f"error: {one['refusal']}"
        return
    ok(result)
    assert result.stdout == one["settings"] + "\n"
    caveats = [line.removeprefix("caveat: ") for line in result.stderr.splitlines() if line.startswith("caveat: ")]
    assert caveats == one["caveats"]


def v5_of(command: str) -> dict[str, Any]:
    argv = shlex.split(command)
    argv[argv.index("--engine") + 1] = "hf-v5"
    out: dict[str, Any] = json.loads(ok(run(*argv[1:])).stdout)
    return out


def test_the_trainer_names_are_scales_trainer_formats() -> None:
    assert TRAINERS == formats(TRAINER)
    assert set(SAMPLES) <= set(TRAINERS)


def test_bad_trainer_is_one_line_listing_the_names() -> None:
    assert_usage_error(run("pick", "--ctx", "128k", "--trainer", "deepspeed"), "'deepspeed'", *TRAINERS)
    # checked before the model is read: a missing config is not the error reported
    assert_usage_error(run("pick", "--ctx", "128k", "--config", "no/such.json", "--trainer", "nemo"), "--trainer")


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("plan", PLANS)
def test_every_run_is_what_scale_prints(plan: str, trainer: str) -> None:
    answer = pick_trainer(PLANS[plan], trainer)
    t, p, ext = answer["trainer"], answer["plan"], answer["extension"]
    assert t["name"] == trainer
    assert t["runnable"] is all(r["refusal"] is None for r in runs_of(t))
    for one in runs_of(t):
        check_against_scale(one)
        assert one["max_position_embeddings"] == one["seq_len"]
    trained = answer["inputs"]["trained_ctx"]
    if ext is not None and ext["fine_tune"]:
        lengths = [s["seq_len"] for s in t["stages"]]
        assert lengths == p["stage_lengths"] and len(lengths) == p["stages"] >= 1
        assert [s["from"] for s in t["stages"]] == [trained, *lengths[:-1]]
        for s in t["stages"]:
            assert s["tokens"] == p["stage_tokens"] and s["sequences"] == math.ceil(s["tokens"] / s["seq_len"])
            assert (s["samples_setting"] is not None) is (trainer in SAMPLES)
        assert t["nothing_to_train"] is None
    else:
        assert t["stages"] == [] and t["nothing_to_train"]
    assert (t["pretraining"] is not None) is (not answer["inputs"]["existing"])
    if t["pretraining"] is not None:
        assert t["pretraining"]["seq_len"] == trained
        assert t["pretraining"]["rope_parameters"] == {"rope_type": "default",
                                                       "rope_theta": float(answer["hyperparameters"]["theta"])}
    if ext is None and answer["inputs"]["existing"]:
        assert t["serving"] is None
    elif ext is not None:
        assert t["serving"]["config"] == ext["config"] and t["serving"]["command"] == ext["command"]


@pytest.mark.parametrize("plan", PLANS)
def test_runs_train_the_rope_their_command_gives(plan: str) -> None:
    """``--engine hf-v5`` of each run's command: the rope dict and window the plan says the run trains with."""
    t = pick_trainer(PLANS[plan], "axolotl")["trainer"]
    for one in runs_of(t):
        v5 = v5_of(one["command"])
        assert v5["rope_parameters"] == one["rope_parameters"]
        assert v5["max_position_embeddings"] == one["seq_len"]


@pytest.mark.parametrize("plan", [name for name in PLANS if name not in ("llama31-within", "new-training-free")])
def test_serving_is_what_the_last_stage_trained(plan: str) -> None:
    answer = pick_trainer(PLANS[plan], "trl")
    t, ext = answer["trainer"], answer["extension"]
    last, head_dim = t["stages"][-1], answer["inputs"]["head_dim"]
    served = ext["config_v5"]
    assert t["serving"]["trained_numbers"] is True
    # the stages train the plan's one rope dict (only the window differs), so audit's reading of the plan is right
    assert all(s["rope_parameters"] == served["rope_parameters"] for s in t["stages"])
    for seq_len in (last["seq_len"], ext["to"]):
        theirs = compute(RopeSpec(last["rope_parameters"], head_dim, last["max_position_embeddings"]), seq_len)
        ours = compute(RopeSpec(served["rope_parameters"], head_dim, served["max_position_embeddings"]), seq_len)
        assert theirs.inv_freq.shape == ours.inv_freq.shape
        assert abs(theirs.inv_freq / ours.inv_freq - 1).max() <= RTOL
        assert math.isclose(theirs.attention_factor, ours.attention_factor, rel_tol=RTOL)
    if ext["to"] > last["seq_len"]:
        assert t["training_free"] == {"from": last["seq_len"], "to": ext["to"], "factor": ext["to"] / last["seq_len"]}
    else:
        assert t["training_free"] is None


def test_training_free_serving_is_not_what_was_trained() -> None:
    t = pick_trainer(PLANS["new-training-free"], "torchtitan")["trainer"]
    assert t["stages"] == [] and t["serving"]["trained_numbers"] is False
    assert "training-free" in t["nothing_to_train"]
    assert t["training_free"] == {"from": 8192, "to": 32768, "factor": 4.0}


@pytest.mark.parametrize("plan", ["llama31-1m-staged", "new-staged", "qwen3-abf"])
def test_the_engines_commands_run(plan: str) -> None:
    serving = pick_trainer(PLANS[plan], "megatron")["trainer"]["serving"]
    assert set(serving["engines"]) == set(ENGINES)
    for engine, command in serving["engines"].items():
        argv = shlex.split(command)
        assert argv[-2:] == ["--engine", engine] and argv[:-2] == shlex.split(serving["command"])
        refusal = serving["engine_refusals"].get(engine)
        if refusal is None:
            ok(run(*argv[1:]))
        else:
            assert assert_usage_error(run(*argv[1:])) == f"error: {refusal}"
    assert "llama.cpp" in serving["engine_refusals"] if plan != "qwen3-abf" else not serving["engine_refusals"]


@pytest.mark.parametrize("trainer", ["megatron", "llamafactory"])
def test_a_trainer_plan_is_still_an_audit_input(tmp_path: Path, trainer: str) -> None:
    result = run("pick", *PLANS["llama31-1m-staged"], "--trainer", trainer, "--json")
    path = tmp_path / "plan.json"
    path.write_text(result.stdout)
    answer = json.loads(result.stdout)
    got = trained_rope(str(path), None)
    assert got.framework == "posenc-plan"
    assert got.rope == answer["extension"]["config_v5"]["rope_parameters"]
    assert got.rope == answer["trainer"]["stages"][-1]["rope_parameters"]


def test_text_shows_the_runs_and_the_refusal() -> None:
    result = run("pick", *PLANS["llama31-1m-staged"], "--trainer", "megatron")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    text = result.stdout
    assert "6. Training with megatron (not runnable as planned" in text
    assert text.count("REFUSED: Megatron-LM up to 0.19.2 never forwards --rope-scaling-factor") == 2
    assert ("stage 1: 128k -> 512k, sequences of 524,288 tokens, 5B tokens (9,537 sequences; --train-samples 9537)"
            in text)
    assert "--seq-len 512k --engine megatron" in text and "vllm: posenc scale llama3" in text
    assert result.stderr.startswith("note: megatron cannot train 2 of the plan's runs")
    fine = ok(run("pick", *PLANS["llama31-1m-staged"], "--trainer", "torchtitan"))
    assert "REFUSED" not in fine.stdout and "training.seq_len = 1048576" in fine.stdout


def test_nothing_to_train() -> None:
    within = ok(run("pick", *PLANS["llama31-within"], "--trainer", "trl")).stdout
    assert "   nothing to train: the plan keeps the model as it is" in within
    gpt2 = {"model_type": "gpt2", "n_positions": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12}
    result = ok(run("pick", "--config", "-", "--ctx", "4k", "--trainer", "axolotl", "--json", input=json.dumps(gpt2)))
    t = json.loads(result.stdout)["trainer"]
    assert t["stages"] == [] and t["serving"] is None and "learned" in t["nothing_to_train"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trained=st.sampled_from(["4k", "8k", "32k"]), jump=st.sampled_from([2, 4, 8, 16, 64]),
       budget=st.sampled_from(["0", "500M", "2B", "20B"]), trainer=st.sampled_from(TRAINERS))
def test_new_model_plans(trained: str, jump: int, budget: str, trainer: str) -> None:
    from posenc_cli.units import parse_length

    ctx = parse_length(trained) * jump
    answer = pick_trainer(["--trained-ctx", trained, "--ctx", str(ctx), "--budget", budget], trainer)
    t, ext = answer["trainer"], answer["extension"]
    assert t["pretraining"]["seq_len"] == parse_length(trained)
    lengths = [s["seq_len"] for s in t["stages"]]
    assert lengths == sorted(set(lengths)) and all(parse_length(trained) < n <= ctx for n in lengths)
    for s in t["stages"]:
        assert s["rope_parameters"] == ext["config_v5"]["rope_parameters"]
    for one in runs_of(t)[-1:]:
        check_against_scale(one)


# ------------------------------------------------------------------------------------------------ scale --seq-len

BARE = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128"]


def test_seq_len_keeps_the_rope_dict_and_sets_the_lengths() -> None:
    whole = json.loads(ok(run(*BARE, "--engine", "hf-v5")).stdout)
    stage = json.loads(ok(run(*BARE, "--seq-len", "64k", "--engine", "hf-v5")).stdout)
    assert stage == {"rope_parameters": whole["rope_parameters"], "max_position_embeddings": 65536}
    argv = shlex.split(ok(run(*BARE, "--seq-len", "64k", "--engine", "megatron")).stdout)
    assert argv[argv.index("--seq-length") + 1] == "65536"
    assert argv[argv.index("--max-position-embeddings") + 1] == "65536"
    assert argv[argv.index("--rotary-scaling-factor") + 1] == "4"
    assert "--seq-length" not in ok(run(*BARE, "--engine", "megatron")).stdout


def test_seq_len_bad_input() -> None:
    assert_usage_error(run(*BARE, "--seq-len", "256k", "--engine", "axolotl"), "--seq-len", "131072")
    assert_usage_error(run(*BARE, "--seq-len", "64k", "--engine", "vllm"), "--seq-len", "vllm", "megatron")
    assert_usage_error(run(*BARE, "--seq-len", "lots", "--engine", "trl"), "--seq-len")


def test_llamafactory_refuses_a_stage_its_cutoff_cannot_train() -> None:
    """cutoff_len is LLaMA-Factory's training length and its factor: 64k gives yarn x2, not the plan's x4."""
    line = assert_usage_error(run(*BARE, "--seq-len", "64k", "--engine", "llamafactory"),
                              "ceil(cutoff_len / 32768)", "training at 65536", "yarn factor 2, not 4",
                              "nearest: rope_scaling yarn with cutoff_len 131072")
    assert "inv_freq off by up to" in line
    ok(run(*BARE, "--seq-len", "128k", "--engine", "llamafactory"))


def test_audit_reads_a_megatron_stage_as_the_plans_rope(tmp_path: Path) -> None:
    """The last stage's Megatron-LM flags, read back by ``posenc audit --trained-with`` (its own Megatron reading),
    give the serving config's frequencies and window."""
    answer = pick_trainer(PLANS["qwen3-yarn-x4"], "megatron")
    stage, served = answer["trainer"]["stages"][-1], answer["extension"]["config_v5"]
    path = tmp_path / "train.args"
    path.write_text(stage["settings"] + "\n")
    got = trained_rope(str(path), None, "megatron")
    assert got.rope is not None and got.window == served["max_position_embeddings"]
    head_dim = answer["inputs"]["head_dim"]
    theirs = compute(RopeSpec(got.rope, head_dim, got.window), got.window)
    ours = compute(RopeSpec(served["rope_parameters"], head_dim, served["max_position_embeddings"]), got.window)
    assert abs(theirs.inv_freq / ours.inv_freq - 1).max() <= RTOL
    assert math.isclose(theirs.attention_factor, ours.attention_factor, rel_tol=RTOL)
