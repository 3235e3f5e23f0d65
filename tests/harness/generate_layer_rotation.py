"""Write tests/data/layer_rotation.json: which layers of each model type apply RoPE, measured by running the model.

Run by a developer after upgrading transformers (``python tests/harness/generate_layer_rotation.py``, a few minutes on
two
cores); ``tests/models/test_layer_rotation.py`` compares posenc's :func:`~posenc_cli.models.model_positions.describe`
against the
data,
layer by layer, and regenerates a sample in memory to catch stale data.

How, per model type of transformers' ``CONFIG_MAPPING``:

* the text model's config is the class's default ``get_text_config(decoder=True)``, shrunk (:func:`shrink`): tiny
  hidden size, few experts, a small vocabulary and at most :data:`MAX_LAYERS` layers, with every per-layer list
  (``layer_types``, ``no_rope_layers``, ...) cut to match so the layer pattern survives; head dims and rope
  settings are left as the class sets them;
* the model class transformers maps that config to (``AutoModel``, else the modeling module's own ``*Model`` for
  that config class) is built with random weights in float32 and eager attention, and runs one forward pass over
  :data:`SEQ` tokens at positions ``0..SEQ-1``;
* every rotary application function of the modeling modules involved (``apply_rotary_pos_emb`` and its variants,
  :data:`ROTARY_NAME`) is wrapped for that pass, and a pre-hook on each decoder layer says which layer a call
  comes from. From the ``cos`` / ``sin`` (or complex ``freqs_cis``) a call receives, the angle step from position
  0 to 1 is each rotated pair's frequency (``atan2``, which the attention factor multiplying cos and sin cancels
  out of), and ``hypot(cos, sin)`` is the attention factor.

Per layer the data holds the index of the rope it received (``ropes``: the rotary dims, the frequencies sorted
from high to low as a multiset, the attention factor) or ``null`` when the layer applies no RoPE. The shrunk config
dict is stored with it, so the test reads exactly the config the model was built from. ``variants`` does the same
for the config settings the modeling code decides per layer with (:data:`VARIANTS`); ``conditions`` lists, per
modeling module, the ``if`` tests guarding a rotary call (read from the source with ``ast``), so the test can check
that every guarded module has a variant or is accounted for.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import inspect
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from generate_model_types import quiet

OUT = Path(__file__).resolve().parents[1] / "data" / "layer_rotation.json"
SEQ = 7  # an odd length: no head dim or head count equals it, so its axis is found in cos / sin
MAX_LAYERS = 8  # two periods of the usual 4-layer patterns; Gemma 3's 6 still shows one full-attention layer
#: layer counts tried in turn: a class that forces its last layer's type (Gemma 4: full attention) and keeps per-layer
#: settings by index builds with one period (6) where 8 layers would contradict its per-layer table; Gemma 3n's
#: kv-shared tail needs two periods of 5 (10) to hold both layer types
LAYER_COUNTS = (MAX_LAYERS, 6, 10, 12, 4)
MAX_PARAMS = 200_000_000  # a shrunk model above this is not built (float32: 800 MB)
#: rotary application functions and methods (module level and class level) across transformers' modeling modules
ROTARY_NAME = re.compile(r"_?(vision_)?apply\w*(rotary|rope)\w*|apply_rotary_emb")

#: keys of a config dict that say nothing about positions and only bulk up the data
_DROP_KEYS = ("id2label", "label2id", "architectures", "_name_or_path", "transformers_version", "dtype",
              "torch_dtype", "output_attentions", "output_hidden_states", "return_dict", "problem_type",
              "chunk_size_feed_forward", "initializer_range", "tokenizer_class", "task_specific_params")

#: sizes set where the config has the key (an int there): tiny but consistent with each other
_SIZES: dict[str, int] = {
    "vocab_size": 256,
    "intermediate_size": 64, "ffn_hidden_size": 64, "n_inner": 64, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "expert_intermediate_size": 32, "dense_intermediate_size": 64,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4, "num_experts_per_tok": 2,
    "moe_topk": 2, "top_k": 2, "n_group": 1, "topk_group": 1, "n_shared_experts": 1, "num_shared_experts": 1,
    "kv_lora_rank": 32, "q_lora_rank": 32,
    "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_d_state": 16,
    "mamba_headdim": 16, "ssm_state_size": 16, "n_groups": 1,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "num_nextn_predict_layers": 0, "altup_num_inputs": 2, "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": 256, "laurel_rank": 8, "per_layer_input_dim": 16,
    "o_lora_rank": 32, "o_groups": 2, "index_n_heads": 2, "index_topk": 4, "moe_k": 2,
}
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOKEN_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "image_token_id", "image_token_index",
               "sep_token_id", "decoder_start_token_id")

#: Config settings the modeling code decides per layer with (the ``if`` around its rotary call, or the layer pattern
#: that feeds it), as (label, model type, settings put into the shrunk text config). :data:`DERIVE` deletes a key so
#: the class derives it again (``layer_types`` from a pattern).
DERIVE = "(derived by the class)"
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    # Granite 4.0-H: attention layers rotate only with position_embedding_type "rope" (its default is None)
    ("granitemoehybrid rope", "granitemoehybrid",
     {"layer_types": ["mamba", "attention", "mamba", "attention"], "num_hidden_layers": 4,
      "position_embedding_type": "rope"}),
    ("granitemoehybrid nope", "granitemoehybrid",
     {"layer_types": ["mamba", "attention", "mamba", "attention"], "num_hidden_layers": 4,
      "position_embedding_type": "nope"}),
    ("granitemoehybrid default", "granitemoehybrid",
     {"layer_types": ["mamba", "attention", "mamba", "attention"], "num_hidden_layers": 4}),
    # Cohere2 / Command A: RoPE on sliding layers only
    # (a config without a sliding window does not run: the sliding mask needs an int)
    ("cohere2 pattern 2", "cohere2", {"layer_types": DERIVE, "sliding_window_pattern": 2}),
    # Cohere2-MoE: dense prefix layers rotate (force_rope) when prefix_dense_sliding_window_pattern is 1
    ("cohere2_moe dense prefix", "cohere2_moe",
     {"layer_types": DERIVE, "mlp_layer_types": DERIVE, "first_k_dense_replace": 2}),
    ("cohere2_moe dense prefix pattern 2", "cohere2_moe",
     {"layer_types": DERIVE, "mlp_layer_types": DERIVE, "first_k_dense_replace": 3,
      "prefix_dense_sliding_window_pattern": 2}),
    # EXAONE 4: full-attention layers skip RoPE when there is a sliding window
    ("exaone4 pattern 2", "exaone4", {"layer_types": DERIVE, "sliding_window_pattern": 2}),
    # Llama 4 / SmolLM3: no_rope_layers, given or from an interval
    ("llama4_text interval 2", "llama4_text", {"no_rope_layers": DERIVE, "no_rope_layer_interval": 2}),
    ("llama4_text explicit", "llama4_text", {"no_rope_layers": [1, 0, 0, 1, 1, 1, 0, 1]}),
    ("smollm3 explicit", "smollm3", {"no_rope_layers": [1, 0, 1, 1, 0, 1, 1, 0]}),
    ("smollm3 interval 2", "smollm3", {"no_rope_layers": DERIVE, "no_rope_layer_interval": 2}),
    # Qwen3-Next: linear-attention layers between full ones
    ("qwen3_next interval 2", "qwen3_next", {"layer_types": DERIVE, "full_attention_interval": 2}),
    # Gemma 3: the sliding pattern picks the rope per layer
    ("gemma3_text pattern 2", "gemma3_text", {"layer_types": DERIVE, "sliding_window_pattern": 2}),
    # AFMoE / Flint: rope on local (sliding) layers only
    ("afmoe no sliding", "afmoe", {"layer_types": ["full_attention"] * 4, "num_hidden_layers": 4}),
    # LFM2: short-convolution blocks between attention layers
    ("lfm2 conv", "lfm2", {"layer_types": ["conv", "full_attention", "conv", "conv", "full_attention", "conv"],
                          "num_hidden_layers": 6, "full_attn_idxs": DERIVE}),
    # Falcon: alibi instead of rope
    ("falcon alibi", "falcon", {"alibi": True}),
    # DeepSeek V3: the interleaved and the half-split application rotate the same frequencies
    ("deepseek_v3 no interleave", "deepseek_v3", {"rope_interleave": False}),
]


def rotary_conditions() -> dict[str, list[str]]:
    """Per modeling module (its model folder), the ``if`` tests that guard a rotary call (``ast``, no import)."""
    import transformers

    root = Path(transformers.__file__).parent / "models"
    out: dict[str, list[str]] = {}
    for path in sorted(root.glob("*/modeling_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        found: list[str] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if not ROTARY_NAME.fullmatch(name):
                continue
            child: ast.AST = node
            while child in parents and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                parent = parents[child]
                if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                    inside = child in parent.body if isinstance(parent, ast.If) else child is parent.body
                    test = ast.unparse(parent.test)
                    found.append(test if inside else f"not ({test})")
                child = parent
        if found:
            out[path.parent.name] = sorted(set(found))
    return out


class Recorder:
    """The rotary calls of one forward pass, by the decoder layer they happen in."""

    def __init__(self) -> None:
        self.layer: int | None = None
        self.depth = 0
        self.calls: dict[int, list[tuple[int, tuple[float, ...], float | None]]] = {}
        self.outside = 0

    def note(self, sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        try:
            bound = sig.bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {}
        entry = rope_of(bound, args, out)
        if self.layer is None:
            self.outside += 1
            return
        calls = self.calls.setdefault(self.layer, [])
        if entry not in calls:
            calls.append(entry)


def _angles(cos: Any, sin: Any) -> tuple[list[float], float] | None:
    """The per-dim angle step from position 0 to 1 and the attention factor, from cos / sin with a SEQ axis."""
    import torch

    axes = [a for a in range(cos.dim() - 1) if cos.shape[a] == SEQ]
    if not axes or sin is None or tuple(sin.shape) != tuple(cos.shape):
        return None
    axis = axes[-1]
    c = cos.detach().to(torch.float64)
    s = sin.detach().to(torch.float64)
    first = [c.select(axis, 0).reshape(-1, c.shape[-1])[0], s.select(axis, 0).reshape(-1, c.shape[-1])[0]]
    second = [c.select(axis, 1).reshape(-1, c.shape[-1])[0], s.select(axis, 1).reshape(-1, c.shape[-1])[0]]
    step = torch.atan2(second[1], second[0]) - torch.atan2(first[1], first[0])
    step = torch.remainder(step + math.pi, 2 * math.pi) - math.pi
    attention = float(torch.hypot(second[0], second[1])[0])
    return [float(x) for x in step], attention


def rope_of(bound: dict[str, Any], args: tuple[Any, ...], out: Any) -> tuple[int, tuple[float, ...], float | None]:
    """(rotary dims, frequencies high to low, attention factor) of one rotary call; () and None when the call
    passes no cos / sin to read them from (the dims are then the ones the call changed)."""
    import torch

    cos, sin = bound.get("cos"), bound.get("sin")
    for key in ("freqs_cis", "freqs_ci"):
        value = bound.get(key)
        if isinstance(value, torch.Tensor) and value.is_complex():
            cos, sin = value.real, value.imag
    read = _angles(cos, sin) if isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) else None
    if read is None:
        return _changed_dims(args, out), (), None
    steps, attention = read
    values = sorted((abs(x) for x in steps), reverse=True)
    # cat(freqs, freqs) (or an interleaved copy) holds each frequency twice; GPT-J's half-width cos once
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    freqs = values[::2] if all(n % 2 == 0 for n in counts.values()) else values
    return 2 * len(freqs), tuple(float(f"{f:.9g}") for f in freqs), float(f"{attention:.9g}")


def _changed_dims(args: tuple[Any, ...], out: Any) -> int:
    import torch

    first_out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(first_out, torch.Tensor):
        return 0
    # the rotated tensor, not a position table passed first (RoFormer's sinusoidal_pos)
    first_in = next((a for a in args if isinstance(a, torch.Tensor) and a.shape == first_out.shape), None)
    if not isinstance(first_out, torch.Tensor) or first_in is None or first_in.shape != first_out.shape:
        return 0
    changed = (first_out != first_in).reshape(-1, first_in.shape[-1]).any(dim=0)
    return int(changed.sum())


def _is_rotary(name: str, obj: Any) -> bool:
    """A module-level rotary application: a function, or the kernels hub's wrapper module around one (transformers
    decorates ``apply_rotary_pos_emb`` with ``use_kernel_forward_from_hub`` when the ``kernels`` package is
    installed: the name then holds an ``nn.Module`` whose ``forward`` is the function)."""
    if not ROTARY_NAME.fullmatch(name):
        return False
    return inspect.isfunction(obj) or (not inspect.isclass(obj) and inspect.isfunction(
        getattr(getattr(obj, "forward", None), "__func__", getattr(obj, "forward", None))))


@contextlib.contextmanager
def wrapped(modules: list[Any], recorder: Recorder) -> Iterator[int]:
    """Every rotary application function / method of ``modules`` recording into ``recorder``, put back after."""
    undo: list[tuple[Any, str, Any]] = []

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(getattr(orig, "forward", orig))

        @functools.wraps(orig)
        def call(*args: Any, **kwargs: Any) -> Any:
            recorder.depth += 1
            try:
                out = orig(*args, **kwargs)
            finally:
                recorder.depth -= 1
            if recorder.depth == 0:  # an outer rotary function calling an inner one is one application
                recorder.note(sig, args, kwargs, out)
            return out

        return call

    for module in modules:
        for name, obj in list(vars(module).items()):
            if _is_rotary(name, obj):
                undo.append((module, name, obj))
                setattr(module, name, wrap(obj))
            elif inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr, fn in list(vars(obj).items()):
                    if not ROTARY_NAME.fullmatch(attr):
                        continue
                    if isinstance(fn, staticmethod):  # RoFormer's apply_rotary_position_embeddings
                        undo.append((obj, attr, fn))
                        setattr(obj, attr, staticmethod(wrap(fn.__func__)))
                    elif inspect.isfunction(fn):
                        undo.append((obj, attr, fn))
                        setattr(obj, attr, wrap(fn))
    try:
        yield len(undo)
    finally:
        for owner, name, obj in reversed(undo):
            setattr(owner, name, obj)


def _per_layer_key(key: str, value: Any, n: int) -> bool:
    return isinstance(value, list) and len(value) == n and n > 1


def _shrink_heads(out: dict[str, Any]) -> None:
    """At most 4 attention heads (2 key/value heads when grouped), the head dim kept: the hidden size becomes
    heads x head dim where the class derives the head dim from it, so the rotary dims stay the class's."""
    hidden_key = next((k for k in ("hidden_size", "n_embd", "d_model") if isinstance(out.get(k), int)), None)
    heads_key = next((k for k in ("num_attention_heads", "n_head", "n_heads") if isinstance(out.get(k), int)), None)
    if hidden_key is None or heads_key is None or not out[heads_key]:
        return
    hidden, heads = out[hidden_key], out[heads_key]
    head_dim = out.get("head_dim") if isinstance(out.get("head_dim"), int) else hidden // heads
    new_heads = min(heads, 4)
    for kv_key in ("num_key_value_heads", "n_kv_heads", "num_kv_heads"):
        kv = out.get(kv_key)
        if isinstance(kv, int) and kv > 0:
            out[kv_key] = new_heads if kv >= heads else min(kv, 2)
        elif kv_key in out and kv is None:
            out[kv_key] = new_heads  # Nemotron's null means one per head, which its attention does not derive
    out[heads_key] = new_heads
    out[hidden_key] = min(hidden, new_heads * head_dim)


def shrink(d: dict[str, Any], layers: int) -> dict[str, Any]:
    """A default text config dict made tiny, keeping its layer pattern over the first ``layers`` layers."""
    out = {k: v for k, v in d.items() if k not in _DROP_KEYS}
    layers_key = next((k for k in _LAYER_KEYS if isinstance(out.get(k), int)), "num_hidden_layers")
    n = out.get(layers_key)
    if isinstance(n, int) and n > layers:
        for key, value in list(out.items()):
            if _per_layer_key(key, value, n):
                out[key] = value[:layers]
            elif (isinstance(value, list) and key.endswith(("layers", "layer_ids", "layer_indices")) and value
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                out[key] = [v for v in value if v < layers]  # layer indices (Mllama's cross_attention_layers)
            elif isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
                out[key] = {k: v for k, v in value.items() if int(k) < layers}  # per layer index (Gemma 4)
        out[layers_key] = layers
        shared = out.get("num_kv_shared_layers")
        if isinstance(shared, int) and shared > 0:  # the same share of the layers reuses earlier keys and values
            out["num_kv_shared_layers"] = max(1, round(shared * layers / n))
    hidden, heads = out.get("hidden_size"), out.get("num_attention_heads")
    if out.get("head_dim", 0) is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        # Ministral's and HunYuan's classes default head_dim to null and their attention then fails on it: a real
        # checkpoint writes hidden_size // num_attention_heads, which is also what a reader derives
        out["head_dim"] = hidden // heads
    types = out.get("layer_types")
    if out.get("sliding_window", 0) is None and isinstance(types, list) and "sliding_attention" in types:
        out["sliding_window"] = 128  # Step 3.5's default names sliding layers but no window: its mask needs one
    _shrink_heads(out)
    for key, size in _SIZES.items():
        value = out.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > size:
            out[key] = size
        elif isinstance(value, list) and value and all(isinstance(v, int) for v in value) and key.endswith("size"):
            out[key] = [min(v, size) for v in value]
    hidden = out.get("hidden_size")
    if all(isinstance(out.get(k), int) for k in ("mamba_n_heads", "mamba_d_head", "mamba_expand", "hidden_size")):
        out["mamba_n_heads"] = max(1, out["mamba_expand"] * hidden // out["mamba_d_head"])
    experts = [out[k] for k in _EXPERTS if isinstance(out.get(k), int) and out[k] > 0]
    for key in ("num_experts_per_tok", "moe_topk", "top_k", "moe_k"):
        if experts and isinstance(out.get(key), int):
            out[key] = min(out[key], *experts)
        elif experts and key in out and out[key] is None:
            out[key] = min(2, *experts)  # DeepSeek V2's class default is null, which its router cannot take
    vocab = out.get("vocab_size")
    if isinstance(vocab, int):
        for key in _TOKEN_KEYS:
            value = out.get(key)
            if isinstance(value, int) and value >= vocab:
                out[key] = vocab - 1
            elif isinstance(value, list):
                out[key] = [v if not isinstance(v, int) or v < vocab else vocab - 1 for v in value]
    return out


def _model_class(text: Any) -> list[type]:
    """Classes that build the text model from its config: AutoModel's, then the module's own ``*Model``."""
    from transformers import PreTrainedModel
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    module = importlib.import_module(type(text).__module__.replace(".configuration_", ".modeling_"))
    found: list[type] = []
    name = MODEL_MAPPING_NAMES.get(type(text).model_type or "")
    if isinstance(name, str) and hasattr(module, name):
        found.append(getattr(module, name))
    own = [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, PreTrainedModel)
           and obj.__module__ == module.__name__ and getattr(obj, "config_class", None) is type(text)]
    own.sort(key=lambda c: (not c.__name__.endswith(("TextModel", "Model")), "ForCausalLM" not in c.__name__,
                            c.__name__))
    return found + [c for c in own if c not in found]


def _decoder_layers(model: Any, n: int) -> Any:
    """The ModuleList of the ``n`` decoder layers (the shortest-named one of that length)."""
    from torch import nn

    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n]
    lists.sort(key=lambda nm: (not nm[0].endswith(("layers", "layer", "h", "blocks")), nm[0].count("."), nm[0]))
    return lists[0][1] if lists else None


def _enter(recorder: Recorder, i: int, *_: Any) -> None:
    recorder.layer = i


def _leave(recorder: Recorder, *_: Any) -> None:
    recorder.layer = None


def measure(text_cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Build the text model of config dict ``d`` and record per layer the rope it applies (or raise)."""
    import torch

    config = text_cls.from_dict(json.loads(json.dumps(d)))
    config._attn_implementation = "eager"
    n = int(config.num_hidden_layers)
    errors = []
    for cls in _model_class(config):
        with torch.device("meta"):
            try:
                size = sum(p.numel() for p in cls(config).parameters())
            except Exception as exc:  # noqa: BLE001 - this class does not build from this config: try the next
                errors.append(f"{cls.__name__}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
        if size > MAX_PARAMS:
            raise RuntimeError(f"{cls.__name__} has {size} parameters after shrinking")
        torch.manual_seed(0)
        model = cls(config).eval()
        layers = _decoder_layers(model, n)
        if layers is None:
            errors.append(f"{cls.__name__}: no list of {n} decoder layers")
            continue
        recorder = Recorder()
        hooks = []
        for i, layer in enumerate(layers):
            hooks.append(layer.register_forward_pre_hook(functools.partial(_enter, recorder, i)))
            hooks.append(layer.register_forward_hook(functools.partial(_leave, recorder)))
        modules = {sys.modules[type(m).__module__] for m in model.modules()}
        modules.add(importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_")))
        vocab = int(getattr(config, "vocab_size", 0) or 0) or 32
        ids = torch.arange(1, SEQ + 1).remainder(vocab).unsqueeze(0)
        try:
            with wrapped(sorted(modules, key=lambda m: m.__name__), recorder), torch.no_grad():
                model(input_ids=ids)
        except Exception as exc:  # noqa: BLE001 - recorded as this class's failure
            errors.append(f"{cls.__name__} forward: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        finally:
            for hook in hooks:
                hook.remove()
        ropes: list[dict[str, Any]] = []
        per_layer: list[int | None] = []
        for i in range(n):
            calls = recorder.calls.get(i, [])
            if not calls:
                per_layer.append(None)
                continue
            if len(calls) > 1:  # several applications in one layer (DeepSeek V4's compressor): the widest
                calls = sorted(calls, key=lambda c: (-c[0], c[1]))
            dims, freqs, attention = calls[0]
            rope = {"dims": dims, "inv_freq": list(freqs), "attention": attention}
            if len(recorder.calls[i]) > 1:
                rope["calls"] = len(recorder.calls[i])
            if rope not in ropes:
                ropes.append(rope)
            per_layer.append(ropes.index(rope))
        return {"model_class": cls.__name__, "layers": per_layer, "ropes": ropes}
    raise RuntimeError("; ".join(errors) or "no model class for this config")


def _key(text_type: str, d: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{text_type}-{digest}"


def _text_dict(model_type: str) -> tuple[type, dict[str, Any]]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    text = CONFIG_MAPPING[model_type]().get_text_config(decoder=True)
    saved: dict[str, Any] = json.loads(json.dumps(text.to_dict(), default=str))
    return type(text), saved


def _has_rotary_code(text_cls: type) -> str | None:
    """None when the text config's modeling module has a rotary application function, else why it is not built."""
    name = text_cls.__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return "no model code in transformers (a config class only)"
        return f"its model code needs {exc.name}, which is not installed"
    except Exception as exc:  # noqa: BLE001
        return f"its model code does not import: {type(exc).__name__}"
    for obj_name, obj in vars(module).items():
        if _is_rotary(obj_name, obj):
            return None
        if inspect.isclass(obj) and any(ROTARY_NAME.fullmatch(a) for a in vars(obj)):
            return None
    return "its modeling module applies no rotary embedding"


def build(model_type: str, overrides: dict[str, Any] | None, builds: dict[str, Any]) -> dict[str, Any]:
    """{"build": key} (the measurement stored in ``builds``), or {"skipped" / "failed": reason}."""
    try:
        text_cls, saved = _text_dict(model_type)
    except Exception as exc:  # noqa: BLE001 - a class that cannot build its own default config
        return {"failed": f"no default config: {type(exc).__name__}"}
    reason = _has_rotary_code(text_cls)
    if reason is not None:
        return {"skipped": reason}
    return first_build(model_type, text_cls, saved, overrides or {}, builds, shrink, measure, once=bool(overrides))


def first_build(model_type: str, text_cls: type, saved: dict[str, Any], overrides: dict[str, Any],
                builds: dict[str, Any], shrink_to: Callable[[dict[str, Any], int], dict[str, Any]],
                measure_with: Callable[[type, dict[str, Any]], dict[str, Any]], *, once: bool) -> dict[str, Any]:
    """The class's default config shrunk to each of :data:`LAYER_COUNTS` in turn (``overrides`` applied; DERIVE
    drops a key), measured until one builds: {"build": key}, the measurement kept in ``builds`` (shared by equal
    configs), else {"failed": the first reason}. ``once``: try the first layer count only (an override that fixes
    the layers or the pattern). The layer-rotation and layer-cache generators both build this way."""
    errors: list[str] = []
    for layers in LAYER_COUNTS:
        d = shrink_to(saved, layers)
        for key, value in overrides.items():
            if value == DERIVE:
                d.pop(key, None)
            else:
                d[key] = value
        text_type = str(d.get("model_type") or model_type)
        key = _key(text_type, d)
        if key not in builds:
            try:
                builds[key] = {"text_type": text_type, **measure_with(text_cls, d), "config": d}
            except Exception as exc:  # noqa: BLE001 - recorded with its reason
                builds[key] = {"text_type": text_type, "failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
        if "failed" not in builds[key]:
            return {"build": key}
        errors.append(builds[key]["failed"])
        if "parameters after shrinking" in errors[-1] or once:
            break
    return {"failed": errors[0]}


def generate(model_types: list[str] | None = None, variants: list[str] | None = None) -> dict[str, Any]:
    """The layer-rotation data for the installed transformers; ``model_types`` / ``variants`` (labels) pick a
    sample (the freshness test), None all of them."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    torch.set_num_threads(1)
    builds: dict[str, Any] = {}
    types: dict[str, Any] = {}
    with quiet():
        for model_type in model_types if model_types is not None else sorted(CONFIG_MAPPING_NAMES):
            types[model_type] = build(model_type, None, builds)
        found: dict[str, Any] = {}
        for label, model_type, overrides in VARIANTS:
            if variants is not None and label not in variants:
                continue
            found[label] = {"model_type": model_type, "overrides": overrides, **build(model_type, overrides, builds)}
    builds = {k: {kk: vv for kk, vv in v.items() if kk != "failed"} for k, v in sorted(builds.items())
              if "failed" not in v}
    return {"transformers": transformers.__version__, "seq": SEQ, "max_layers": MAX_LAYERS, "types": types,
            "variants": found, "conditions": rotary_conditions(), "builds": builds}


def main() -> int:
    start = time.monotonic()
    data = generate()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(OUT)
    built = sum("build" in v for v in data["types"].values())
    failed = sum("failed" in v for v in data["types"].values())
    print(f"wrote {OUT}: {built} model types built, {failed} failed, "
          f"{len(data['types']) - built - failed} skipped, {len(data['builds'])} distinct builds "
          f"(transformers {data['transformers']}, {time.monotonic() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
