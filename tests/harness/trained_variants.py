"""Three files of one trained model that serve a longer window training-free, for the property that the jump a
warning measures runs from the trained length (tests/scale/test_scaled.py, tests/pick/test_picker.py):

* the corpus file as shipped (unscaled: it serves the length it was trained at);
* the card-patched file: a yarn block added, ``max_position_embeddings`` left as shipped (the Qwen cards' recipe);
* a file ``posenc scale METHOD --target W -o`` wrote on the way (with its ``posenc`` record).

Each is a config.json written to a temporary folder; the corpus models are the unscaled ones whose class takes a
yarn block (tests/corpus/, SOURCES.json).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from posenc_cli.models.convert import with_rope
from posenc_cli.models.facts import ModelFacts, model_facts
from posenc_cli.models.model_types import accepted_rope_types
from posenc_cli.models.sources import describe_source, read_source
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.scale.scaled import ScaleAsk, scale

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _facts(path: Path) -> ModelFacts | None:
    try:
        src = read_source(str(path))
        return model_facts(describe_source(src), src.label, cfg=src.config)
    except Exception:  # noqa: BLE001 - a model posenc does not extend is not one of the property's models
        return None


@cache
def unscaled_models() -> tuple[str, ...]:
    """The corpus files of unscaled RoPE models with a window, whose config class takes yarn."""
    names = []
    for path in sorted(CORPUS.glob("*.json")):
        if path.name == "SOURCES.json":
            continue
        facts = _facts(path)
        if facts is None or facts.native is None or facts.scaled or facts.groups or facts.text_source not in (
                "", "text_config"):
            continue
        cfg = json.loads(path.read_text())
        if "max_position_embeddings" not in (cfg.get("text_config") or {} if facts.text_config else cfg):
            continue
        accepts = accepted_rope_types(facts.model_type)
        if accepts is not None and "yarn" not in accepts:
            continue
        names.append(path.name)
    return tuple(names)


def trained_length(name: str) -> int:
    facts = _facts(CORPUS / name)
    assert facts is not None and facts.native is not None
    return facts.native


def card_patched(name: str, factor: float, folder: Path) -> Path:
    """``name`` with the card's yarn block (``factor`` from its trained length) and its window left as shipped."""
    cfg: dict[str, Any] = json.loads((CORPUS / name).read_text())
    facts = _facts(CORPUS / name)
    assert facts is not None and facts.native is not None
    text = cfg.get("text_config") if facts.text_config else cfg
    assert isinstance(text, dict)
    own_max = int(text["max_position_embeddings"])
    rope = {**facts.extra, "rope_type": "yarn", "factor": float(factor),
            "original_max_position_embeddings": facts.native, "rope_theta": facts.theta}
    if facts.partial_rotary_factor is not None:
        rope["partial_rotary_factor"] = facts.partial_rotary_factor
    form = "v5" if facts.rope_parameters else "v4"
    patched = with_rope(cfg, "", rope, own_max, form, head_dim=facts.head_dim)
    out = folder / f"card-{factor:g}-{name}"
    out.write_text(json.dumps(patched, indent=2))
    return out


def written_on_the_way(name: str, method: str, window: int, folder: Path) -> Path:
    """``name`` as ``posenc scale METHOD --target WINDOW -o`` writes it."""
    out = folder / f"posenc-{method}-{window}-{name}"
    scaled = scale(method, ScaleOptions(target=str(window)), ScaleAsk(config=str(CORPUS / name), output=str(out)))
    out.write_text(scaled.text)
    return out
