"""Model cards' own long-context recipes, read by posenc as the cards read them.

Each case is a shipped config from ``tests/corpus`` (verbatim), patched exactly as its model card says where the card
gives a recipe, with the window the card claims and the card's words. posenc must agree with the card through every
command that reads a window (:mod:`posenc_cli.rope.windows`): ``inspect`` reports the card's window, ``scale`` asked
for it
returns the file unchanged, asked for twice as much doubles the card's factor from the same original length, ``pick``
within it changes nothing in the file (a card-patched one: the unpatched file's yarn x4, which it already has),
``check --engines hf`` at it passes; for an unpatched file whose card gives the recipe, ``scale`` and ``pick`` write
the card's dict.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run, write_json

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

_QWEN25 = ("huggingface.co/Qwen/Qwen2.5-7B-Instruct: 'The current config.json is set for context length up to 32,768 "
           "tokens. To handle extensive inputs exceeding 32,768 tokens, we utilize YaRN ... you could add the "
           "following to config.json'")
_QWEN3 = ("huggingface.co/Qwen/Qwen3-8B: 'Qwen3 natively supports context lengths of up to 32,768 tokens' ... "
          "'The default max_position_embeddings in config.json is set to 40,960. This allocation includes reserving "
          "32,768 tokens for outputs and 8,192 tokens for typical prompts'")
_QWEN25_VL = ("huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct: 'The current config.json is set for context length up to "
              "32,768 tokens' and the same YaRN block with its mrope_section")


@dataclass(frozen=True)
class Card:
    """A model as its card describes it: ``patch`` is merged into the config (the card's recipe, empty when the card
    describes the file as shipped); ``window`` is what the card says it serves; ``recipe`` the rope dict the card
    tells users to add to the unpatched file (for ``scale``/``pick`` on it), with the window it gives."""

    name: str
    corpus: str
    words: str
    window: int
    patch: dict[str, Any] = field(default_factory=dict)
    method: str = "yarn"
    recipe: dict[str, Any] | None = None
    unpatched_window: int | None = None

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = json.loads((CORPUS / self.corpus).read_text(encoding="utf-8"))
        out = copy.deepcopy(cfg)
        out.update(copy.deepcopy(self.patch))
        return out


_QWEN_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}

CARDS = [
    Card("Qwen2.5-7B-Instruct + card YaRN", "qwen2.5-7b-instruct.json", _QWEN25, 131072,
         {"rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}},
         recipe=_QWEN_YARN, unpatched_window=32768),
    Card("Qwen3-8B + card YaRN", "qwen3-8b.json", _QWEN3, 131072, {"rope_scaling": dict(_QWEN_YARN)},
         recipe=_QWEN_YARN, unpatched_window=32768),
    Card("Qwen3-235B-A22B + card YaRN", "qwen3-235b-a22b.json", _QWEN3, 131072, {"rope_scaling": dict(_QWEN_YARN)},
         recipe=_QWEN_YARN, unpatched_window=32768),
    Card("Qwen2.5-VL-7B-Instruct + card YaRN", "qwen2.5-vl-7b-instruct.json", _QWEN25_VL, 131072,
         {"rope_scaling": {"type": "yarn", "mrope_section": [16, 24, 24], "factor": 4,
                           "original_max_position_embeddings": 32768}}),
    Card("Llama 3.1 8B Instruct as shipped", "llama-3.1-8b-instruct.json",
         "huggingface.co/meta-llama/Llama-3.1-8B-Instruct: context length 128k (llama3 x8 from 8,192)", 131072,
         method="llama3"),
    Card("Phi-3-mini-128k as shipped", "phi-3-mini-128k-instruct.json",
         "huggingface.co/microsoft/Phi-3-mini-128k-instruct: 'supports 128K context length (in tokens)'", 131072,
         method="longrope"),
    Card("gpt-oss-20b as shipped", "gpt-oss-20b.json",
         "huggingface.co/openai/gpt-oss-20b config: yarn x32 from 4,096 = 131,072", 131072),
    Card("DeepSeek-V3 as shipped", "deepseek-v3.json",
         "huggingface.co/deepseek-ai/DeepSeek-V3 config: yarn x40 from 4,096 = 163,840 (the card: 128K context)",
         163840),
    Card("Gemma 3 27B as shipped", "gemma-3-27b-it.json",
         "the Gemma 3 report: 128K context for 4B and larger, pretrained at 32K and scaled x8 on global layers",
         131072, method="linear"),
]
IDS = [c.name for c in CARDS]


def _json(*args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(run(*args, "--json")).stdout)
    return data


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_inspect_reports_the_cards_window(card: Card, tmp_path: Path) -> None:
    path = write_json(tmp_path, card.config())
    report = _json("inspect", path)
    extended = [g for g in report["layers"] if g["rope_type"] != "default"] or report["layers"]
    assert extended[0]["native_window"] == card.window, card.words


#: Gemma 3 (linear: its factor counts in max_position_embeddings already) and Phi-3 (longrope: posenc refuses to
#: invent factor lists past the searched window) are not extended by multiplying their factor
MULTIPLIED = [c for c in CARDS if c.method in ("yarn", "llama3")]


@pytest.mark.parametrize("card", MULTIPLIED, ids=[c.name for c in MULTIPLIED])
def test_scale_to_the_cards_window_changes_nothing_and_twice_doubles_the_factor(card: Card, tmp_path: Path) -> None:
    cfg = card.config()
    path = write_json(tmp_path, cfg)
    same = ok(run("scale", card.method, "--config", path, "--target", str(card.window)))
    assert "already serves" in same.stderr
    doubled = json.loads(ok(run("scale", card.method, "--config", path, "--target", str(2 * card.window))).stdout)
    rope = doubled.get("rope_scaling") or doubled.get("rope_parameters") or doubled["text_config"]["rope_scaling"]
    own = next(v for k, v in _rope_dicts(cfg))
    assert float(rope["factor"]) == pytest.approx(2 * float(own["factor"]), rel=1e-12)
    assert rope["original_max_position_embeddings"] == own["original_max_position_embeddings"]


def _rope_dicts(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for where in (cfg, cfg.get("text_config") or {}):
        for key in ("rope_scaling", "rope_parameters"):
            value = where.get(key)
            if isinstance(value, dict) and "factor" in value:
                out.append((key, value))
    return out


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_pick_within_the_cards_window_changes_nothing_in_the_file(card: Card, tmp_path: Path) -> None:
    """A shipped window is kept as it is. A card-patched one is trained at 32k and reaches the card's window
    training-free (docs/conventions.md): pick answers as for the unpatched file, a yarn x4 from 32k with no warning,
    and that config is the file's own rope."""
    path = write_json(tmp_path, card.config())
    answer = _json("pick", "--ctx", str(card.window), "--config", path)
    if not card.patch:
        assert answer["extension"] is None and answer["encoding"] == "keep the model's rope", answer["extension"]
        return
    ext = answer["extension"]
    assert (answer["inputs"]["trained_ctx"], answer["inputs"]["served_ctx"]) == (32768, card.window)
    assert (ext["method"], ext["factor"], ext["from"], ext["to"], ext["warnings"]) == ("yarn", 4.0, 32768,
                                                                                         card.window, [])
    written = json.loads(ok(run("scale", "yarn", "--config", path, "--target", str(card.window), "-o", "-")).stdout)
    assert written.pop("posenc") == {"trained_ctx": 32768, "window": card.window, "training_free": True,
                                     "rope_theta": written.get("rope_theta", written.get("text_config", {}).get(
                                         "rope_theta"))}
    assert written == card.config()  # the file as it is, with posenc's record of it


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_check_at_the_cards_window_runs_transformers_numbers(card: Card, tmp_path: Path) -> None:
    report = _json("check", write_json(tmp_path, card.config()), "--engines", "hf")
    assert report["max_model_len"] == card.window


RECIPES = [c for c in CARDS if c.recipe is not None]


@pytest.mark.parametrize("card", RECIPES, ids=[c.name for c in RECIPES])
def test_the_cards_recipe_is_what_scale_and_pick_write_for_the_unpatched_file(card: Card) -> None:
    assert card.recipe is not None and card.unpatched_window is not None
    path = str(CORPUS / card.corpus)
    assert _json("inspect", path)["layers"][0]["native_window"] == card.unpatched_window
    written = json.loads(ok(run("scale", "yarn", "--config", path, "--target", str(card.window))).stdout)
    rope = written.get("rope_scaling") or written["rope_parameters"]
    assert {k: rope[k] for k in card.recipe} == card.recipe
    assert written["max_position_embeddings"] == card.window
    answer = _json("pick", "--ctx", str(card.window), "--config", path)
    config = answer["extension"]["config"]
    picked = config.get("rope_scaling") or config["rope_parameters"]
    assert {k: picked[k] for k in card.recipe} == card.recipe


def test_a_second_extension_multiplies_from_the_cards_window_not_from_max_position_embeddings(tmp_path: Path) -> None:
    """What the issue found: on a card-patched Qwen file, 128k was read as x4 on top of x4 (x16)."""
    card = CARDS[0]
    path = write_json(tmp_path, card.config())
    for target, factor in ((131072, 4.0), (262144, 8.0), (524288, 16.0)):
        out = json.loads(ok(run("scale", "yarn", "--config", path, "--target", str(target))).stdout)
        assert out["rope_scaling"]["factor"] == factor
        assert out["rope_scaling"]["original_max_position_embeddings"] == 32768


def test_the_readme_card_file_is_the_corpus_config_with_the_cards_block() -> None:
    """README recipe 1 shows docs/examples/qwen2.5-7b-instruct-card-yarn.json as the card-patched file."""
    path = Path(__file__).resolve().parents[2] / "docs" / "examples" / "qwen2.5-7b-instruct-card-yarn.json"
    assert json.loads(path.read_text(encoding="utf-8")) == CARDS[0].config()
