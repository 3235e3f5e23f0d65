"""What a scaling request takes from a model: :class:`ModelFacts` of the rope group an extension changes, and the
window each rope group serves (:func:`window_of`, with its original and native lengths). Stdlib only."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models import remote_code
from posenc_cli.models.config_keys import text_config
from posenc_cli.models.model_positions import LayerRope, ModelPositions
from posenc_cli.rope.rope_types import METHODS, MULTIMODAL_KEYS, RECORDS, every_key
from posenc_cli.rope.windows import Window, window
from posenc_cli.units import format_length

#: The key posenc writes into a config.json it patched (``scale -o``/``--in-place``): what the file alone cannot
#: say (docs/conventions.md, "The window a config serves"). transformers keeps it as an unused attribute of the
#: config and writes it back on ``save_pretrained``; engines ignore it. A GGUF posenc writes carries the same facts
#: as ``posenc.*`` metadata keys.
MARKER = "posenc"


def marker(trained: int, window: int, training_free: bool, theta: float) -> dict[str, Any]:
    """The ``posenc`` record of a file posenc wrote: the length the model was trained at, the window the file
    serves as written, whether the reach from one to the other is training-free, and the rope base the scaling
    starts from (``scale ntk`` writes a raised ``rope_theta``: the next request starts from the trained one)."""
    return {"trained_ctx": int(trained), "window": int(window), "training_free": bool(training_free),
            "rope_theta": float(theta)}


def read_marker(cfg: Mapping[str, Any] | None) -> tuple[int, int, bool, float | None] | None:
    """(trained length, window, training-free, trained base or None) of a ``posenc`` record, or None without a
    well-formed one."""
    record = cfg.get(MARKER) if isinstance(cfg, Mapping) else None
    if not isinstance(record, Mapping):
        return None
    trained, served, free = record.get("trained_ctx"), record.get("window"), record.get("training_free")
    theta = record.get("rope_theta")
    if not (isinstance(trained, int) and isinstance(served, int) and isinstance(free, bool)) or isinstance(
            trained, bool) or isinstance(served, bool) or min(trained, served) < 1:
        return None
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not math.isfinite(theta) or theta <= 1:
        return trained, served, free, None
    return trained, served, free, float(theta)


def window_of(model: ModelPositions, layer: LayerRope) -> Window | None:
    """The window ``layer`` serves in ``model`` (:func:`posenc_cli.rope.windows.window`); None without a
    ``max_position_embeddings``."""
    if model.max_position_embeddings is None:
        return None
    return window(layer.params, model.max_position_embeddings, model.text_model_type or model.model_type)




@dataclass(frozen=True)
class ModelFacts:
    """What a scaling request takes from a model: the rope group an extension changes (its theta, head dim, rotary
    fraction, own rope dict), the window the model serves and the length its scaling refers to, and how its file
    writes rope settings (so a patched file keeps its format and nesting)."""

    theta: float
    head_dim: int | None
    partial_rotary_factor: float | None
    scale_from: int | None  # the length a different method scales from: the original length, or the window
    params: dict[str, Any]
    notes: tuple[str, ...] = ()
    # where the text model's config sits as the reader found it (ModelPositions.text_source: "" at the top level,
    # "text_config" (multimodal), a deeper path, or a remote-code family's, ending in config_keys.ABSENT when the file
    # leaves that sub-config out)
    text_source: str = ""
    rope_parameters: bool = False  # the file writes transformers 5's rope_parameters (and no rope_scaling)
    groups: tuple[str, ...] = ()  # every rope group of the model, when there are several
    group: str = ""  # the rope group an extension changes (the scaled one, else full attention), when several
    native: int | None = None  # the window the model serves as shipped (dynamic: what its factor was set for)
    label: str = ""
    model_type: str = ""  # the text model's type (the config class that reads the rope settings)
    default_partial: bool = True  # the class applies partial_rotary_factor to plain RoPE (ModelPositions')
    original: int | None = None  # the length its scaling refers to (posenc_cli.rope.windows.Window.original)
    window_note: str | None = None  # why the window is not max_position_embeddings, or not the trained length
    trained: int | None = None  # the length it was trained at (its window, unless the reach past it is training-free)

    @property
    def training_free(self) -> bool:
        """The window the model serves reaches past its trained length without training."""
        return self.trained is not None and self.native is not None and self.trained < self.native

    @property
    def serving(self) -> str:
        """How the model serves its window, for a command's text: ``serves 128k with yarn x4 (training-free)``;
        empty when it serves the length it was trained at."""
        if not self.training_free or self.native is None:
            return ""
        rope_type = str(self.params.get("rope_type", "default"))
        factor = self.params.get("factor")
        if rope_type == "default":
            how = f"rope_theta {self.theta:g}"
        elif isinstance(factor, (int, float)) and not isinstance(factor, bool):
            how = f"{rope_type} x{float(factor):g}"
        else:
            how = rope_type
        return f"serves {format_length(self.native)} with {how} (training-free)"

    @property
    def text_config(self) -> bool:
        """The rope settings live in ``text_config`` (multimodal)."""
        return self.text_source == "text_config"

    def inherited(self, method: str) -> dict[str, Any]:
        """Parameters of the model's rope dict that ``method`` reads, when the model already uses that method (the
        record's ``inherits``: gpt-oss keeps beta 32/1 and truncate false, DeepSeek its mscale pair, llama3 its band
        factors)."""
        if method not in METHODS or self.params.get("rope_type") != METHODS[method]:
            return {}
        # a zero mscale means "not set" to transformers (it tests truthiness), not a value to pass on
        return {k: self.params[k] for k in RECORDS[METHODS[method]].inherits
                if k in self.params and not (k.startswith("mscale") and not self.params[k])}

    @property
    def extra(self) -> dict[str, Any]:
        # keys that belong to some rope type (or that a request always decides) are never carried over; the
        # multimodal ones (mrope_section) are read beside any type, so they are
        typed = every_key() - set(MULTIMODAL_KEYS)
        return {k: v for k, v in self.params.items() if k not in typed}

    @property
    def scaled(self) -> bool:
        return bool(self.params.get("rope_type", "default") != "default")


def extended_group(model: ModelPositions) -> LayerRope:
    """The rope group a context extension changes: the one already scaled, else full attention, else the first
    (Gemma 3 and OLMo 3 extend their full-attention layers and keep the sliding ones)."""
    return next((g for g in model.layers if g.params.get("rope_type", "default") != "default"),
                next((g for g in model.layers if g.name == "full_attention"), model.layers[0]))


def model_facts(model: ModelPositions, label: str, group: str | None = None,
                cfg: Mapping[str, Any] | None = None) -> ModelFacts:
    """The facts of a model a scaling request needs: the group named ``group``, else :func:`extended_group`.

    ``cfg`` (the config as written) tells whether the file uses transformers 5's ``rope_parameters``.
    """
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{label} does not describe a RoPE model ({model.family}); there is nothing to scale")
    names = tuple(layer.name for layer in model.layers) if len(model.layers) > 1 else ()
    chosen = [layer for layer in model.layers if layer.name == group]
    if group is not None and not chosen:
        raise PosencError(f"{label} has no rope group {group!r}; it has: {', '.join(g.name for g in model.layers)}")
    layer = chosen[0] if chosen else extended_group(model)
    params = dict(layer.params)
    prf = params.get("partial_rotary_factor")
    served = window_of(model, layer)
    v5 = False
    if cfg is not None:
        text = text_config(cfg)[0]
        v5 = isinstance(text.get("rope_parameters"), Mapping) and not text.get("rope_scaling")
    notes: tuple[str, ...] = ()
    if model.engine is not None:  # remote code / engine-only mechanism: no transformers parity to claim
        refusal, note = remote_code.scaling_advice(model.engine)
        if refusal:
            raise PosencError(f"{label}: {refusal}")
        notes += (f"note: {note}",) if note else ()
    if names:
        notes += (f"note: {label} has per-layer rope ({', '.join(names)}); extending {layer.name}, the others keep "
                  "their settings",)
    trained, window_note, theta = _trained(served, cfg, params, label, model.max_position_embeddings)
    return ModelFacts(theta or float(params["rope_theta"]), layer.head_dim or model.head_dim,
                      float(prf) if prf is not None else None,
                      (served.original or trained or served.native) if served else None, params, notes,
                      model.text_source, v5, names, layer.name if names else "",
                      served.native if served else None, label,
                      model.text_model_type or model.model_type or "", model.default_partial,
                      served.original if served else None, window_note, trained)


def _trained(served: Window | None, cfg: Mapping[str, Any] | None, params: Mapping[str, Any], label: str,
             max_position_embeddings: int | None) -> tuple[int | None, str | None, float | None]:
    """(the length the model was trained at, the note saying why it is not the window, the base a request starts
    from when not the file's): posenc's own record of a file it wrote, while it still describes the file; else what
    the window's reading says (docs/conventions.md, "The window a config serves")."""
    if served is None or max_position_embeddings is None:
        return None, None, None
    notes = [served.note(label, max_position_embeddings) or ""]
    record = read_marker(cfg)
    if record is not None:
        trained, written_for, free, theta = record
        if written_for == served.native and trained <= served.native:
            if free and trained < served.native:
                notes = [f"note: {label} was trained at {format_length(trained)} and reaches "
                         f"{format_length(served.native)} training-free (posenc wrote its scaling and recorded it "
                         f"under {MARKER!r}): jumps are measured from {format_length(trained)}"]
                if theta is not None and theta != params.get("rope_theta"):
                    notes.append(f"note: {label}'s rope_theta {params.get('rope_theta'):g} is posenc's training-free "
                                 f"ntk; requests start from the trained {theta:g}")
                return trained, "\n".join(line for line in notes if line), theta
            return served.native, "\n".join(line for line in notes if line) or None, None
        notes.insert(0, f"note: {label}'s {MARKER!r} record says posenc wrote it to serve "
                        f"{format_length(written_for)}; it now serves {format_length(served.native)}, so the record "
                        "is ignored")
    trained = served.trained_length
    if served.training_free:
        if served.assumed:
            why = f"{served.assumed}; pass --fine-tuned if it was trained at {format_length(served.native)}"
        elif params.get("rope_type") == "dynamic":
            why = "dynamic NTK grows its base past it per forward"
        else:
            why = (f"max_position_embeddings {max_position_embeddings:,} is left as shipped, as the model cards' "
                   "recipe does")
        notes.append(f"note: {label} was trained at {format_length(trained)} and reaches "
                     f"{format_length(served.native)} training-free ({why}): jumps are measured from "
                     f"{format_length(trained)}")
    return trained, "\n".join(line for line in notes if line) or None, None
