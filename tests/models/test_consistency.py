"""One truth across commands: what ``scale`` and ``pick`` write for a real model means the same to posenc's reader,
its lint, transformers' own config classes and the commands posenc prints.

The closure properties, over every RoPE config of the real-config corpus x every method x targets (the native
window, x2, x4, and hypothesis-drawn jumps):

1. the native window returns the model's own rope settings unchanged;
2. every config written loads in transformers' config class to the frequencies posenc reports for the request
   (inv_freq rtol 1e-6, attention factor rel 1e-9: both sides float32 in the same operation order, the one
   difference being float32 vs float64 pow, an ulp or two), gains no lint error the input did not have, and reads
   back through posenc's reader to the same numbers;
3. the command pick prints as "same numbers" runs and prints pick's config; engine command lines name the model
   when the model was named;
4. pick's training-free verdict and scale's warning agree on the same jump;
5. a file keeps its format: ``rope_parameters`` stays v5, ``text_config`` and per-layer-type dicts stay nested.

A request posenc refuses is one clean ``PosencError`` (counted, never a traceback).
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import ok, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.engines import hf
from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import ABSENT, text_config
from posenc_cli.models.convert import V5_ONLY
from posenc_cli.models.extension import extend
from posenc_cli.models.facts import ModelFacts, model_facts
from posenc_cli.models.lint import lint_config
from posenc_cli.models.model_positions import describe
from posenc_cli.models.model_types import accepted_rope_types
from posenc_cli.models.record import spec_for
from posenc_cli.models.sources import read_source
from posenc_cli.rope import scaling
from posenc_cli.rope.frequencies import compute, for_request

pytestmark = pytest.mark.numeric

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
FILES = sorted(p for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")
INV_RTOL = 1e-6


def _facts(path: Path) -> tuple[dict[str, Any], ModelFacts] | None:
    cfg: dict[str, Any] = json.loads(path.read_text())
    model = describe(cfg)
    if model.family != "rope" or not model.layers or model.max_position_embeddings is None:
        return None
    if model.engine is not None and model.engine.remote_code:  # no transformers reading: see test_remote_code.py
        return None
    return cfg, model_facts(model, path.name, cfg=cfg)


ROPE_FILES = [p for p in FILES if _facts(p) is not None]
METHODS = list(scaling.METHODS)
JUMPS = [1, 2, 4]


@dataclass
class Written:
    cfg: dict[str, Any]
    facts: ModelFacts
    req: scaling.ScaleRequest
    patched: dict[str, Any]


def scale(path: Path, method: str, jump: float) -> Written:
    """What ``posenc scale METHOD --config PATH --target native x jump -o FILE`` writes (its own calls)."""
    found = _facts(path)
    assert found is not None
    cfg, facts = found
    assert facts.native is not None
    req = extend(method, facts, target=int(round(facts.native * jump)))
    return Written(cfg, facts, req, hf.patch_config(cfg, req, hf.own_format(facts), facts.group))


def _errors(cfg: dict[str, Any]) -> set[str]:
    return {p.code for p in lint_config(cfg, describe(cfg)) if p.severity == "error"}


def _extended(cfg: dict[str, Any], group: str) -> Any:
    model = describe(cfg)
    layer = next(g for g in model.layers if g.name == group) if group else model.layers[0]
    return model, layer


CASES = [(p, m, j) for p in ROPE_FILES for m in METHODS for j in JUMPS]
OUTCOMES: dict[str, int] = {}


@pytest.mark.parametrize(("path", "method", "jump"), CASES, ids=[f"{p.stem}-{m}-x{j}" for p, m, j in CASES])
def test_closure_through_posenc(path: Path, method: str, jump: int) -> None:
    """Properties 1, 2 (posenc's side) and 5 for one corpus file, method and jump."""
    try:
        w = scale(path, method, jump)
    except PosencError as exc:
        assert str(exc) and "\n" not in str(exc)
        OUTCOMES["refused"] = OUTCOMES.get("refused", 0) + 1
        return
    OUTCOMES["written"] = OUTCOMES.get("written", 0) + 1
    if jump == 1:  # 1: the window the model serves comes back as it is
        assert w.req.unchanged and w.patched == w.cfg
        return
    # 5: format and nesting
    text_in, _, where_in = text_config(w.cfg)
    text_out, _, where_out = text_config(w.patched)
    assert where_out == where_in.removesuffix(ABSENT)  # a sub-config the file left out is written where it goes
    v5_in = isinstance(text_in.get("rope_parameters"), dict) and not text_in.get("rope_scaling")
    v5_only = w.facts.model_type in V5_ONLY  # no v4 form exists: written as transformers 5 writes it
    assert ("rope_parameters" in text_out and "rope_scaling" not in text_out) == (v5_in or v5_only)
    nested_in = v5_in and all(isinstance(v, dict) for v in text_in["rope_parameters"].values())
    if nested_in:
        assert set(text_out["rope_parameters"]) == set(text_in["rope_parameters"])
    # 2: read back, the extended group has the request's numbers and every other group is unchanged
    before, _ = _extended(w.cfg, w.facts.group)
    after, layer = _extended(w.patched, w.facts.group)
    ours = for_request(w.req) if not w.req.unchanged else None
    read = compute(spec_for(after, layer), w.req.target, top_level=after.top_level)  # dynamic: at the target
    assert ours is not None
    np.testing.assert_allclose(read.inv_freq, ours.inv_freq, rtol=INV_RTOL, atol=0)
    assert read.attention_factor == pytest.approx(ours.attention_factor, rel=1e-9)
    assert after.max_position_embeddings == scaling.max_position_embeddings(w.req)
    for g_before in before.layers:
        if g_before.name != layer.name:
            g_after = next(g for g in after.layers if g.name == g_before.name)
            assert g_after.params == g_before.params, g_before.name
    # 2: no lint error the shipped file did not have
    assert _errors(w.patched) <= _errors(w.cfg)


def test_the_closure_sweep_covered_the_corpus() -> None:
    """The sweep above is not vacuous: most requests are written (refusals are the cases posenc cannot express)."""
    assert len(ROPE_FILES) >= 40 and len(CASES) == len(ROPE_FILES) * len(METHODS) * len(JUMPS)
    refused = [(p.stem, m, j) for p, m, j in CASES if _refused(p, m, j)]
    # what posenc refuses, and why: longrope needs the model's factor lists; a config class that rejects the rope
    # type (Phi3Config takes only longrope, and ntk writes no scaling dict); a rope type posenc does not write
    # (Gemma 4's proportional) is not replaced
    proportional = {p.stem for p in ROPE_FILES if _facts(p)[1].params["rope_type"] == "proportional"}  # type: ignore[index]
    for stem, method, jump in refused:
        assert method == "longrope" or _class_rejects(CORPUS / f"{stem}.json", method) or stem in proportional, (
            stem, method, jump)
    assert len(refused) < len(CASES) // 4


def _class_rejects(path: Path, method: str) -> bool:
    """Whether the model's config class (probed from transformers into the generated data) rejects the method."""
    found = _facts(path)
    accepts = accepted_rope_types(found[1].model_type) if found else None
    return accepts is not None and scaling.METHODS[method] not in accepts | {"default"}


def _refused(path: Path, method: str, jump: int) -> bool:
    try:
        scale(path, method, jump)
    except PosencError:
        return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ROPE_FILES), st.sampled_from([m for m in METHODS if m != "longrope"]),
       st.floats(min_value=1.0, max_value=64.0, allow_nan=False))
def test_any_jump_keeps_the_family_and_its_factor_times_the_jump(path: Path, method: str, jump: float) -> None:
    """The model's own family multiplies its factor by the jump; another method scales from the original length.
    Either way the request reaches exactly the target, and scale's warning is pick's x4/x8 rule on the jump."""
    found = _facts(path)
    assert found is not None
    _, facts = found
    assert facts.native is not None
    target = max(facts.native, int(facts.native * jump))
    try:
        req = extend(method, facts, target=target)
    except PosencError:  # the refusals the sweep above lists (Phi3Config, proportional)
        assert _class_rejects(path, method) or facts.params["rope_type"] == "proportional"
        return
    assert req.target == target and req.native == facts.native
    if target == facts.native:
        assert req.unchanged
        return
    own = facts.params.get("rope_type", "default")
    if own != "default" and own == scaling.METHODS[method]:
        assert req.factor == pytest.approx(float(facts.params["factor"]) * target / facts.native, rel=1e-12)
    warned = bool(scaling.warnings_for(req))
    assert warned == (target / facts.native > scaling.TRAINING_FREE_CAP)


# --- 2: transformers' own config classes --------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
from test_corpus import NO_ROPE_TYPES, hf_config, hf_groups  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

WRITTEN = [(p, m) for p in ROPE_FILES for m in METHODS if m != "longrope"]


@pytest.mark.parametrize(("path", "method"), WRITTEN, ids=[f"{p.stem}-{m}" for p, m in WRITTEN])
def test_written_configs_load_in_transformers_to_posenc_numbers(path: Path, method: str) -> None:
    """x4 past the native window: transformers' config class and rotary class compute what posenc reports."""
    try:
        w = scale(path, method, 4)
    except PosencError:
        pytest.skip("refused by posenc (counted in the sweep above)")
    text = hf_config(w.patched).get_text_config(decoder=True)
    assert text.model_type not in NO_ROPE_TYPES
    groups = hf_groups(text)
    hf_inv, hf_attention = groups[w.facts.group] if w.facts.group in groups else groups[""]
    window = scaling.max_position_embeddings(w.req)
    # the rotary module's buffers are its frequencies at max_position_embeddings (dynamic NTK grows past that)
    ours = for_request(w.req, seq_len=window)
    np.testing.assert_allclose(ours.inv_freq, hf_inv, rtol=INV_RTOL, atol=0)
    assert ours.attention_factor == pytest.approx(hf_attention, rel=1e-9)
    assert text.max_position_embeddings == window
    if method == "dynamic":  # and at the target, through transformers' own dynamic rope function
        inv, _ = ROPE_INIT_FUNCTIONS["dynamic"](text, seq_len=w.req.target, layer_type=w.facts.group or None)
        np.testing.assert_allclose(for_request(w.req).inv_freq, inv.numpy(), rtol=INV_RTOL, atol=0)


# --- 3 and 4: the commands posenc prints ------------------------------------------------------------------

PICKS = [(p, j) for p in ROPE_FILES for j in (2, 4, 8)]


@pytest.mark.parametrize(("path", "jump"), PICKS, ids=[f"{p.stem}-x{j}" for p, j in PICKS])
def test_picks_same_numbers_command_prints_picks_config(path: Path, jump: int) -> None:
    found = _facts(path)
    assert found is not None and found[1].native is not None
    ctx = str(found[1].native * jump)
    result = run("pick", "--ctx", ctx, "--config", str(path), "--json")
    assert result.exit_code in (0, 2), result.stderr
    if result.exit_code == 2:  # a rope type pick does not extend: one error line
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
        return
    ext = json.loads(result.stdout)["extension"]
    if ext is None:
        return
    argv = shlex.split(ext["command"])
    assert argv[:2] == ["posenc", "scale"] and "MODEL" not in argv and str(path) in argv
    printed = ok(run(*argv[1:]))
    assert json.loads(printed.stdout) == ext["config"]
    # 4: pick's verdict and scale's warning for the same jump
    warned = "warning:" in printed.stderr
    assert warned == bool(ext["warnings"])
    if not ext["fine_tune"]:
        assert warned == (ext["to"] / found[1].native > scaling.TRAINING_FREE_CAP), (ext, printed.stderr)


def test_the_caps_are_the_default_rules_constants() -> None:
    from posenc_cli.pick.rules import load_rules

    constants = load_rules(None).constants
    assert constants["training_free_cap"].value == scaling.TRAINING_FREE_CAP
    assert constants["training_free_cap_asked"].value == scaling.NO_FINETUNE_LIMIT


def test_engine_command_lines_name_the_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    shutil.copy(CORPUS / "qwen3-8b.json", folder / "config.json")
    for fmt in ("vllm", "sglang", "llama-cpp-python"):
        line = ok(run("scale", "yarn", "--config", str(folder), "--factor", "4", "--engine", fmt)).stdout
        assert "MODEL" not in line and str(folder) in line, line
    report = json.loads(run("check", str(folder), "--json").stdout)
    for engine in report["engines"]:
        if engine["engine"] in ("vllm", "sglang"):
            assert str(folder) in engine["invocation"], engine["invocation"]


def test_a_v5_file_stays_v5_through_scale(tmp_path: Path) -> None:
    """transformers 5 writes rope_parameters; scale --config -o keeps it (no --engine needed)."""
    cfg = json.loads((CORPUS / "qwen3-8b.json").read_text())
    converted = json.loads(ok(run("convert", str(CORPUS / "qwen3-8b.json"), "--to", "v5")).stdout)
    assert "rope_parameters" in converted and "rope_scaling" not in converted
    src = tmp_path / "config.json"
    src.write_text(json.dumps(converted))
    dest = tmp_path / "scaled.json"
    ok(run("scale", "yarn", "--config", str(src), "--factor", "4", "-o", str(dest)))
    written = json.loads(dest.read_text())
    assert "rope_parameters" in written and "rope_scaling" not in written and "rope_theta" not in written
    # x4 from the 32,768 Qwen3 was trained at (its 40,960 also reserves output room: posenc_cli.rope.windows)
    assert cfg["max_position_embeddings"] == 40960
    assert written["rope_parameters"]["factor"] == 4.0 and written["max_position_embeddings"] == 4 * 32768
    assert read_source(str(dest)).config == written


def test_the_classes_without_a_default_head_dim_are_the_ones_posenc_writes_it_for() -> None:
    """transformers' yarn and dynamic read ``config.head_dim`` as is; these classes leave it None (Mixtral's yarn
    config without head_dim fails to build its rotary embedding), so posenc writes it for them."""
    import inspect
    import warnings

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from posenc_cli.models.convert import HEAD_DIM_UNSET

    unset = set()
    for model_type, cls in CONFIG_MAPPING.items():
        if "head_dim" not in inspect.signature(cls.__init__).parameters and not hasattr(cls, "head_dim"):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = cls()
            if getattr(config, "head_dim", "absent") is None and getattr(config, "rope_parameters", None) is not None:
                unset.add(model_type)
        except Exception:  # classes that need arguments, or forbid reading a per-layer head_dim: not this case
            continue
    assert unset == HEAD_DIM_UNSET


def test_a_hub_id_is_named_as_given_in_every_printed_command() -> None:
    """Engine command lines and pick's "same numbers" line take the Hub id back (not posenc's label for it)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(root / "docs" / "hub-cache"))

    def posenc(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "posenc_cli", *args], capture_output=True, text=True,
                              timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    hub = "Qwen/Qwen2.5-7B-Instruct"
    line = posenc("scale", "yarn", "--config", hub, "--factor", "4", "--engine", "vllm")
    assert shlex.split(line)[:3] == ["vllm", "serve", hub]
    command = json.loads(posenc("pick", "--ctx", "128k", "--config", hub, "--json"))["extension"]["command"]
    assert shlex.split(command)[:5] == ["posenc", "scale", "yarn", "--config", hub]
    assert json.loads(posenc(*shlex.split(command)[1:])) == json.loads(
        posenc("pick", "--ctx", "128k", "--config", hub, "--json"))["extension"]["config"]


def test_the_native_window_in_the_other_format_is_the_converted_file(tmp_path: Path) -> None:
    """Unchanged numbers, the form asked for: --engine hf-v5 on a v4 file at its own window is posenc convert."""
    path = CORPUS / "llama-3.1-8b-instruct.json"
    dest = tmp_path / "v5.json"
    ok(run("scale", "llama3", "--config", str(path), "--target", "128k", "--engine", "hf-v5", "-o", str(dest)))
    converted = json.loads(ok(run("convert", str(path), "--to", "v5")).stdout)
    assert json.loads(dest.read_text()) == converted
