"""Every model type transformers builds a rotary embedding for, read by posenc and by transformers itself.

The sweep: for each model type in ``posenc_cli/models/model_types.json`` (generated from transformers by
``tests/harness/generate_model_types.py``), the class's own default config (``ConfigClass().to_dict()``, what
``save_pretrained`` of a default config writes) and the same config with each rope type applied to it where the
class accepts it, must give, per layer group, transformers' inv_freq (rtol 1e-6: both sides compute in float32 in
the same order; the one difference is torch's float32 pow against a float64 pow rounded once, an ulp or two of
float32, 1.2e-7 relative each), its attention factor (rel 1e-9: Python floats on both sides) and its rotary dim.
A model type posenc does not read is listed in :data:`NOT_READ` with the reason, and is checked to still be refused
with that reason: the list cannot silently grow or go stale.

The conversion sweep (:func:`test_every_probed_key_reads_like_transformers`) does the same for what each class builds
from the keys real files carry: the defaults written as a legacy file (no rope_parameters, no layer_types) with each
rope key the class names (found live from transformers' source), a flat rope dict, a partial factor inside
rope_parameters and a stray key beside layer-type dicts; it also checks which layers use each group. What posenc still
reads otherwise is listed in :data:`KNOWN_MISREAD` and checked to still differ.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from posenc_cli.errors import PosencError
from posenc_cli.models.model_positions import POSITION_TYPE_GATED, describe
from posenc_cli.models.model_types import generated
from posenc_cli.models.record import spec_for
from posenc_cli.rope.frequencies import compute

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
if __name__ == "__main__":  # run as a script to rewrite a docs page: conftest has not put the harness on sys.path
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))
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
        assert describe(d).family == "none"  # unless asked for (tests/models/test_layer_rotation.py runs both)
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


#: Set by .ci/run's step against the newest transformers the registry serves: a version other than the data's is
#: then compared (and its differences named) instead of skipped.
NEWEST = os.environ.get("POSENC_NEWEST_TRANSFORMERS") == "1"


def staleness(data: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """What the installed transformers has otherwise than the committed data, by name: model types added or gone,
    text classes whose generated facts changed (and which facts)."""
    out = []
    for part in ("models", "text", "without_rotary"):
        added = sorted(set(fresh[part]) - set(data[part]))
        gone = sorted(set(data[part]) - set(fresh[part]))
        if added:
            out.append(f"{part}: new {', '.join(added)}")
        if gone:
            out.append(f"{part}: no longer {', '.join(gone)}")
        for name in sorted(set(data[part]) & set(fresh[part])):
            old, new = data[part][name], fresh[part][name]
            if old != new:
                fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)) \
                    if isinstance(old, dict) and isinstance(new, dict) else ["reason"]
                out.append(f"{part}: {name} changed ({', '.join(fields)})")
    for part in ("auto_config_types", "auto_model_classes"):
        added, gone = sorted(set(fresh[part]) - set(data[part])), sorted(set(data[part]) - set(fresh[part]))
        out += [f"{part}: new {', '.join(added)}"] if added else []
        out += [f"{part}: no longer {', '.join(gone)}"] if gone else []
    return out


def test_staleness_names_what_changed() -> None:
    fresh = copy.deepcopy(DATA)
    fresh["models"]["brand_new"] = fresh["models"]["llama"]
    fresh["text"]["llama"] = {**fresh["text"]["llama"], "theta": 1.0}
    fresh["auto_config_types"] = [*fresh["auto_config_types"], "brand_new"]
    assert staleness(DATA, fresh) == ["models: new brand_new", "text: llama changed (theta)",
                                      "auto_config_types: new brand_new"]
    assert staleness(DATA, DATA) == []


def test_the_data_is_current_for_the_installed_transformers() -> None:
    if transformers.__version__ != DATA["transformers"] and not NEWEST:
        pytest.skip(f"model_types.json is for transformers {DATA['transformers']}, "
                    f"{transformers.__version__} is installed: run tests/harness/generate_model_types.py")
    fresh = json.loads(json.dumps(gen.generate()))
    changes = staleness(DATA, fresh)
    assert not changes, (f"transformers {transformers.__version__} differs from model_types.json (generated from "
                         f"{DATA['transformers']}): run python tests/harness/generate_model_types.py\n"
                         + "\n".join(changes))
    assert {**fresh, "transformers": DATA["transformers"]} == DATA


CORPUS = sorted(p for p in (gen.OUT.parents[2] / "tests" / "corpus").glob("*.json") if p.name != "SOURCES.json")


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
    try:
        as_shipped: dict[str, tuple[np.ndarray, float]] | None = hf_groups(d, model_type)
    except Exception:  # noqa: BLE001 - a file the class refuses as shipped: only the rope types below
        as_shipped = None
    if as_shipped is not None:  # as shipped, with the generated conversions applied, per group and per layer
        assert_same(posenc_groups(d), as_shipped, "as shipped", model_type in REORDERED)
        assert_same_layers(d, model_type, "as shipped")
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


def hf_layer_groups(config_dict: dict[str, Any], model_type: str) -> dict[int, str | None] | None:
    """Which rope dict each layer of transformers' config uses ({layer: key, or None for no rope}), for configs
    whose rope_parameters is per layer type; None for one flat dict (every layer uses it)."""
    config = CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(config_dict))
    text = config.get_text_config(decoder=True)
    view = gen.rope_view(text)
    types = gen._layer_list(text)
    if "" in view or types is None:
        return None
    if DATA["models"][model_type]["text_type"] == "deepseek_v4":
        # DeepseekV4Attention: rope_layer_type "main" on sliding-only layers, "compress" on the others
        return {i: "main" if t == "sliding_attention" else "compress" for i, t in enumerate(types)}
    return {i: (t if view.get(t) else None) for i, t in enumerate(types)}


def assert_same_layers(d: dict[str, Any], model_type: str, context: str) -> None:
    """Each layer posenc puts in a rope group uses that group's dict in transformers; each it says rotates not,
    uses none."""
    theirs = hf_layer_groups(d, model_type)
    if theirs is None:
        return
    model = describe(json.loads(json.dumps(d)))
    for layer in model.layers:
        for i in layer.layers or []:
            assert theirs.get(i) == layer.rope_key, (context, i, layer.rope_key, theirs.get(i))
    for group in model.no_rope:
        for i in group.layers or []:
            assert theirs.get(i) is None, (context, i, group.name, theirs.get(i))


FLAT, INSIDE, STRAY = ("flat rope dict", "partial factor inside rope_parameters",
                       "stray rope_theta beside layer types")


def probe_cases(model_type: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what was probed, config dict) for every key the text class's fields and source name (found live from
    transformers, not from the generated data), set alone on the class defaults as a file without rope_parameters
    and layer_types writes them; plus a flat rope dict and a partial factor inside it, and, for per-layer classes,
    a stray key beside the layer-type dicts."""
    d = default_dict(model_type)
    path = DATA["models"][model_type]["path"]
    text = _node(d, path)
    text_cls = type(CONFIG_MAPPING[model_type]().get_text_config(decoder=True))
    keys = gen.candidate_keys(text_cls)
    n = text.get("num_hidden_layers")
    legacy = {k: v for k, v in text.items() if k not in ("rope_parameters", "layer_types") and k not in keys
              and not (isinstance(v, list) and isinstance(n, int) and len(v) == n > 1)}

    def case(extra: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(d)
        node = _node(out, path[:-1]) if path else None
        new = {**legacy, **extra}
        if node is None:
            return new
        node[path[-1]] = new
        return out

    head_dim = text.get("head_dim") if isinstance(text.get("head_dim"), int) else None
    if head_dim is None and isinstance(text.get("hidden_size"), int) and text.get("num_attention_heads"):
        head_dim = text["hidden_size"] // text["num_attention_heads"]
    for key in keys:
        kind = gen._probe_kind(key)
        if kind == "layers" and isinstance(n, int):
            yield key, case({key: [int(i % 3 == 0) for i in range(n)]})
        elif kind == "dim" and head_dim and head_dim >= 8:
            yield key, case({key: head_dim // 2})
        elif kind == "theta":
            yield key, case({key: 34567.0})
        elif kind == "fraction":
            yield key, case({key: 0.5})
    yield FLAT, case({"rope_parameters": {"rope_type": "linear", "factor": 2.0}})
    yield INSIDE, case(
        {"rope_parameters": {"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.5}})
    rope = text.get("rope_parameters") or {}
    groups = {k: v for k, v in rope.items() if isinstance(v, dict)}
    if groups:
        first = "full_attention" if "full_attention" in groups else next(iter(groups))
        scaled = {**groups, first: {**groups[first], "rope_type": "yarn", "factor": 64.0}}
        yield STRAY, case(
            {"rope_parameters": {**scaled, "rope_theta": 54321.0}, "layer_types": text.get("layer_types")})


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_probed_key_reads_like_transformers(model_type: str) -> None:
    """The conversion sweep: what each config class builds from the keys real files carry, against its rotary
    embedding and its layer types (the same tolerances as above)."""
    if model_type in NOT_READ:
        pytest.skip("not read: " + NOT_READ[model_type])
    compared = 0
    for what, d in probe_cases(model_type):
        try:
            theirs = hf_groups(d, model_type)
        except Exception:  # noqa: BLE001 - the class refuses this file: nothing to compare
            continue
        if d.get("position_embedding_type") == "absolute":
            d["position_embedding_type"] = "rotary"
            theirs = hf_groups(d, model_type)
        if model_type in POSITION_TYPE_GATED and d.get("position_embedding_type") != "rope":  # Granite 4.0-H: NoPE
            d["position_embedding_type"] = "rope"
            theirs = hf_groups(d, model_type)
        context = f"{model_type} with {what}"
        if what in PROBE_REFUSED.get(model_type, {}):
            with pytest.raises(PosencError, match=PROBE_REFUSED[model_type][what]):
                posenc_groups(d)
            continue
        if what in KNOWN_MISREAD.get(model_type, {}):
            with pytest.raises((AssertionError, PosencError)):
                assert_same(posenc_groups(d), theirs, context, model_type in REORDERED)
                assert_same_layers(d, model_type, context)
            compared += 1
            continue
        assert_same(posenc_groups(d), theirs, context, model_type in REORDERED)
        assert_same_layers(d, model_type, context)
        compared += 1
    assert compared, "no probe the class accepts"


#: Probes posenc refuses rather than misread, with the words its error carries.
PROBE_REFUSED: dict[str, dict[str, str]] = {}

_MLA = ("MLA: a file writing head_dim beside another qk_rope_head_dim; the class keeps the file's head_dim, posenc's "
        "MLA rule reads qk_rope_head_dim (the two are equal in every shipped file)")
_GEMMA = "Gemma-style per-layer rope built in the class's code; posenc's hand rule differs for this key"
_COMPOSITE = ("the composite fills its own text defaults (rope_theta 1e8) into a text_config whose rope dict names no "
              "theta; posenc takes the text class's")
_CODE = "rope built in the class's code from per-type defaults, not a key conversion the probes name"
#: dots.note 3 (and its text class) builds its sliding and full rope in its own code from every key probed here
_DOTS3 = dict.fromkeys(("partial_rotary_factor", "rope_theta", "swa_qk_rope_head_dim", "swa_rope_theta", FLAT,
                        INSIDE), _CODE)
#: Probes posenc still reads otherwise than transformers under 5.25 (model type -> probe -> why). Each is checked to
#: still differ, so the list cannot go stale; a fix removes its entry.
KNOWN_MISREAD: dict[str, dict[str, str]] = {
    "beam": {"rope_theta": _CODE},
    "deepseek_v3": {"qk_rope_head_dim": _MLA},
    "deepseek_v4": {STRAY: _CODE},
    "diffusion_gemma": {"partial_rotary_factor": _GEMMA},
    "diffusion_gemma_text": {"partial_rotary_factor": _GEMMA},
    "dory": {"rope_theta": _CODE, STRAY: _CODE},
    "dots3_note": _DOTS3,
    "dots3_note_text": _DOTS3,
    "embedding_gemma2": {"rope_theta": _GEMMA},
    "embedding_gemma2_text": {"rope_theta": _GEMMA},
    "ergo": {INSIDE: _CODE},
    "esm": {INSIDE: _CODE},
    "kimi_k25": {"qk_rope_head_dim": _MLA},
    "lfm3": {"partial_rotary_factor": _CODE},
    "lfm3_vl": {"partial_rotary_factor": _CODE},
    "neomme": {"partial_rotary_factor": _CODE, "rope_theta": _CODE},
    "voxtral": {FLAT: _COMPOSITE},
    "voxtral_realtime": {FLAT: _COMPOSITE},
}


#: Configs shaped like the files of models whose meaning the config class builds in code, constructed from the keys
#: those files carry (tests/fixtures/conversions/; not verbatim shipped files): DeepSeek-V4-Pro (legacy rope_scaling
#: plus compress_rope_theta), MiniMax-M2 (rotary_dim 64 of head_dim 128), MiMo-V2-Flash (swa_rope_theta,
#: hybrid_layer_pattern, no layer_types), a per-layer-type rope_parameters with a stray top-level key, and a
#: streaming speech model (Moonshine Streaming) with its partial factor inside rope_parameters.
SHAPED = sorted((gen.OUT.parents[2] / "tests" / "fixtures" / "conversions").glob("*.json"))


@pytest.mark.parametrize("path", SHAPED, ids=[p.name for p in SHAPED])
def test_configs_shaped_like_real_files_read_like_transformers(path: Any) -> None:
    """Per layer group and per layer, against transformers' config class and rotary embedding; every group some
    layer uses is reported."""
    d: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    model_type = d["model_type"]
    ours, theirs = posenc_groups(d), hf_groups(d, model_type)
    assert_same(ours, theirs, path.name)
    assert_same_layers(d, model_type, path.name)
    used = hf_layer_groups(d, model_type)
    if used is not None:
        assert {g for g in used.values() if g is not None} == set(ours), (path.name, sorted(ours))
    # a dict transformers builds that no layer uses (DeepSeek-V4-Pro's "main") is named in a note
    notes = " ".join(describe(d).notes)
    for name in set(theirs) - set(ours):
        assert f"rope dict {name!r}" in notes and "no layer uses it" in notes, (path.name, notes)


INSPECT_PAGE = gen.OUT.parents[2] / "docs" / "commands" / "inspect.md"


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
    from posenc_cli.models.remote_code import FAMILIES

    rows = coverage()
    remote = sorted(f for f in FAMILIES if f not in DATA["models"])
    unserved = [f for f in remote if f in ("llava_llama", "vila")]  # test_remote_code proves they get no numbers
    served = [f for f in remote if f not in unserved]
    lines = [f"| transformers {DATA['transformers']}: {len(DATA['models']) + len(DATA['without_rotary'])} model types "
             "| count |", "| --- | ---: |"]
    lines += [f"| {row} | {len(types)} |" for row, types in sorted(rows.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    lines += ["| **remote code** (no class in transformers) | |",
              f"| numbers from vLLM 0.34 / SGLang 0.5.23 model code ({', '.join(served)}) | {len(served)} |",
              f"| named, no numbers: no engine has a model class ({', '.join(unserved)}) | {len(unserved)} |"]
    return "\n".join(lines)


COVERAGE_DOC = INSPECT_PAGE.parent.parent / "model-types.md"


def coverage_doc() -> str:
    """docs/model-types.md: every model type by row, with the generator's reason for each type it found no rotary
    embedding for."""
    out = [f"# Model types of transformers {DATA['transformers']}, by what posenc reads",
           "", "Written by `tests/models/test_model_types.py` (`test_the_model_type_list_is_the_data` fails when it is "
           "stale; run `python tests/models/test_model_types.py` to rewrite it).", ""]
    for row, types in sorted(coverage().items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out += [f"## {row} ({len(types)})", ""]
        out += [f"- `{t}`" + (f": {DATA['without_rotary'][t]}" if t in DATA["without_rotary"] and
                              not row.endswith("reported as such") and "rule" not in row else "") for t in types]
        out.append("")
    return "\n".join(out)


def test_the_model_type_list_is_the_data() -> None:
    assert COVERAGE_DOC.read_text(encoding="utf-8") == coverage_doc(), "run python tests/models/test_model_types.py"


def test_the_inspect_page_coverage_table_is_the_data() -> None:
    table = coverage_table()
    assert table in INSPECT_PAGE.read_text(encoding="utf-8"), f"inspect.md's coverage table should read:\n{table}"


if __name__ == "__main__":  # rewrite docs/model-types.md from the data
    with gen.quiet():
        COVERAGE_DOC.write_text(coverage_doc(), encoding="utf-8")
