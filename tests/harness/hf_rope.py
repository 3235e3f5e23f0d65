"""transformers' own RoPE, run: a config built with its messages collected, and the frequencies its rotary module or
rope function computes (the oracle of the parity tests)."""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.utils import logging as hf_logging


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def hf_messages() -> Iterator[tuple[list[logging.LogRecord], list[warnings.WarningMessage]]]:
    """Collect transformers' log records at WARNING and above, and every Python warning, inside the block.

    ``warning_once`` caches by message; the cache is cleared so a message already logged by an earlier test still
    shows up here.
    """
    root = hf_logging.get_logger("transformers")
    handler = _Collect()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    hf_logging.warning_once.cache_clear()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.records, caught
    finally:
        root.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)


def load_clean(config_dict: dict[str, Any]) -> Any:
    """A transformers config from a config.json dict; fails on any warning or logged message >= WARNING."""
    with hf_messages() as (records, caught):
        config = AutoConfig.for_model(**copy.deepcopy(config_dict))
    assert [r.getMessage() for r in records] == []
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    return config


def quiet_config(cls: type, **kwargs: Any) -> Any:
    """A config built directly (grid tests: validation messages are not what they check)."""
    with hf_messages():
        return cls(**copy.deepcopy(kwargs))


def rotary_class(config: Any) -> type:
    """The model's ``XRotaryEmbedding`` class (it holds ``compute_default_rope_parameters``)."""
    module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    found = [getattr(module, name) for name in dir(module)
             if name.endswith("RotaryEmbedding") and hasattr(getattr(module, name), "compute_default_rope_parameters")]
    assert len(found) == 1, found
    return found[0]


def hf_frequencies(config: Any, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """What the model computes: the rotary embedding module at init, or the rope function at ``seq_len``."""
    rope_type = config.rope_parameters["rope_type"]
    cls = rotary_class(config)
    if seq_len is None:
        module = cls(config)
        return module.inv_freq.numpy(), float(module.attention_scaling)
    fn = cls.compute_default_rope_parameters if rope_type == "default" else ROPE_INIT_FUNCTIONS[rope_type]
    inv, attention = fn(config, seq_len=seq_len)
    return inv.numpy(), float(attention)


def quiet_frequencies(config: Any, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    with hf_messages():
        return hf_frequencies(config, seq_len)
