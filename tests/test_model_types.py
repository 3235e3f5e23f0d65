"""Every model type transformers builds a rotary embedding for, read by posenc and by transformers itself.

The sweep: for each model type in ``posenc_cli/model_types.json`` (generated from transformers by
``tests/generate_model_types.py``), the class's own default config (``ConfigClass().to_dict()``, what
``save_pretrained`` of a default config writes) and the same config with each rope type applied to it where the
class accepts it, must give, per layer group, transformers' inv_freq (rtol 1e-6: both sides compute in float32 in
the same order; the one difference is torch's float32 pow against a float64 pow rounded once, an ulp or two of
float32, 1.2e-7 relative each), its attention factor (rel 1e-9: Python floats on both sides) and its rotary dim.
A model type posenc does not read is listed in :data:`NOT_READ` with the reason, and is checked to still be refused
with that reason: the list cannot silently grow or go stale.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from posenc_cli.errors import PosencError
from posenc_cli.frequencies import compute
from posenc_cli.inspection import spec_for
from posenc_cli.models import POSITION_TYPE_GATED, describe, generated

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
import generate_model_types as gen  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

DATA = generated()
MODEL_TYPES = sorted(DATA["models"])
INV_RTOL = 1e-6

#: Model types posenc refuses, with the words its error carries. Each is checked to be refused still.
NOT_READ: dict[str, str] = {
    # vision encoders whose rotary embedding turns with 2-D patch coordinates: no sequence positions to report
    "mlcd": "vision encoder", "mlcd_vision_model": "vision encoder", "sam3_vit_model": "vision encoder",
    "efficientloftr": "vision encoder", "eomt_dinov3": "vision encoder",
}
#: Model types whose inv_freq buffer holds the same frequencies in another order: ERNIE 4.5 VL pre-rotates the
#: height/width pairs of its 3-D rope (``inv_freq[:hw]`` interleaved) so that text positions, where all three
#: coordinates are equal, see plain RoPE. posenc reports them in plain order; the test checks the same multiset.
REORDERED = {"ernie4_5_vl_moe", "ernie4_5_vl_moe_text"}

#: rope dicts applied to every class (the flat ones as given; per-layer classes get them on full attention)
ROPE_TYPES: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "longrope": {"rope_type": "longrope"},
}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """transformers' warnings and log lines (unknown keys, defaults) silenced for these tests only."""
    with gen.quiet():
        yield


def _node(d: dict[str, Any], path: list[str]) -> dict[str, Any]:
    for key in path:
        d = d[key]
    return d


def hf_groups(config_dict: dict[str, Any], model_type: str) -> dict[str, tuple[np.ndarray, float]]:
    """transformers' own rotary buffers for a config dict: {layer type or "": (inv_freq, attention factor)}."""
    config = CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(config_dict))
    text = config.get_text_config(decoder=True)
    module = importlib.import_module(type(text).__module__.replace(".configuration_", ".modeling_"))
    rotary = getattr(module, DATA["text"][type(text).model_type or DATA["models"][model_type]["text_type"]]["rotary"])
    return gen.inv_freq_groups(rotary(text))


def posenc_groups(config_dict: dict[str, Any]) -> dict[str, tuple[np.ndarray, float, int]]:
    """{rope dict key ("" for a flat dict): (inv_freq, attention factor, rotary dim)} of every group posenc reports."""
    model = describe(json.loads(json.dumps(config_dict)))
    assert model.family == "rope", (model.family, model.notes)
    out = {}
    for layer in model.layers:
        spec = spec_for(model, layer)
        freqs = compute(spec, None, top_level=model.top_level)
        out[layer.rope_key] = (freqs.inv_freq, freqs.attention_factor, spec.rotary_dim)
    return out


def assert_same(ours: dict[str, tuple[np.ndarray, float, int]], theirs: dict[str, tuple[np.ndarray, float]],
                context: str, reordered: bool = False) -> None:
    """Each group posenc reports against transformers' buffer of the same rope dict; every buffer is reported
    unless some layer group of the model uses none of it (DeepSeek V4's default config)."""
    assert ours, context
    if set(theirs) == {""}:
        assert set(ours) == {""}, (context, sorted(ours))
    else:
        assert set(ours) <= set(theirs), (context, sorted(ours), sorted(theirs))
    for name, (inv, attention, rotary_dim) in ours.items():
        hf_inv, hf_attention = theirs[name]
        where = f"{context} {name}".strip()
        assert inv.shape == hf_inv.shape, (where, inv.shape, hf_inv.shape)
        if reordered:
            inv, hf_inv = np.sort(inv), np.sort(hf_inv)
        np.testing.assert_allclose(inv, hf_inv, rtol=INV_RTOL, atol=0, err_msg=where)
        assert attention == pytest.approx(hf_attention, rel=1e-9), where
        # an odd rotary dim (int(head_dim * factor)) still rotates whole pairs: ceil(dim / 2) of them
        assert math.ceil(rotary_dim / 2) == hf_inv.shape[0], where


def with_rope(config_dict: dict[str, Any], model_type: str, params: dict[str, Any]) -> dict[str, Any]:
    """The default config with ``params`` as its rope dict (full-attention layers for per-layer classes)."""
    d = copy.deepcopy(config_dict)
    text = _node(d, DATA["models"][model_type]["path"])
    rope = text.get("rope_parameters") or {}
    nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())
    base = rope.get("full_attention", next(iter(rope.values()))) if nested else rope
    new = {k: v for k, v in base.items() if k in ("rope_theta", "partial_rotary_factor")}
    new.update(params)
    max_pos = text.get("max_position_embeddings")
    if params["rope_type"] in ("yarn", "llama3", "longrope"):
        if not isinstance(max_pos, int):
            raise LookupError("no max_position_embeddings to scale from")
        new["original_max_position_embeddings"] = max_pos
        text["max_position_embeddings"] = max_pos * 4
    if params["rope_type"] == "longrope":
        model = describe(json.loads(json.dumps(config_dict)))
        spec = spec_for(model, model.layers[0])
        pairs = math.ceil(spec.rotary_dim / 2)
        new["short_factor"] = [1.0 + i / pairs for i in range(pairs)]
        new["long_factor"] = [1.0 + 3 * i / pairs for i in range(pairs)]
    if nested:
        key = "full_attention" if "full_attention" in rope else next(iter(rope))
        text["rope_parameters"] = {**rope, key: new}
    else:
        text["rope_parameters"] = new
    text.pop("rope_scaling", None)
    return d


def default_dict(model_type: str) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads(json.dumps(CONFIG_MAPPING[model_type]().to_dict(), default=str))
    return saved


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_model_type_reads_like_transformers(model_type: str) -> None:
    d = default_dict(model_type)
    if model_type in NOT_READ:
        with pytest.raises(PosencError, match=NOT_READ[model_type]):
            posenc_groups(d)
        return
    if d.get("position_embedding_type") == "absolute":  # BERT-style (ESM): rotary only when asked for
        assert describe(d).family == "learned"
        d["position_embedding_type"] = "rotary"
    if model_type in POSITION_TYPE_GATED and d.get("position_embedding_type") != "rope":  # Granite 4.0-H: NoPE
        assert describe(d).family == "none"  # unless asked for (tests/test_layer_rotation.py runs both)
        d["position_embedding_type"] = "rope"
        d["layer_types"] = ["attention"] * d["num_hidden_layers"]  # its default has Mamba layers only
    reordered = model_type in REORDERED
    assert_same(posenc_groups(d), hf_groups(d, model_type), "default", reordered)
    for name, params in ROPE_TYPES.items():
        try:
            scaled = with_rope(d, model_type, params)
            theirs = hf_groups(scaled, model_type)
        except Exception:  # noqa: BLE001 - the class does not take this rope type: nothing to compare
            continue
        assert_same(posenc_groups(scaled), theirs, name, reordered)


def test_the_sweep_covers_what_transformers_has() -> None:
    """The data names every model type with a rotary class; the sweep is not a handful."""
    assert len(MODEL_TYPES) >= 250, len(MODEL_TYPES)
    assert set(NOT_READ) <= set(MODEL_TYPES)


def test_the_data_is_current_for_the_installed_transformers() -> None:
    if transformers.__version__ != DATA["transformers"]:
        pytest.skip(f"model_types.json is for transformers {DATA['transformers']}, "
                    f"{transformers.__version__} is installed: run tests/generate_model_types.py")
    assert json.loads(json.dumps(gen.generate())) == DATA


CORPUS = sorted(p for p in (gen.OUT.parent.parent / "tests" / "corpus").glob("*.json") if p.name != "SOURCES.json")


def _corpus_case(path: Any) -> tuple[dict[str, Any], str] | None:
    """(config dict, model type) for a corpus file transformers reads with a rotary class of its own."""
    d: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    model_type = str(d.get("model_type") or "")
    entry = DATA["models"].get(model_type)
    if entry is None:
        return None
    node: Any = d
    for key in entry["path"]:
        node = node.get(key) if isinstance(node, dict) else None
    return (d, model_type) if isinstance(node, dict) else None


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_corpus_file_with_every_rope_type_reads_like_transformers(path: Any) -> None:
    """The real configs, each with every rope type its class accepts put in its own rope dict's place."""
    case = _corpus_case(path)
    if case is None:
        pytest.skip("no config class with a rotary embedding in transformers, or no sub-config to put a rope in")
    d, model_type = case
    refused = []
    for name, params in ROPE_TYPES.items():
        try:
            scaled = with_rope(d, model_type, params)
            theirs = hf_groups(scaled, model_type)
        except Exception as exc:  # noqa: BLE001 - the class does not take this rope type: nothing to compare
            refused.append(f"{name}: {type(exc).__name__}")
            continue
        assert_same(posenc_groups(scaled), theirs, name, model_type in REORDERED)
    if len(refused) == len(ROPE_TYPES):
        pytest.skip(f"the class takes none of the rope types with this file's other keys ({'; '.join(refused)})")


INSPECT_PAGE = gen.OUT.parent.parent / "docs" / "commands" / "inspect.md"


def coverage() -> dict[str, list[str]]:
    """Every model type transformers has, by what posenc does with it (row label -> model types)."""
    rows: dict[str, list[str]] = {}
    for model_type in sorted(set(DATA["models"]) | set(DATA["without_rotary"])):
        if model_type in DATA["models"]:
            row = "refused: 2-D rotary over image patches" if model_type in NOT_READ else \
                "RoPE, numbers equal to transformers' rotary buffers (the sweep)"
        else:
            try:
                family = describe(default_dict(model_type)).family
            except Exception:  # noqa: BLE001 - the class cannot build its own default config
                family = "no default config"
            row = {"rope": "RoPE from a hand-written rule (GPT-J, CodeGen), or read like Llama with a note saying "
                           "so (config-only classes, paths the generator cannot walk)",
                   "unknown": "not read: no rotary embedding built from the config (vision/audio encoders, "
                              "positions in other code)",
                   "none": "no positions (state-space and hybrid models), reported as such",
                   "no default config": "not read: the class cannot build its own default config"}.get(
                family, f"{family.replace('_', ' ')} positions, reported as such")
        rows.setdefault(row, []).append(model_type)
    return rows


def coverage_table() -> str:
    """The coverage table of docs/commands/inspect.md, computed from :func:`coverage`."""
    from posenc_cli.remote_code import FAMILIES

    rows = coverage()
    remote = sorted(f for f in FAMILIES if f not in DATA["models"])
    unserved = [f for f in remote if f in ("llava_llama", "vila")]  # test_remote_code proves they get no numbers
    served = [f for f in remote if f not in unserved]
    lines = [f"| transformers {DATA['transformers']}: {len(DATA['models']) + len(DATA['without_rotary'])} model types "
             "| count |", "| --- | ---: |"]
    lines += [f"| {row} | {len(types)} |" for row, types in sorted(rows.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    lines += ["| **remote code** (no class in transformers) | |",
              f"| numbers from vLLM 0.33 / SGLang 0.5.23 model code ({', '.join(served)}) | {len(served)} |",
              f"| named, no numbers: no engine has a model class ({', '.join(unserved)}) | {len(unserved)} |"]
    return "\n".join(lines)


COVERAGE_DOC = INSPECT_PAGE.parent.parent / "model-types.md"


def coverage_doc() -> str:
    """docs/model-types.md: every model type by row, with the generator's reason for each type it found no rotary
    embedding for."""
    out = [f"# Model types of transformers {DATA['transformers']}, by what posenc reads",
           "", "Written by `tests/test_model_types.py` (`test_the_model_type_list_is_the_data` fails when it is stale; "
           "run `python tests/test_model_types.py` to rewrite it).", ""]
    for row, types in sorted(coverage().items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out += [f"## {row} ({len(types)})", ""]
        out += [f"- `{t}`" + (f": {DATA['without_rotary'][t]}" if t in DATA["without_rotary"] and
                              not row.endswith("reported as such") and "rule" not in row else "") for t in types]
        out.append("")
    return "\n".join(out)


def test_the_model_type_list_is_the_data() -> None:
    assert COVERAGE_DOC.read_text(encoding="utf-8") == coverage_doc(), "run python tests/test_model_types.py"


def test_the_inspect_page_coverage_table_is_the_data() -> None:
    table = coverage_table()
    assert table in INSPECT_PAGE.read_text(encoding="utf-8"), f"inspect.md's coverage table should read:\n{table}"


if __name__ == "__main__":  # rewrite docs/model-types.md from the data
    with gen.quiet():
        COVERAGE_DOC.write_text(coverage_doc(), encoding="utf-8")
