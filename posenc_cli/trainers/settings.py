"""What a training run trained with, as ``posenc audit`` reads it back from the run's settings file: the rope and
window (:class:`TrainedWith`), and how each framework's file is read (:class:`Reader`, which each framework module
that ``posenc audit`` reads exports on its registry record), with the checks every reader shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from posenc_cli.errors import PosencError

#: Rope-ish words: a key or flag holding one of these that the framework does not have is an error (a typo, or a
#: setting the framework would itself reject or ignore).
ROPE_WORDS = ("rope", "rotary", "yarn", "mscale", "theta")


@dataclass
class TrainedWith:
    """What the trainer computed: ``rope`` (a transformers 5 rope dict, ``rope_theta`` inside; None: the training
    left the model's rope as it was) and ``window`` (None: not checked)."""

    framework: str
    label: str
    rope: dict[str, Any] | None
    window: int | None
    notes: list[str] = field(default_factory=list)
    source_window: int | None = None  # the length before training (a plan's "from"), when the settings say it
    source_theta: float | None = None


#: ``(parsed settings, path, the checkpoint's config or None, the base model's config or None) -> TrainedWith``
ReadSettings = Callable[[Any, str, "Mapping[str, Any] | None", "Mapping[str, Any] | None"], TrainedWith]


@dataclass(frozen=True)
class Reader:
    """How ``posenc audit`` reads one framework's settings: its ``--framework`` name, the kind of file (``yaml``,
    ``toml``, ``json``, or ``args``: a command line), and for a YAML the keys that tell its files apart.

    ``base_key``: the settings key naming the base model, whose own length and theta the framework scales from
    (``--base`` gives it otherwise); ``setattr_dict``: the framework sets the rope dict on the built config, so a
    flat dict on a model with several rope groups fails (it is not the extended group's)."""

    framework: str
    title: str
    file_format: str
    read: ReadSettings
    keys: frozenset[str] = frozenset()
    base_key: str | None = None
    setattr_dict: bool = False


def reject_rope_keys(data: Mapping[str, Any], known: set[str], path: str, what: str) -> None:
    """Refuse a rope-ish key the framework does not take (:data:`ROPE_WORDS`)."""
    for key in data:
        if key not in known and any(w in str(key).lower() for w in ROPE_WORDS):
            raise PosencError(f"{path}: unknown key {key!r}: {what}")


def positive_int(value: Any, name: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PosencError(f"{path}: {name} must be a positive whole number, got {value!r}")
    return value
