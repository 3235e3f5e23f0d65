"""posenc_cli.models.record: the rope record, one immutable RopeGroup per layer group, equal to what the reader's
pieces give (spec_for, window_of, compute) on every corpus config and every rope type."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.facts import window_of
from posenc_cli.models.model_positions import ModelPositions, describe
from posenc_cli.models.record import RopeGroup, rope_groups, spec_for
from posenc_cli.rope.frequencies import compute

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CONFIGS = sorted(p.name for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")


def _model(name: str) -> ModelPositions:
    return describe(json.loads((CORPUS / name).read_text(encoding="utf-8")))


def _assert_record(model: ModelPositions) -> None:
    """The record of ``model`` equals what spec_for, window_of and compute give, one group per layer group."""
    try:
        groups = rope_groups(model)
    except PosencError:  # a group without a head dim or window: spec_for refuses it the same way
        with pytest.raises(PosencError):
            [spec_for(model, layer) for layer in model.layers]
        return
    assert [g.name for g in groups] == [layer.name for layer in model.layers]
    for g, layer in zip(groups, model.layers, strict=True):
        spec = spec_for(model, layer)
        assert g.spec == spec and g.params == dict(layer.params)
        assert g.layers == (tuple(layer.layers) if layer.layers is not None else None)
        assert g.window == window_of(model, layer)
        assert g.softmax_scale == model.softmax_scale and g.top_level == model.top_level
        native = g.window.native if g.window else spec.max_position_embeddings
        assert g.attention_factor == compute(spec, native or None, top_level=model.top_level).attention_factor
    rotating = [i for g in groups for i in (g.layers or ())]
    assert len(rotating) == len(set(rotating)), "a layer in two rope groups"
    unrotated = {i for n in model.no_rope for i in (n.layers or ())}
    assert not unrotated & set(rotating)
    if groups and model.num_layers and all(g.layers is not None for g in groups):
        assert set(rotating) | unrotated == set(range(model.num_layers))


@given(st.sampled_from(CONFIGS))
@settings(max_examples=60, deadline=None)
def test_the_record_of_every_corpus_config_is_what_the_reader_gives(name: str) -> None:
    _assert_record(_model(name))


def _rope_dicts() -> Iterator[st.SearchStrategy[dict[str, Any]]]:
    factor = st.floats(1.0, 32.0)
    yield st.just({"rope_type": "default"})
    yield st.builds(lambda f: {"rope_type": "linear", "factor": f}, factor)
    yield st.builds(lambda f: {"rope_type": "dynamic", "factor": f}, factor)
    yield st.builds(lambda f, t: {"rope_type": "yarn", "factor": f, "original_max_position_embeddings": 2048,
                                  "truncate": t}, factor, st.booleans())
    yield st.builds(lambda f: {"rope_type": "llama3", "factor": f, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 2048}, factor)
    yield st.builds(lambda s, lo: {"rope_type": "longrope", "original_max_position_embeddings": 2048,
                                   "short_factor": [s] * 32, "long_factor": [lo] * 32}, factor, factor)


@given(st.one_of(*_rope_dicts()), st.sampled_from([10000.0, 500000.0]), st.sampled_from([1.0, 0.5]),
       st.sampled_from([4096, 16384]))
@settings(max_examples=80, deadline=None)
def test_the_record_of_every_rope_type_is_what_the_reader_gives(rope: dict[str, Any], theta: float,
                                                                partial: float, window: int) -> None:
    pairs = int(64 * partial) // 2  # head_dim 64: longrope lists one factor per rotated pair
    rope = {k: v[:1] * pairs if k.endswith("_factor") and isinstance(v, list) else v for k, v in rope.items()}
    cfg = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
           "max_position_embeddings": window, "rope_parameters": {**rope, "rope_theta": theta,
                                                                  "partial_rotary_factor": partial}}
    model = describe(cfg)
    _assert_record(model)
    (g,) = rope_groups(model)
    assert g.spec.rope_type == rope["rope_type"] and g.spec.theta == theta and g.layout == "rotate-half"


class _Frozen(Mapping[str, Any]):
    """A hashable rope dict: a record over hashable fields hashes."""

    def __init__(self, d: dict[str, Any]) -> None:
        self._items = tuple(sorted(d.items()))

    def __getitem__(self, key: str) -> Any:
        return dict(self._items)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)


def test_the_record_is_immutable_and_hashable_where_its_fields_are() -> None:
    g = rope_groups(_model(CONFIGS[0]))[0]
    assert g == rope_groups(_model(CONFIGS[0]))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.layout = "interleaved"  # type: ignore[misc]
    frozen = dataclasses.replace(g, spec=dataclasses.replace(g.spec, params=_Frozen(dict(g.spec.params))),
                                 top_level=None)
    assert hash(frozen) == hash(dataclasses.replace(frozen)) and isinstance(frozen, RopeGroup)
    assert frozen.attention_factor == g.attention_factor  # computed once, not a field: equality and hash unchanged
    assert frozen == dataclasses.replace(frozen)


@pytest.mark.parametrize("name", CONFIGS)
def test_layout_is_interleaved_exactly_for_remote_code_read_with_gpt_j_pairs(name: str) -> None:
    model = _model(name)
    if model.family != "rope" or not model.layers:
        return
    want = "interleaved" if model.engine is not None and not model.engine.is_neox_style else "rotate-half"
    try:
        assert {g.layout for g in rope_groups(model)} == {want}
    except PosencError:
        pass


def test_chatglm2_rotates_interleaved_pairs() -> None:
    (g,) = rope_groups(_model("chatglm2-6b.json"))
    assert g.layout == "interleaved" and g.spec.rotary_dim == 64
