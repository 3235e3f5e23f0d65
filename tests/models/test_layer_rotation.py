"""Which layers apply RoPE, and with what, per model type: posenc's reading against transformers' forward pass.

``tests/data/layer_rotation.json`` (written by ``tests/harness/generate_layer_rotation.py``) holds, for every model type
transformers builds on CPU, a tiny random model's per-layer record: whether the layer's attention called a rotary
application function and, from the cos / sin it passed, the rotary dims, the frequencies and the attention factor.
Each record is compared with :func:`posenc_cli.models.model_positions.describe` of the very config dict the model was
built from:

* which layers rotate: exactly the same set;
* rotary dims: ``2 * ceil(rotary_dim / 2)`` (an odd rotary dim still turns whole pairs) equal to the dims measured;
* frequencies: the multiset, high to low, rtol 1e-6. The measured ones are ``atan2`` of float32 cos / sin at
  positions 0 and 1 (each rounded by half an ulp, 6e-8 relative, which moves the angle by at most ~1.2e-7
  relative) of a float32 inv_freq that posenc matches to 1.2e-7 (tests/models/test_model_types.py): 1e-6 leaves room
  for both with a margin and still tells any two rope settings apart (the nearest, a 2x linear factor, is 1.0);
* attention factor: rel 1e-6 (``hypot`` of the same float32 cos / sin, a few 1e-8).

A model type whose reading differs is listed in :data:`MISMATCHES` with the reason, and is checked to still differ,
so the list cannot go stale.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np
import pytest

from posenc_cli.errors import PosencError
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for
from posenc_cli.rope.frequencies import compute

pytestmark = pytest.mark.numeric

if __name__ == "__main__":  # run as a script to rewrite a docs page: conftest has not put the harness on sys.path
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))
import generate_layer_rotation as gen  # noqa: E402

DATA: dict[str, Any] = json.loads(gen.OUT.read_text(encoding="utf-8"))
INV_RTOL = 1e-6
ATTENTION_REL = 1e-6

#: Model types (``type:``) and variants (``variant:``) whose per-layer reading differs from the forward pass, with
#: why. Each is checked to still differ.
_STALE = ("posenc_cli/models/model_types.json (generated from transformers 5.25) records no rotary embedding for "
          "this type: tests/harness/generate_model_types.py does not find where its class builds one, yet the "
          "forward pass rotates every layer; posenc refuses the config as unknown rather than misreading it")
MISMATCHES: dict[str, str] = {
    "type:granite4_vision": _STALE, "type:granite4_vision_text": _STALE, "type:higgs_audio_v2": _STALE,
    "type:roformer": "RoFormer (an encoder) rotates with sinusoidal positions its own attention code computes; posenc "
                     "does not read it (not read: no rotary embedding built from the config)",
}

_INTERLEAVE = ("rope_interleave picks the interleaved or the half-split application of the same frequencies on every "
               "layer (probed on deepseek_v3)")
_MODEL_WIDE = "a model-wide switch between rotary and another position encoding, not a per-layer choice"
_KV_SHARED = "kv-shared layers reuse the keys rotated by an earlier layer; their queries rotate (measured)"
_CROSS = "cross-attention to another sequence (encoder, image) skips RoPE; the decoder's self-attention is measured"
_UNBUILT = "the shrunk model does not build or run on CPU (see its entry in the data): no measurement to probe"
#: Modeling modules whose rotary call sits under an ``if`` that neither a variant (``gen.VARIANTS``) probes nor a
#: default build shows deciding (some layers rotating, some not), and why that is fine. A guarded module that is
#: none of these fails the test; an entry that no longer names a guarded module fails it too.
GUARDS: dict[str, str] = {
    "axk1": _INTERLEAVE, "glm4_moe_lite": _INTERLEAVE, "mistral4": _INTERLEAVE, "youtu": _INTERLEAVE,
    "codegen": "rotary_dim None rotates the whole head instead of the first rotary_dim dims, on every layer",
    "gptj": "rotary_dim None rotates the whole head instead of the first rotary_dim dims, on every layer",
    "clvp": _MODEL_WIDE, "kyutai_speech_to_text": _MODEL_WIDE, "moshi": _MODEL_WIDE, "esm": _MODEL_WIDE,
    "evolla": _MODEL_WIDE, "seamless_m4t": _MODEL_WIDE, "wav2vec2_bert": _MODEL_WIDE, "wav2vec2_conformer": _MODEL_WIDE,
    "gemma3n": _KV_SHARED, "gemma4": _KV_SHARED, "gemma4_unified": _KV_SHARED,
    "idefics": _CROSS, "moonshine": _CROSS, "moonshine_streaming": _CROSS, "roformer": _CROSS,
    "efficientloftr": "a vision matcher: 2-D rotary over image keypoints, which posenc refuses",
    "lightglue": "a vision matcher: rotary over keypoint positions, no sequence positions",
    "deepseek_v4": "the compressor rotates its compressed keys once a chunk is full (sequence length, not layer)",
    "qwen4_exp": "block selection rotates once a block is complete (sequence length, not layer); " + _UNBUILT,
    "cohere_compass": _UNBUILT, "kolibri1_1": _UNBUILT, "zamba2": _UNBUILT,
    "exaone4_5": "EXAONE 4's rule in EXAONE 4.5's own module; its text model is built with exaone4's and measured",
    "granite_swa": "passes position_embeddings=None to no layer in its default; granite_swa's sweep shows every layer",
    "granitemoe_swa": "passes position_embeddings=None to no layer in its default; the sweep shows every layer",
}


def cases() -> dict[str, str]:
    """{case id: build key} for every built model type and variant."""
    out = {f"type:{t}": v["build"] for t, v in DATA["types"].items() if "build" in v}
    out.update({f"variant:{label}": v["build"] for label, v in DATA["variants"].items() if "build" in v})
    return out


CASES = cases()


Layer = tuple[int, np.ndarray, float | None]


def measured(build: dict[str, Any]) -> list[Layer | None]:
    """transformers' per-layer rope from the data: (dims, frequencies high to low, attention factor) or None."""
    out: list[Layer | None] = []
    for index in build["layers"]:
        if index is None:
            out.append(None)
            continue
        rope = build["ropes"][index]
        out.append((int(rope["dims"]), np.array(rope["inv_freq"], dtype=np.float64), rope["attention"]))
    return out


def read(config: dict[str, Any], n: int) -> list[Layer | None]:
    """posenc's per-layer rope for a config dict, in the same form as :func:`measured`."""
    model = describe(json.loads(json.dumps(config)))
    out: list[Layer | None] = [None] * n
    if model.family != "rope":
        return out
    for group in model.layers:
        spec = spec_for(model, group)
        freqs = compute(spec, None, top_level=model.top_level)
        inv = np.sort(np.asarray(freqs.inv_freq, dtype=np.float64))[::-1]
        for i in group.layers if group.layers is not None else range(n):
            if i < n:
                out[i] = (2 * math.ceil(spec.rotary_dim / 2), inv, freqs.attention_factor)
    return out


def differences(build: dict[str, Any]) -> list[str]:
    """What posenc says otherwise than the forward pass, layer by layer (empty: the same)."""
    theirs = measured(build)
    try:
        ours = read(build["config"], len(theirs))
    except PosencError as exc:
        return [f"posenc refuses the config: {exc}"]
    out = []
    hf_rot = [i for i, x in enumerate(theirs) if x is not None]
    our_rot = [i for i, x in enumerate(ours) if x is not None]
    if hf_rot != our_rot:
        out.append(f"rotating layers: transformers {hf_rot}, posenc {our_rot}")
    for i in sorted(set(hf_rot) & set(our_rot)):
        (hd, hf_inv, hf_att), (od, our_inv, our_att) = theirs[i], ours[i]  # type: ignore[misc]
        if hd != od:
            out.append(f"layer {i}: rotary dims transformers {hd}, posenc {od}")
        elif hf_inv.size and not np.allclose(our_inv, hf_inv, rtol=INV_RTOL, atol=1e-12):
            worst = float(np.max(np.abs(our_inv - hf_inv) / np.maximum(np.abs(hf_inv), 1e-30)))
            out.append(f"layer {i}: frequencies differ (worst relative {worst:.3g})")
        if hf_att is not None and not math.isclose(our_att, hf_att, rel_tol=ATTENTION_REL):
            out.append(f"layer {i}: attention factor transformers {hf_att}, posenc {our_att}")
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_rotates_as_posenc_reads_it(case: str) -> None:
    build = DATA["builds"][CASES[case]]
    found = differences(build)
    if case in MISMATCHES:
        assert found, f"{case} now matches: drop it from MISMATCHES ({MISMATCHES[case]})"
        return
    assert not found, f"{case} ({build['text_type']}, {build['model_class']}): " + "; ".join(found)


def test_the_comparison_sees_a_wrong_frequency_and_a_wrong_attention_factor() -> None:
    """The comparison is live: a theta 1e-4 off moves the frequencies past the tolerance, an attention factor set
    to 1.2 where YaRN's is 1.3466 (gpt-oss) is caught, and so is a layer posenc would rotate that does not."""
    build = copy.deepcopy(DATA["builds"][CASES["type:llama"]])
    build["config"]["rope_parameters"]["rope_theta"] *= 1.0001
    assert any("frequencies" in d for d in differences(build))
    build = copy.deepcopy(DATA["builds"][CASES["type:gpt_oss"]])
    build["config"]["rope_parameters"]["attention_factor"] = 1.2
    assert any("attention factor" in d for d in differences(build))
    build = copy.deepcopy(DATA["builds"][CASES["type:cohere2"]])
    build["layers"] = [build["layers"][0]] * len(build["layers"])
    assert any("rotating layers" in d for d in differences(build))


def test_the_mismatch_list_names_built_cases() -> None:
    assert set(MISMATCHES) <= set(CASES), sorted(set(MISMATCHES) - set(CASES))


def test_the_sweep_is_not_a_handful() -> None:
    """Most model types with a rotary embedding build; the per-layer patterns that matter are among them."""
    built = {t for t, v in DATA["types"].items() if "build" in v}
    assert len(built) >= 200, len(built)
    assert {"cohere2", "llama4", "gemma3", "qwen3_next", "smollm3", "exaone4", "mllama"} <= built
    patterns = {tuple(x is None for x in DATA["builds"][k]["layers"]) for k in CASES.values()}
    assert len(patterns) >= 5, patterns  # not all "every layer rotates"


def test_no_rope_is_claimed_where_the_modeling_code_applies_none() -> None:
    """A model type whose modeling module has no rotary application function is never read as RoPE."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    claimed = []
    with gen.quiet():
        for model_type, entry in DATA["types"].items():
            if "applies no rotary" not in entry.get("skipped", ""):
                continue
            config = json.loads(json.dumps(CONFIG_MAPPING[model_type]().to_dict(), default=str))
            try:
                model = describe(config)
            except PosencError:
                continue  # refused: no claim
            if model.family == "rope" and model.layers:
                claimed.append(model_type)
    assert not claimed


def _module_of(model_type: str) -> str:
    """The model folder of a model type's text config class (where its modeling code is)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    text = CONFIG_MAPPING[model_type]().get_text_config(decoder=True)
    return str(type(text).__module__.split(".")[-2])


def test_every_guarded_rotary_call_is_probed_or_accounted_for() -> None:
    """A modeling module whose rotary call sits under an ``if`` (the per-layer decision) has a variant probing it,
    a default build showing it decide, or a reason in :data:`GUARDS`."""
    covered = {_module_of(model_type) for _, model_type, _ in gen.VARIANTS}
    for model_type, entry in DATA["types"].items():
        layers = DATA["builds"][entry["build"]]["layers"] if "build" in entry else []
        if None in layers and any(x is not None for x in layers):
            covered.add(_module_of(model_type))
    missing = sorted(set(DATA["conditions"]) - covered - set(GUARDS))
    assert not missing, {m: DATA["conditions"][m] for m in missing}
    stale = sorted(set(GUARDS) - (set(DATA["conditions"]) - covered))
    assert not stale, stale


#: a sample regenerated in memory: the issue's two families, the usual patterns, and each variant of Granite 4.0-H
FRESH_TYPES = ["cohere2", "llama", "gemma3_text", "llama4_text", "qwen3_next"]
FRESH_VARIANTS = ["granitemoehybrid rope", "granitemoehybrid nope", "cohere2 pattern 2"]


def test_the_data_is_current_for_the_installed_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != DATA["transformers"]:
        pytest.skip(f"layer_rotation.json is for transformers {DATA['transformers']}, {transformers.__version__} "
                    "is installed: run tests/harness/generate_layer_rotation.py")
    start = time.monotonic()
    fresh = json.loads(json.dumps(gen.generate(FRESH_TYPES, FRESH_VARIANTS)))
    for model_type in FRESH_TYPES:
        assert fresh["types"][model_type] == DATA["types"][model_type], model_type
    for label in FRESH_VARIANTS:
        assert fresh["variants"][label] == DATA["variants"][label], label
    for key, build in fresh["builds"].items():
        assert build == DATA["builds"][key], key
    assert fresh["conditions"] == DATA["conditions"]
    assert time.monotonic() - start < 300  # the sample stays a sample


INSPECT_PAGE = gen.OUT.parent.parent.parent / "docs" / "commands" / "inspect.md"
TABLE_START = "<!-- layer-rotation table: tests/models/test_layer_rotation.py -->"
TABLE_END = "<!-- end layer-rotation table -->"


def coverage_table() -> str:
    """The per-layer sweep's table of docs/commands/inspect.md, computed from the data."""
    types = DATA["types"]
    built = sorted(t for t, v in types.items() if "build" in v)

    def pattern(t: str) -> str:
        layers = DATA["builds"][types[t]["build"]]["layers"]
        return "every layer rotates" if None not in layers else (
            "no layer rotates" if all(x is None for x in layers) else "some layers without RoPE")

    differ = sorted(t for t in built if f"type:{t}" in MISMATCHES)
    variants = sorted(label for label, v in DATA["variants"].items() if "build" in v)
    variants_differ = [label for label in variants if f"variant:{label}" in MISMATCHES]
    skipped: dict[str, int] = {}
    for v in types.values():
        if "skipped" in v:
            key = "no rotary embedding in its modeling module" if "applies no rotary" in v["skipped"] else \
                "no model code in transformers, or it needs a package that is not installed"
            skipped[key] = skipped.get(key, 0) + 1
    failed = sum("failed" in v for v in types.values())
    lines = [f"| transformers {DATA['transformers']}: {len(types)} model types, one forward pass each | count |",
             "| --- | ---: |"]
    for name in ("every layer rotates", "some layers without RoPE", "no layer rotates"):
        lines.append(f"| built and run: {name} | {sum(pattern(t) == name for t in built)} |")
    lines += [f"| built: posenc's per-layer reading equals the forward pass (which layers rotate, rotary dims, "
              f"frequencies, attention factor) | {len(built) - len(differ)} |",
              f"| built: posenc differs, with the reason in the test ({', '.join(differ) or 'none'}) | {len(differ)} |",
              f"| config variants that change which layers rotate (Granite 4.0-H `position_embedding_type`, "
              f"Cohere2 / Gemma 3 / EXAONE 4 patterns, `no_rope_layers`, ...): equal | "
              f"{len(variants) - len(variants_differ)} of {len(variants)} |"]
    lines += [f"| not built: {key} | {n} |" for key, n in sorted(skipped.items(), key=lambda kv: -kv[1])]
    lines.append(f"| not built: the shrunk model does not build or run on CPU (reason in the data) | {failed} |")
    return "\n".join([TABLE_START, *lines, TABLE_END])


def test_the_inspect_page_layer_table_is_the_data() -> None:
    page = INSPECT_PAGE.read_text(encoding="utf-8")
    table = coverage_table()
    assert table in page, f"run python tests/models/test_layer_rotation.py; the table should read:\n{table}"


if __name__ == "__main__":  # rewrite the table in docs/commands/inspect.md from the data
    text = INSPECT_PAGE.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    INSPECT_PAGE.write_text(text[:start] + coverage_table() + text[end:], encoding="utf-8")


def _rule_module(rule: str) -> Any:
    """The module holding a hand rule: the layer readers (no_rope_layers) or the position reader."""
    from posenc_cli.models import layer_types, model_positions

    return layer_types if rule == "NO_ROPE_LAYERS_TYPES" else model_positions


def _rule_cases() -> list[tuple[str, str]]:
    from posenc_cli.models import model_positions as models

    names = ("SLIDING_ONLY_TYPES", "FULL_NOPE_TYPES", "POSITION_TYPE_GATED", "NO_ROPE_LAYERS_TYPES")
    rules = [(name, member) for name in names for member in sorted(getattr(_rule_module(name), name))]
    return rules + [("_NO_ATTENTION_LAYER_TYPES", key) for key in sorted(models._NO_ATTENTION_LAYER_TYPES)]


@pytest.mark.parametrize(("rule", "member"), _rule_cases())
def test_every_hand_rule_is_needed(rule: str, member: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry of posenc's per-layer rules, taken out, makes some measured case differ: none is dead weight."""
    models = _rule_module(rule)
    table = getattr(models, rule)
    monkeypatch.setattr(models, rule, {k: v for k, v in table.items() if k != member} if isinstance(table, dict)
                        else table - {member})
    assert any(differences(DATA["builds"][key]) for key in CASES.values()), f"{rule} {member!r} changes nothing"
