"""One record per rope type: its keys, what it inherits, whether it reads the original length, its defaults (stdlib).

Every list of rope-type keys in posenc derives from :data:`RECORDS`: the request's rope dict
(:func:`posenc_cli.rope.scaling.rope_parameters`), the value checks of a config's dict, ``inspect --lint``'s known
keys, the keys a model keeps under its own scaling, ``scale``'s tunable parameters. The numpy table of rope functions
(:data:`posenc_cli.rope.frequencies.ROPE_FUNCTIONS`) computes the types named here.

``required`` and the validated part of ``keys`` are transformers 5's per-type validation
(``RotaryEmbeddingConfigMixin._validate_<type>_rope_parameters``: its ``required_keys`` and ``optional_keys`` without
``rope_type`` and ``partial_rotary_factor``, which every type takes); ``tests/rope/test_rope_types.py`` sweeps every
type transformers validates and holds the records to it. Keys read beyond that validation (by transformers' own
functions, or the engines that mirror them) are ``also_read``.

A default says how transformers reads the key (:func:`param`): ``FALSY`` reads ``params.get(key) or value`` (an
explicit null, 0 or false is the default: ``"beta_fast": null`` is 32), ``ABSENT`` reads ``params.get(key, value)``
(only a missing key is the default: ``"truncate": null`` is falsy, no truncation), ``REQUEST`` is no transformers
default at all (the key is required) but the value posenc writes when a request leaves it out (Llama 3.1's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

FALSY = "falsy"
ABSENT = "absent"
REQUEST = "request"

#: transformers' RotaryEmbeddingConfigMixin.default_theta: the base a config without rope_theta gets
DEFAULT_THETA = 10000.0
#: The trained length scaling types read; transformers' standardization fills it from max_position_embeddings.
ORIGINAL = "original_max_position_embeddings"
#: Keys every rope type reads (``type``: the legacy spelling of ``rope_type``).
COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
#: Keys the multimodal classes (Qwen2-VL onwards) read beside any rope type.
MULTIMODAL_KEYS = ("mrope_section", "mrope_interleaved")
#: Legacy type names a config class rewrites before reading: their keys are those of the type they become.
ALIASES = {"su": "longrope", "mrope": "default"}
#: Keys that hold one number per rotated pair.
PER_PAIR = ("short_factor", "long_factor")
#: Keys whose value is not a number (every other rope key is one).
NOT_NUMBERS = frozenset({"rope_type", "type", "truncate", *PER_PAIR, *MULTIMODAL_KEYS})
#: Keys the rope functions divide by or take the logarithm of: they must be greater than 0.
DIVISORS = ("rope_theta", ORIGINAL, "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")
#: Magnitudes (cos/sin and softmax multipliers): at least 0.
MAGNITUDES = ("attention_factor", "mscale", "mscale_all_dim", "short_mscale", "long_mscale")


# NamedTuples, not frozen dataclasses: cheaper to define, and every command's start-up imports this module
class Default(NamedTuple):
    """A key's default and how transformers reads it (:data:`FALSY`, :data:`ABSENT` or :data:`REQUEST`)."""

    value: Any
    read: str = ABSENT


class RopeType(NamedTuple):
    """One rope type as transformers names it.

    ``keys``: every key it reads but ``rope_type`` and ``partial_rotary_factor``, in the order a request writes them
    (``rope_theta`` among them, which a request writes apart); ``required``: those transformers' validation needs;
    ``also_read``: read without being validated (by the rope function, or the engines that mirror it);
    ``defaults``: see the module docstring. ``inherits``: keys a request of this type keeps from a
    model already of this type when the command line leaves them out; ``method``: the ``posenc scale`` method that
    writes it; ``odd_dim``: transformers computes it for an odd rotary dim (``ceil(dim / 2)`` pairs);
    ``whole_head``: it rotates pairs over the whole head whatever ``partial_rotary_factor`` says (proportional);
    ``validated``: transformers validates it (False: a type of a model class's own, posenc computes it).
    """

    name: str
    keys: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    also_read: tuple[str, ...] = ()
    defaults: Mapping[str, Default] = {}  # never mutated
    inherits: tuple[str, ...] = ()
    method: str | None = None
    odd_dim: bool = False
    whole_head: bool = False
    validated: bool = True

    @property
    def reads_original(self) -> bool:
        """It reads the trained length (``original_max_position_embeddings``), which standardization fills in."""
        return ORIGINAL in self.keys

    @property
    def optional(self) -> tuple[str, ...]:
        """The keys transformers' validation takes but does not need."""
        return tuple(k for k in self.keys if k not in self.required and k not in self.also_read)

    @property
    def needs(self) -> tuple[str, ...]:
        """Keys that must hold a value: required ones with no default (yarn's factor: the window over the original)."""
        return tuple(k for k in self.required if k not in self.defaults or self.defaults[k].read == REQUEST)


_YARN_FACTOR = Default(None)  # null: max_position_embeddings / original_max_position_embeddings

#: Every rope type, in ``posenc scale``'s method order, then the types posenc only reads.
RECORDS: dict[str, RopeType] = {r.name: r for r in (
    RopeType("linear", ("factor", "rope_theta"), ("factor",), method="linear", odd_dim=True),
    RopeType("default", ("rope_theta",), method="ntk", odd_dim=True),
    RopeType("dynamic", ("factor", "rope_theta"), ("factor",), method="dynamic", odd_dim=True),
    RopeType("yarn", ("factor", ORIGINAL, "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
                      "truncate", "rope_theta"), ("factor", ORIGINAL),
             defaults={"factor": _YARN_FACTOR, "beta_fast": Default(32, FALSY), "beta_slow": Default(1, FALSY),
                       "truncate": Default(True)},
             inherits=("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"), method="yarn"),
    RopeType("longrope", ("factor", ORIGINAL, "short_factor", "long_factor", "attention_factor", "rope_theta",
                          "short_mscale", "long_mscale"), (ORIGINAL, "short_factor", "long_factor"),
             also_read=("short_mscale", "long_mscale"), inherits=("short_factor", "long_factor"), method="longrope",
             odd_dim=True),
    RopeType("llama3", ("factor", "low_freq_factor", "high_freq_factor", ORIGINAL, "rope_theta"),
             ("factor", "low_freq_factor", "high_freq_factor", ORIGINAL, "rope_theta"),
             defaults={"low_freq_factor": Default(1.0, REQUEST), "high_freq_factor": Default(4.0, REQUEST)},
             inherits=("low_freq_factor", "high_freq_factor"), method="llama3", odd_dim=True),
    RopeType("proportional", ("rope_theta", "factor"), ("rope_theta",), also_read=("factor",),
             defaults={"factor": Default(1.0)}, whole_head=True),
    RopeType("axial", ("rope_theta",)),  # transformers validates it as default; posenc computes no frequencies
    RopeType("ntk_alpha", ("alpha",), ("alpha",), validated=False),  # HunYuan's static NTK (its model class)
)}

#: ``posenc scale``'s methods and the rope type each writes (static NTK: plain RoPE with a larger theta).
METHODS: dict[str, str] = {r.method: r.name for r in RECORDS.values() if r.method}


def record(rope_type: str) -> RopeType | None:
    """The record of ``rope_type`` (an alias such as ``su`` reads as the type it becomes), or None."""
    return RECORDS.get(ALIASES.get(rope_type, rope_type))


def rope_type_of(params: Mapping[str, Any], default: Any = "default") -> Any:
    """The rope type a dict names: ``rope_type``, else the legacy ``type``, else ``default`` (as transformers reads
    it; the value as written, which a caller checks is a string)."""
    return params.get("rope_type", params.get("type", default))


def param(params: Mapping[str, Any], key: str, rope_type: str | None = None) -> Any:
    """``params[key]`` as transformers reads it for ``rope_type`` (default: the dict's own), its default applied:
    ``beta_fast`` absent, null or 0 is 32; ``truncate`` absent is True, null stays null. A key without a
    transformers default comes back as written (None when absent)."""
    found = record(str(rope_type or rope_type_of(params)))
    default = found.defaults.get(key) if found is not None else None
    if default is None or default.read == REQUEST:
        return params.get(key)
    if default.read == FALSY:
        return params.get(key) or default.value
    return params.get(key, default.value)


def request_default(rope_type: str, key: str) -> Any:
    """The value a new request of ``rope_type`` writes for ``key`` when nothing gives it (llama3's bands: 1 and 4)."""
    found = record(rope_type)
    default = found.defaults.get(key) if found is not None else None
    return default.value if default is not None and default.read == REQUEST else None


def request_defaults() -> dict[str, Any]:
    """Every key's value for a new request that leaves it out (llama3's bands), over all records."""
    return {k: d.value for r in RECORDS.values() for k, d in r.defaults.items() if d.read == REQUEST}


def known_keys(rope_type: str) -> frozenset[str] | None:
    """Every key ``rope_type`` reads, the common and multimodal ones included; None for a type no record names."""
    found = record(rope_type)
    if found is None:
        return None
    return frozenset((*COMMON_KEYS, *MULTIMODAL_KEYS, *found.keys))


def every_key() -> frozenset[str]:
    """Every key some rope type reads (the common and multimodal ones included)."""
    return frozenset((*COMMON_KEYS, *MULTIMODAL_KEYS, *(k for r in RECORDS.values() for k in r.keys)))


def numeric_keys() -> tuple[str, ...]:
    """Every rope key whose value is a number, in record order."""
    return tuple(k for k in dict.fromkeys((*COMMON_KEYS, *(k for r in RECORDS.values() for k in r.keys)))
                 if k not in NOT_NUMBERS)


def tunable() -> tuple[str, ...]:
    """The keys a request can set beside its lengths and factor: every key a method's type reads, once, in record
    order (``factor``, the original length and the base come from the request itself)."""
    own = {"factor", ORIGINAL, "rope_theta"}
    return tuple(dict.fromkeys(k for r in RECORDS.values() if r.method for k in r.keys
                               if k not in own and k not in r.also_read))


def rotary_dim(head_dim: int, partial_rotary_factor: float | None, rope_type: str, default_partial: bool = True) -> int:
    """Features that turn: ``int(head_dim * partial_rotary_factor)``, except where the whole head turns: no factor, a
    type that rotates over the whole head (proportional, whose unrotated pairs have frequency 0), or plain RoPE in a
    model class that ignores the factor (``default_partial`` False)."""
    found = record(rope_type)
    if partial_rotary_factor is None or (found is not None and found.whole_head) or (
            rope_type == "default" and not default_partial):
        return head_dim
    return int(head_dim * partial_rotary_factor)
