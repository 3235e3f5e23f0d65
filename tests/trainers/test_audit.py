"""``posenc audit CHECKPOINT --trained-with FILE``: every mismatch kind on hand-made exports, every exit code, the
config that would be right, and one-line errors for bad input.

The hand-made checkpoints write exactly what each framework's export writes (see posenc_cli/trainers/audit.py and
/work/shared/reference/training-frameworks.md, sections 1.4-8.4); test_audit_llamafactory.py runs LLaMA-Factory's
own configure_rope where its package is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json

from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for
from posenc_cli.rope.frequencies import compute

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

LLAMA2 = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 2,
          "max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": None}
YARN_X4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
LF_TRAIN = "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\ndo_train: true\nfinetuning_type: full\n" \
           "rope_scaling: yarn\ncutoff_len: 16384\n"


def text(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return str(path)


def checkpoint(folder: Path, cfg: dict[str, Any], name: str = "export") -> str:
    out = folder / name
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"")
    write_json(out, cfg)
    return str(out)


def findings(result: Any) -> list[str]:
    """The finding kinds of an audit run with --json (exit 1)."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return [f["kind"] for f in json.loads(result.stdout)["findings"]]


def inv_freq(cfg: dict[str, Any]) -> tuple[list[float], float, int | None]:
    model = describe(cfg)
    f = compute(spec_for(model, model.layers[0]), None, top_level=model.top_level)
    return f.inv_freq.tolist(), f.attention_factor, model.max_position_embeddings


# ------------------------------------------------------------------ LLaMA-Factory


def test_llamafactory_right_export_passes(tmp_path: Path) -> None:
    # what LLaMA-Factory 0.9.5 configure_rope writes for yarn, cutoff 16384, on a 4k model (transformers 4.x),
    # with max_position_embeddings an int (as a user's fix or a later version writes it)
    cfg = {**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": YARN_X4}
    ckpt = checkpoint(tmp_path, cfg)
    result = ok(run("audit", ckpt, "--trained-with", text(tmp_path, "train.yaml", LF_TRAIN)))
    assert "ok: config.json carries the rope the model was trained with" in result.stdout


def test_llamafactory_float_window(tmp_path: Path) -> None:
    # configure_rope's own output: max_position_embeddings = old * factor, a float (rope.py L71)
    cfg = {**LLAMA2, "max_position_embeddings": 16384.0, "rope_scaling": YARN_X4}
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN), "--json")
    assert findings(result) == ["float-window"]
    fixed = json.loads(result.stdout)["config"]
    assert fixed["max_position_embeddings"] == 16384 and isinstance(fixed["max_position_embeddings"], int)


def test_llamafactory_reset_factor(tmp_path: Path) -> None:
    # `llamafactory-cli export` with rope_scaling in its YAML: factor 2.0 from the trained original 4096 (L64-65)
    cfg = {**LLAMA2, "max_position_embeddings": 8192.0, "rope_scaling": {**YARN_X4, "factor": 2.0}}
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN), "--json")
    assert findings(result) == ["float-window", "reset-factor", "window"]
    out = json.loads(result.stdout)
    assert out["config"]["rope_scaling"] == YARN_X4
    assert out["config"]["max_position_embeddings"] == 16384
    assert out["numbers"]["attention_factor_exported"] < out["numbers"]["attention_factor_trained"]


def test_llamafactory_ceil_factor_and_source_copy(tmp_path: Path) -> None:
    # cutoff 10000 on a 4k model: LLaMA-Factory trains linear x3 (ceil), not 2.44; an export of the base config
    # is a source-config copy
    train = text(tmp_path, "t.yaml", LF_TRAIN.replace("yarn", "linear").replace("16384", "10000"))
    result = run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", train, "--json")
    assert findings(result) == ["source-config", "window"]
    out = json.loads(result.stdout)
    assert out["trained"] == {"rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 10000.0},
                              "max_position_embeddings": 12288}
    assert "ceil(10000 / 4096) = 3" in result.stderr


def test_llamafactory_short_cutoff_changes_nothing(tmp_path: Path) -> None:
    train = text(tmp_path, "t.yaml", LF_TRAIN.replace("16384", "4096"))
    result = ok(run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", train))
    assert "disabled rope scaling" in result.stderr


def test_llamafactory_base_option_gives_the_original_length(tmp_path: Path) -> None:
    # the export replaced the config; --base says what LLaMA-Factory scaled from
    base = write_json(tmp_path, LLAMA2, "base.json")
    cfg = {**LLAMA2, "max_position_embeddings": 8192, "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                                                      "original_max_position_embeddings": 4096}}
    train = text(tmp_path, "t.yaml", LF_TRAIN)
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", train, "--base", base, "--json")
    assert findings(result) == ["reset-factor", "window"]


def test_base_model_is_the_option_base_its_old_name(tmp_path: Path) -> None:
    base = write_json(tmp_path, LLAMA2, "base.json")
    cfg = {**LLAMA2, "max_position_embeddings": 8192, "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                                                      "original_max_position_embeddings": 4096}}
    ckpt, train = checkpoint(tmp_path, cfg), text(tmp_path, "t.yaml", LF_TRAIN)
    old = run("audit", ckpt, "--trained-with", train, "--base", base, "--json")
    new = run("audit", ckpt, "--trained-with", train, "--base-model", base, "--json")
    assert old.stdout == new.stdout and findings(new) == ["reset-factor", "window"]
    other = write_json(tmp_path, LLAMA2, "other.json")
    assert_usage_error(run("audit", ckpt, "--trained-with", train, "--base-model", base, "--base", other),
                       "--base is the old name of --base-model")
    both = run("audit", ckpt, "--trained-with", train, "--base-model", base, "--base", base, "--json")
    assert both.stdout == new.stdout  # the same value under both names is one answer
    args = text(tmp_path, "a.sh", "--position-embedding-type rope\n")
    assert_usage_error(run("audit", ckpt, "--trained-with", args, "--base-model", base),
                       "--base-model is for LLaMA-Factory")
    assert "--base-model" in run("audit", "--help").stdout and "--base " not in run("audit", "--help").stdout


def test_llamafactory_is_the_registrys_name_and_llama_factory_its_old_one(tmp_path: Path) -> None:
    ckpt, train = checkpoint(tmp_path, LLAMA2), text(tmp_path, "t.yaml", LF_TRAIN)
    detected = json.loads(run("audit", ckpt, "--trained-with", train, "--json").stdout)
    named = json.loads(run("audit", ckpt, "--trained-with", train, "--framework", "llamafactory", "--json").stdout)
    old = json.loads(run("audit", ckpt, "--trained-with", train, "--framework", "llama-factory", "--json").stdout)
    assert detected == named == old and named["framework"] == "llamafactory"


# ------------------------------------------------------------------ one hand-made export per mismatch kind


MEGATRON_YARN = ("--position-embedding-type yarn --rotary-base 1000000 --rotary-scaling-factor 4 "
                 "--yarn-original-max-position-embeddings 32768 --no-yarn-correction-range-round-to-int "
                 "--seq-length 131072\n")
QWEN = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 2,
        "max_position_embeddings": 131072}
TRAINED_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "truncate": False,
                "rope_theta": 1000000.0}


@pytest.mark.parametrize(("name", "cfg", "kinds"), [
    # Megatron-Bridge from_auto_config under transformers 5: the reference's rope_parameters kept, the trained
    # YaRN and theta dropped, the window = seq_length (conversion/utils.py conform_config_to_reference)
    ("bridge-v5", {**QWEN, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
     ["theta-lost-v5", "dropped-keys"]),
    # a v5 rope_parameters that lost its rope_theta: transformers 5 reads the class default (10000)
    ("v5-no-theta", {**QWEN, "rope_parameters": {k: v for k, v in TRAINED_YARN.items() if k != "rope_theta"}},
     ["theta-lost-v5"]),
    # a dropped truncate: transformers' default (True) rounds the correction range, which the run did not
    ("dropped-truncate", {**QWEN, "rope_theta": 1e6, "rope_scaling": {k: v for k, v in TRAINED_YARN.items()
                                                                       if k not in ("truncate", "rope_theta")}},
     ["dropped-keys"]),
    ("theta-v4", {**QWEN, "rope_theta": 5e5, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                              "original_max_position_embeddings": 32768,
                                                              "truncate": False}}, ["theta"]),
    ("factor", {**QWEN, "rope_theta": 1e6, "rope_scaling": {**TRAINED_YARN, "factor": 8.0, "rope_theta": None}},
     ["factor"]),
    ("rope-type", {**QWEN, "rope_theta": 1e6, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
     ["rope-type"]),
    ("changed-key", {**QWEN, "rope_theta": 1e6, "rope_scaling": {**TRAINED_YARN, "beta_fast": 16.0,
                                                                  "rope_theta": None}}, ["changed-key"]),
    ("window", {**QWEN, "max_position_embeddings": 32768, "rope_theta": 1e6,
                "rope_scaling": {k: v for k, v in TRAINED_YARN.items() if k != "rope_theta"}}, ["window"]),
])
def test_each_kind(tmp_path: Path, name: str, cfg: dict[str, Any], kinds: list[str]) -> None:
    cfg = {**cfg, "rope_scaling": {k: v for k, v in cfg["rope_scaling"].items() if v is not None}} \
        if isinstance(cfg.get("rope_scaling"), dict) else cfg
    train = text(tmp_path, "pretrain.sh", MEGATRON_YARN)
    out_file = tmp_path / "fixed.json"
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", train, "--json", "--write", str(out_file))
    assert findings(result) == kinds
    # the written config carries the trained numbers, and audits clean
    fixed = json.loads(out_file.read_text())
    want = {**QWEN, "max_position_embeddings": 131072, "rope_parameters": TRAINED_YARN}
    assert inv_freq(fixed) == inv_freq(want)
    again = tmp_path / "again"
    again.mkdir()
    write_json(again, fixed)
    ok(run("audit", str(again), "--trained-with", train))


def test_harmless_dropped_key_is_no_finding(tmp_path: Path) -> None:
    # beta_fast 32 / beta_slow 1 missing: transformers' defaults are the trained values
    cfg = {**QWEN, "rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 32768, "truncate": False}}
    ok(run("audit", checkpoint(tmp_path, cfg), "--trained-with", text(tmp_path, "a.sh", MEGATRON_YARN)))


def test_missing_config_json(tmp_path: Path) -> None:
    # torchtitan's last_save_in_hf writes safetensors and an index, no config.json (components/checkpointer/dcp.py)
    ckpt = tmp_path / "step-1000"
    ckpt.mkdir()
    (ckpt / "model.safetensors.index.json").write_text("{}")
    toml = text(tmp_path, "llama3_8b.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 8192\n'
                "[checkpoint]\nlast_save_in_hf = true\n")
    result = run("audit", str(ckpt), "--trained-with", toml, "--json")
    assert findings(result) == ["missing-config"]
    fragment = json.loads(result.stdout)["config_fragment"]
    assert fragment["rope_parameters"]["rope_type"] == "llama3" and fragment["max_position_embeddings"] == 131072
    # --write has no config.json to correct: an error, and nothing written
    dest = tmp_path / "fixed.json"
    assert_usage_error(run("audit", str(ckpt), "--trained-with", toml, "--write", str(dest)), "no config.json")
    assert not dest.exists()


def test_torchtitan_with_the_right_config_passes(tmp_path: Path) -> None:
    toml = text(tmp_path, "t.toml", '[model]\nname = "llama3"\nflavor = "8B"\n')
    ok(run("audit", str(FIXTURES / "llama-3.1-8b.json"), "--trained-with", toml))


# ------------------------------------------------------------------ Megatron-LM


def test_megatron_llama3_factor_is_always_8(tmp_path: Path) -> None:
    # Llama-3.2 (factor 32) trained through Megatron-LM's CLI: --rope-scaling-factor never reaches the model
    l32 = {**LLAMA2, "max_position_embeddings": 131072, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}}
    script = text(tmp_path, "run.sh", "#!/bin/bash\ntorchrun pretrain_gpt.py \\\n  --position-embedding-type rope "
                  "--rotary-base 500000 \\\n  --use-rope-scaling --rope-scaling-factor 32 \\\n"
                  "  --seq-length 8192 --max-position-embeddings 131072  # llama 3.2\n")
    result = run("audit", checkpoint(tmp_path, l32), "--trained-with", script, "--json")
    assert findings(result) == ["factor"]
    assert json.loads(result.stdout)["config"]["rope_scaling"]["factor"] == 8.0
    assert "#6305" in result.stderr


def test_megatron_yarn_mscale_becomes_attention_factor(tmp_path: Path) -> None:
    # Megatron: mscale(40, 0.707) / mscale(40, 0) = 1.2608; transformers ignores mscale without mscale_all_dim
    args = text(tmp_path, "args.txt", "--position-embedding-type yarn --rotary-scaling-factor 40 --mscale 0.707 "
                "--seq-length 163840\n")
    cfg = {**LLAMA2, "max_position_embeddings": 163840,
           "rope_scaling": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                            "mscale": 0.707}}
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", args, "--json")
    out = json.loads(result.stdout)
    assert findings(result) == ["dropped-keys"]
    assert out["findings"][0]["key"] == "attention_factor"
    assert out["config"]["rope_scaling"]["attention_factor"] == pytest.approx(1.2608, abs=1e-4)
    assert out["numbers"]["attention_factor_trained"] == pytest.approx(1.2608, abs=1e-4)


@pytest.mark.parametrize(("args", "needle"), [
    ("--rotary-base 1e6 --position-embedding-type rope", "--rotary-base '1e6' is not a whole number"),
    ("--num-layers 2", "learned_absolute"),
    ("--position-embedding-type rope --rotary-bas 10000", "unknown Megatron-LM flag '--rotary-bas'"),
    ("--position-embedding-type rope --rotary-base", "--rotary-base needs a value"),
])
def test_megatron_bad_args(tmp_path: Path, args: str, needle: str) -> None:
    ckpt = checkpoint(tmp_path, LLAMA2)
    assert_usage_error(run("audit", ckpt, "--trained-with", text(tmp_path, "a.sh", args)), needle)


# ------------------------------------------------------------------ axolotl


def test_axolotl_full_override(tmp_path: Path) -> None:
    yml = text(tmp_path, "ax.yml", "base_model: meta-llama/Llama-2-7b-hf\nsequence_len: 16384\nmodel_config:\n"
               "  rope_parameters: {rope_type: yarn, factor: 4.0, original_max_position_embeddings: 4096, "
               "rope_theta: 10000.0}\n  max_position_embeddings: 16384\n")
    # axolotl's _adjust_model_config raises max_position_embeddings to sequence_len; a v5 save of the live config
    good = {**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": None,
            "rope_parameters": {**YARN_X4, "rope_theta": 10000.0}}
    ok(run("audit", checkpoint(tmp_path, good), "--trained-with", yml))
    bad = {**LLAMA2, "max_position_embeddings": 16384}
    assert findings(run("audit", checkpoint(tmp_path, bad, "bad"), "--trained-with", yml, "--json")) == [
        "dropped-keys"]


def test_axolotl_theta_alone_is_ignored(tmp_path: Path) -> None:
    yml = text(tmp_path, "ax.yml", "base_model: x\nsequence_len: 4096\nmodel_config:\n  rope_theta: 2000000\n")
    result = ok(run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", yml))
    assert "rope_theta alone is ignored" in result.stderr


# ------------------------------------------------------------------ posenc plan


def test_plan_against_source_copy_and_patched(tmp_path: Path) -> None:
    base = write_json(tmp_path, LLAMA2, "base.json")
    plan = ok(run("pick", "--ctx", "16k", "--config", base, "--json")).stdout
    plan_path = text(tmp_path, "plan.json", plan)
    result = run("audit", base, "--trained-with", plan_path, "--json")
    assert findings(result) == ["source-config", "window"]
    patched = tmp_path / "patched.json"
    ok(run("scale", "yarn", "--config", base, "--target", "16k", "-o", str(patched)))
    ok(run("audit", str(patched), "--trained-with", plan_path))


def test_to_v5_writes_rope_parameters(tmp_path: Path) -> None:
    base = write_json(tmp_path, LLAMA2, "base.json")
    plan_path = text(tmp_path, "plan.json", ok(run("pick", "--ctx", "16k", "--config", base, "--json")).stdout)
    out = json.loads(run("audit", base, "--trained-with", plan_path, "--to", "v5", "--json").stdout)
    assert "rope_scaling" not in out["config"] and out["config"]["rope_parameters"]["rope_type"] == "yarn"


# ------------------------------------------------------------------ the config.json a run loaded (HF Trainer, TRL)


def test_trained_with_the_same_config_json_passes(tmp_path: Path) -> None:
    """HF Trainer, TRL and Unsloth load config.json: the checkpoint that carries it unchanged passes."""
    trained = write_json(tmp_path, {**LLAMA2, "rope_scaling": YARN_X4, "max_position_embeddings": 16384},
                         "trained.json")
    ckpt = checkpoint(tmp_path, {**LLAMA2, "rope_scaling": YARN_X4, "max_position_embeddings": 16384})
    out = json.loads(ok(run("audit", ckpt, "--trained-with", trained, "--json")).stdout)
    assert out["framework"] == "hf-config" and out["findings"] == []
    assert out["trained"]["rope_parameters"] == describe(json.loads(Path(trained).read_text())).layers[0].params


def test_trained_with_config_json_finds_a_dropped_scaling(tmp_path: Path) -> None:
    """A checkpoint saved with the source config (a copied config.json) is not what the run computed."""
    trained = write_json(tmp_path, {**LLAMA2, "rope_scaling": YARN_X4, "max_position_embeddings": 16384},
                         "trained.json")
    ckpt = checkpoint(tmp_path, LLAMA2)
    assert findings(run("audit", ckpt, "--trained-with", trained, "--json")) == ["source-config", "window"]


def test_trained_with_a_per_layer_config_json(tmp_path: Path) -> None:
    """Gemma 3 (two rope groups): the trained config's groups are compared group by group."""
    corpus = Path(__file__).resolve().parents[1] / "corpus"
    gemma = json.loads((corpus / "gemma-3-27b-it.json").read_text(encoding="utf-8"))
    trained = write_json(tmp_path, gemma, "trained.json")
    ok(run("audit", checkpoint(tmp_path, gemma), "--trained-with", trained))
    theta = json.loads(json.dumps(gemma))
    theta["text_config"]["rope_local_base_freq"] = 20000.0
    kinds = findings(run("audit", checkpoint(tmp_path, theta, "other"), "--trained-with", trained, "--json"))
    assert kinds == ["theta"]


@pytest.mark.parametrize(("body", "needle"), [
    ('{"model_type": "bloom", "n_head": 8, "hidden_size": 64}', "not a RoPE model (posenc reads it as alibi)"),
    ('{"model_type": "llama", "max_position_embeddings": -4096}', "max_position_embeddings = -4096"),
])
def test_trained_with_a_config_json_posenc_cannot_audit_is_one_line(tmp_path: Path, body: str, needle: str) -> None:
    trained = text(tmp_path, "trained.json", body)
    assert_usage_error(run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", trained), needle)


# ------------------------------------------------------------------ bad input: one line, exit 2, nothing written


@pytest.mark.parametrize(("name", "body", "needles"), [
    ("bad.yaml", "rope_scaling: [yarn\n", ("not valid YAML",)),
    ("bad.toml", "[model\n", ("not valid TOML",)),
    ("bad.json", "{", ("not valid JSON",)),
    ("unknown.yaml", "stage: sft\ncutoff_len: 8192\nrope_theta: 1000000\n", ("unknown key 'rope_theta'",)),
    ("kind.yaml", "stage: sft\nrope_scaling: longrope\n", ("rope_scaling 'longrope'",)),
    ("cutoff.yaml", "stage: sft\nrope_scaling: yarn\ncutoff_len: 1.5\n", ("cutoff_len",)),
    ("export.yaml", "model_name_or_path: x\nrope_scaling: yarn\nexport_dir: out\n", ("export settings",)),
    ("both.yaml", "base_model: x\ncutoff_len: 8\n", ("--framework",)),
    ("list.yaml", "- a\n", ("expected a YAML mapping",)),
    ("plan.json", '{"extension": null, "bogus": 1}', ("unknown key 'bogus'",)),
    ("noext.json", '{"extension": null}', ("no extension config",)),
    ("ax.yaml", "base_model: x\nrope_scaling: {type: yarn, factor: 4}\n", ("top-level rope_scaling",)),
    ("ax2.yaml", "base_model: x\nmodel_config:\n  rope_scaling: {type: yarn, factor: 4}\n", ("KeyError",)),
    ("ax3.yaml", "base_model: x\nmodel_config:\n  rope_scaling: {rope_type: yarn, factor: 4}\n", ("rope_theta",)),
    ("titan.toml", '[model]\nname = "deepseek_v3"\n', ("not audited yet",)),
    ("titan2.toml", '[model]\nname = "llama3"\nrope_theta = 1.0\n', ("unknown key 'rope_theta'",)),
])
def test_bad_settings(tmp_path: Path, name: str, body: str, needles: tuple[str, ...]) -> None:
    dest = tmp_path / "fixed.json"
    ckpt = checkpoint(tmp_path, LLAMA2)
    assert_usage_error(run("audit", ckpt, "--trained-with", text(tmp_path, name, body), "--write", str(dest)),
                       *needles)
    assert not dest.exists()


def test_bad_command_lines(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, LLAMA2)
    train = text(tmp_path, "t.yaml", LF_TRAIN)
    assert_usage_error(run("audit", ckpt, "--trained-with", str(tmp_path / "nope.yaml")), "no such file")
    assert_usage_error(run("audit", str(tmp_path / "nope"), "--trained-with", train), "nope")
    assert_usage_error(run("audit", ckpt, "--trained-with", train, "--framework", "deepspeed"), "deepspeed")
    assert_usage_error(run("audit", ckpt, "--trained-with", train, "--framework", "torchtitan"), "toml")
    assert_usage_error(run("audit", ckpt, "--trained-with", train, "--to", "v6"), "v6")
    assert_usage_error(run("audit", ckpt, "--trained-with", str(tmp_path)), "folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_usage_error(run("audit", str(empty), "--trained-with", train), "empty folder")
    bad = tmp_path / "badcfg"
    bad.mkdir()
    (bad / "config.json").write_text("{")
    assert_usage_error(run("audit", str(bad), "--trained-with", train), "not valid JSON")
    assert run("audit", ckpt).exit_code == 2  # --trained-with is required
    args = text(tmp_path, "a.sh", "--position-embedding-type rope\n")
    assert_usage_error(run("audit", ckpt, "--trained-with", args, "--base", ckpt), "--base is for LLaMA-Factory")


def test_exit_codes(tmp_path: Path) -> None:
    train = text(tmp_path, "t.yaml", LF_TRAIN)
    good = checkpoint(tmp_path, {**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": YARN_X4}, "good")
    bad = checkpoint(tmp_path, LLAMA2, "bad")
    assert run("audit", good, "--trained-with", train).exit_code == 0
    assert run("audit", bad, "--trained-with", train).exit_code == 1
    assert run("audit", bad, "--trained-with", train + ".missing").exit_code == 2


# ------------------------------------------------------------------ the right config is a transformers input


def test_fixed_config_loads_in_transformers_with_the_trained_numbers(tmp_path: Path) -> None:
    """transformers 5 builds the corrected config (LLaMA-Factory's export, reset factor and float window) with the
    inv_freq and attention factor posenc computes for the trained rope."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = {**LLAMA2, "max_position_embeddings": 8192.0, "rope_scaling": {**YARN_X4, "factor": 2.0}}
    dest = tmp_path / "fixed.json"
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN),
                 "--write", str(dest))
    assert result.exit_code == 1
    fixed = json.loads(dest.read_text())
    config = transformers.LlamaConfig.from_dict(fixed)  # a float window would be refused here
    inv, attention = ROPE_INIT_FUNCTIONS["yarn"](config, torch.device("cpu"))
    want = inv_freq({**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": YARN_X4})
    assert inv.tolist() == want[0]
    assert attention == pytest.approx(want[1], rel=1e-12)


def test_core_module_loads_no_cli_or_heavy_package() -> None:
    import subprocess
    import sys

    code = ("import sys, posenc_cli.trainers.audit\n"
            "print(sorted(m for m in ('typer', 'rich', 'numpy', 'torch', 'transformers', 'matplotlib') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_audit_command_loads_numpy_only(tmp_path: Path) -> None:
    from startup import loaded_modules, run_cli_body

    ckpt = checkpoint(tmp_path, {**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": YARN_X4})
    body = run_cli_body(["audit", ckpt, "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN)])
    loaded = loaded_modules(body, cwd=Path(__file__).resolve().parents[2])
    assert loaded["numpy"]  # the two spectra are computed
    assert not any(loaded[m] for m in ("matplotlib", "torch", "transformers", "huggingface_hub", "gguf"))


def test_write_into_a_missing_folder_is_one_error(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, LLAMA2)
    dest = tmp_path / "no" / "fixed.json"
    assert_usage_error(run("audit", ckpt, "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN), "--write", str(dest)),
                       "does not exist")
    assert not dest.parent.exists()


def test_no_mismatch_writes_nothing(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, {**LLAMA2, "max_position_embeddings": 16384, "rope_scaling": YARN_X4})
    dest = tmp_path / "fixed.json"
    result = ok(run("audit", ckpt, "--trained-with", text(tmp_path, "t.yaml", LF_TRAIN), "--write", str(dest)))
    assert "not written" in result.stderr and not dest.exists()


def test_plan_raising_theta_source_copy(tmp_path: Path) -> None:
    # an ABF plan (theta raised, no scaling): the original config is a source copy, a wrong theta is `theta`
    plan = {"encoding": "rope", "extension": {
        "method": "abf", "from": 4096, "to": 16384,
        "config_v5": {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
                      "max_position_embeddings": 16384}}, "inputs": {"theta": 10000.0, "trained_ctx": 4096}}
    plan_path = write_json(tmp_path, plan, "plan.json")
    result = run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", plan_path, "--json")
    assert findings(result) == ["source-config", "window"]
    later = {**LLAMA2, "max_position_embeddings": 16384, "rope_theta": 100000.0}
    result = run("audit", checkpoint(tmp_path, later, "later"), "--trained-with", plan_path, "--json")
    assert findings(result) == ["theta"]


def test_llamafactory_linear_export_guesses_the_length_and_says_so(tmp_path: Path) -> None:
    # a linear dict keeps no original length: the one before training is window / factor, stated as a guess
    cfg = {**LLAMA2, "max_position_embeddings": 12288.0, "rope_scaling": {"rope_type": "linear", "factor": 3.0}}
    train = text(tmp_path, "t.yaml", LF_TRAIN.replace("yarn", "linear").replace("16384", "10000"))
    result = run("audit", checkpoint(tmp_path, cfg), "--trained-with", train)
    assert result.exit_code == 1 and "float-window" in result.stdout
    assert "taken as 4096" in result.stderr and "--base" in result.stderr


def test_megatron_interleaved_layout_is_noted(tmp_path: Path) -> None:
    args = text(tmp_path, "a.sh", "--position-embedding-type rope --rotary-interleaved --seq-length 4096\n")
    result = ok(run("audit", checkpoint(tmp_path, LLAMA2), "--trained-with", args))
    assert "permute the q/k weights" in result.stderr
