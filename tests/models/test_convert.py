"""``posenc convert``: v4 <-> v5 rope keys on every corpus config, the numbers unchanged, other keys in place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import text_config
from posenc_cli.models.convert import convert, convert_source
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for
from posenc_cli.models.remote_code import v5_refusal
from posenc_cli.rope.frequencies import compute

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
FILES = sorted(p for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")
ROPE_KEYS = {"rope_scaling", "rope_theta", "partial_rotary_factor", "rope_local_base_freq", "rope_parameters"}


def numbers(cfg: dict[str, Any]) -> list[tuple[str, list[int] | None, list[float], float]]:
    model = describe(cfg)
    return [(layer.name, layer.layers, compute(spec_for(model, layer), None, top_level=model.top_level)
             .inv_freq.tolist(), compute(spec_for(model, layer), None, top_level=model.top_level).attention_factor)
            for layer in model.layers]


def convertible(path: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    text, _, _ = text_config(cfg)
    if not ROPE_KEYS & set(text) or describe(cfg).family != "rope":
        pytest.skip(f"{path.name} has no rope keys to convert")
    return cfg


def non_rope_keys(cfg: dict[str, Any]) -> list[str]:
    text, _, where = text_config(cfg)
    return [k for k in text if k not in ROPE_KEYS]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_round_trips_keep_the_numbers_and_the_other_keys(path: Path) -> None:
    cfg = convertible(path)
    before = numbers(cfg)
    refusal = v5_refusal(cfg)
    if refusal:  # remote code written for transformers 4 reads rope_scaling: no v5 form is written for it
        with pytest.raises(PosencError, match="remote code"):
            convert(cfg, "v5")
        return
    v5 = convert(cfg, "v5")
    text5, _, _ = text_config(v5)
    assert "rope_parameters" in text5 and not {"rope_scaling", "rope_theta", "rope_local_base_freq"} & set(text5)
    params = text5["rope_parameters"]
    dicts = params.values() if all(isinstance(v, dict) for v in params.values()) else [params]
    assert all("rope_theta" in d for d in dicts), "v5 never drops rope_theta"
    assert numbers(v5) == before
    assert non_rope_keys(v5) == non_rope_keys(cfg)
    assert [k for k in v5 if k != "text_config"] == [k for k in cfg if k != "text_config"] or "text_config" not in cfg
    try:
        v4 = convert(v5, "v4")
    except PosencError as exc:
        assert "transformers 4" in str(exc) or "only in transformers 5" in str(exc)
        return
    text4, _, _ = text_config(v4)
    assert "rope_parameters" not in text4 and "rope_theta" in text4
    assert numbers(v4) == before
    assert non_rope_keys(v4) == non_rope_keys(cfg)
    assert convert(v4, "v5") == v5


def test_rope_keys_take_the_place_of_the_first_key_they_replace() -> None:
    cfg = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 2, "rope_theta": 5e5,
           "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "vocab_size": 10}
    v5 = convert(cfg, "v5")
    assert list(v5) == ["model_type", "hidden_size", "num_attention_heads", "rope_parameters", "vocab_size"]
    assert v5["rope_parameters"] == {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}
    v4 = convert(v5, "v4")
    assert list(v4) == ["model_type", "hidden_size", "num_attention_heads", "rope_scaling", "rope_theta",
                        "vocab_size"]
    assert v4["rope_scaling"] == {"rope_type": "linear", "factor": 2.0} and v4["rope_theta"] == 5e5


def test_plain_rope_becomes_null_scaling_in_v4() -> None:
    v4 = convert({"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 2,
                  "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "v4")
    assert v4["rope_scaling"] is None and v4["rope_theta"] == 1e6


def test_cli_writes_atomically_and_in_place(tmp_path: Path) -> None:
    cfg = json.loads((CORPUS / "gemma-3-4b-it.json").read_text())
    path = Path(write_json(tmp_path, cfg))
    out = tmp_path / "v5.json"
    result = ok(run("convert", str(path), "--to", "v5", "-o", str(out)))
    assert result.stdout == "" and f"wrote {out}" in result.stderr
    v5 = json.loads(out.read_text())
    # the converted keys, and posenc's record of the file (Gemma 3's linear x8 is trained at its 128k)
    assert v5 == convert(cfg, "v5") | {"posenc": {"trained_ctx": 131072, "window": 131072, "training_free": False,
                                                  "rope_theta": 1e6}}
    assert json.loads(path.read_text()) == cfg  # the input is untouched
    ok(run("convert", str(out), "--to", "v4", "--in-place"))
    assert numbers(json.loads(out.read_text())) == numbers(cfg)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")], "no temp file left behind"


def test_cli_prints_to_stdout_by_default(tmp_path: Path) -> None:
    path = write_json(tmp_path, json.loads((CORPUS / "llama-3.1-8b-instruct.json").read_text()))
    result = ok(run("convert", path, "--to", "v5"))
    assert json.loads(result.stdout)["rope_parameters"]["rope_type"] == "llama3"
    assert result.stderr == ""


BAD = [
    (["--to", "v6"], "v6"),
    (["--to", "v5", "-o", "x.json", "--in-place"], "--in-place"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options(tmp_path: Path, args: list[str], needle: str) -> None:
    path = write_json(tmp_path, {"model_type": "llama", "rope_theta": 1e4, "hidden_size": 64,
                                 "num_attention_heads": 1})
    before = Path(path).read_bytes()
    assert_usage_error(run("convert", path, *args), needle)
    assert Path(path).read_bytes() == before


def test_nothing_to_convert_and_v5_only_models(tmp_path: Path) -> None:
    assert_usage_error(run("convert", write_json(tmp_path, {"model_type": "gpt2", "n_positions": 1024}),
                           "--to", "v5"), "nothing to convert")
    gemma4 = str(CORPUS / "gemma-4-26b-a4b.json")
    assert_usage_error(run("convert", gemma4, "--to", "v4"), "gemma4_text")


def test_per_layer_dicts_without_a_v4_form_are_refused() -> None:
    cfg = {"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 2,
           "layer_types": ["full_attention", "sliding_attention"],
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    with pytest.raises(PosencError, match="transformers 4 has no form"):
        convert(cfg, "v4")


def test_convert_source_reads_rewrites_and_names_where_it_goes(tmp_path: Path) -> None:
    """posenc convert's core: the source read, its keys rewritten and read back; the CLI only writes or prints."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                               "max_position_embeddings": 4096, "rope_theta": 1e4,
                               "rope_scaling": {"rope_type": "linear", "factor": 2.0}}))
    printed = convert_source(str(cfg), "v5")
    assert printed.destination is None
    assert json.loads(printed.text)["rope_parameters"] == {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    assert convert_source(str(cfg), "v5", in_place=True).destination == str(cfg)
    assert json.loads(cfg.read_text())["rope_scaling"]["factor"] == 2.0  # the core writes nothing
    with pytest.raises(PosencError, match="output FILE or in_place, not both"):
        convert_source(str(cfg), "v5", output="x.json", in_place=True)
