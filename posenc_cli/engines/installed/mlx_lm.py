"""MLX-LM as the user's installed package runs it: the model file's own ``ModelArgs.from_dict`` and ``Model`` (built
lazily by mlx: no weight is materialised), each layer's rope module called on a probe, and what it hands to
``mx.fast.rope`` read back (``posenc check --installed``; the modelled numbers are :mod:`posenc_cli.engines.mlx_lm`).

Per layer: the rope module is called on a ``(1, 1, 1, dims)`` array of ones at ``offset = seq_len - 1`` (so a
``DynamicNTKScalingRoPE`` takes its base for a sequence of ``seq_len`` tokens) while ``mx.fast.rope`` is wrapped;
its arguments give the layout (``traditional``: pairs ``2i, 2i+1``), the cos/sin magnitude (the factor the module
multiplied its input by: YaRN's mscale, SuScaledRoPE's scale, as the module's Python float once the float32 probe
shows it applied) and the inverse frequencies: ``scale / freqs`` when
the module passes frequencies (what the kernel computes, float32), else ``scale / base ** (2i / dims)`` as
transformers computes it from the base the module passed (the kernel's own ``exp`` rounds it differently, by up to
1.5e-6 relative on the CPU backend: the tests measure it). The softmax multiplier is the attention module's
``scale`` over transformers' ``1 / sqrt(head_dim)`` (``query_pre_attn_scalar``, default 256, for Gemma 2 and 3).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import mlx_lm
from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun, GroupRun
from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.models.model_positions import ModelPositions

#: a layer's attention rope, by module path (``model.layers.3.self_attn.rope``, ``transformer.h.3.attn.attention.rope``)
_ROPE_PATH = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.(.+\.)?rope$")


def version() -> str | None:
    """The installed mlx-lm's version, None when mlx-lm or mlx is not installed or does not import."""
    try:
        found = importlib.metadata.version("mlx-lm")
        importlib.metadata.version("mlx")
    except importlib.metadata.PackageNotFoundError:
        return None
    if importlib.util.find_spec("mlx_lm") is None:
        return None
    try:
        import mlx.core  # noqa: F401
        import mlx_lm.models.rope_utils  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return found


def _build(cfg: dict[str, Any]) -> Any:
    """mlx-lm's model for ``cfg`` as ``load_model`` builds it (its ``_get_classes``, ``from_dict``, ``Model``)."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config=cfg)
    return model_class(args_class.from_dict(cfg))


def layer_rope_modules(net: Any) -> dict[int, tuple[Any, Any]]:
    """Layer index -> (attention module, rope module): the shortest rope path in each layer."""
    found: dict[int, tuple[str, Any]] = {}
    modules = dict(net.named_modules())
    for path, module in modules.items():
        match = _ROPE_PATH.search(path)
        if match is None or not callable(module):
            continue
        layer = int(match.group(1))
        if layer not in found or path.count(".") < found[layer][0].count("."):
            found[layer] = (path, module)
    return {i: (modules.get(path.rsplit(".", 1)[0]), module) for i, (path, module) in found.items()}


def probe(rope: Any, seq_len: int) -> dict[str, Any]:
    """Call ``rope`` on ones at the last position of ``seq_len`` tokens; what it passed to ``mx.fast.rope``."""
    import mlx.core as mx
    import numpy as np

    dims = int(getattr(rope, "dims", None) or rope.dim)
    captured: dict[str, Any] = {}
    real = mx.fast.rope

    def spy(x: Any, d: int, **kw: Any) -> Any:
        captured.update(kw, x=np.array(x, dtype=np.float32), dims=d)
        return real(x, d, **kw)

    fast: Any = mx.fast  # untyped when mlx is absent at type-check time, typed (and read-only) when present
    fast.rope = spy
    try:
        rope(mx.ones((1, 1, 1, dims), dtype=mx.float32), offset=seq_len - 1)
    finally:
        fast.rope = real
    if not captured:
        raise PosencError(f"{type(rope).__name__} did not call mx.fast.rope")
    freqs = captured.get("freqs")
    captured["freqs"] = None if freqs is None else np.array(freqs, dtype=np.float32)
    return captured


def inverse_frequencies(call: dict[str, Any]) -> npt.NDArray[np.float32]:
    """The angle per position step of an ``mx.fast.rope`` call (module docstring)."""
    import numpy as np

    from posenc_cli.rope.frequencies import default_inv_freq

    scale = np.float32(call.get("scale", 1.0))
    if call["freqs"] is not None:
        inv: npt.NDArray[np.float32] = (np.float32(1) / call["freqs"]).astype(np.float32) * scale
        return inv.astype(np.float32)
    return (default_inv_freq(float(call["base"]), int(call["dims"])) * scale).astype(np.float32)


def magnitude_of(rope: Any, call: dict[str, Any]) -> float:
    """The factor the module multiplied its input by: its own Python float (YarnRoPE ``mscale``, SuScaledRoPE
    ``_scale``) when the float32 probe shows exactly that factor applied, else the probe's float32 ratio."""
    import numpy as np

    applied = float(call["x"].reshape(-1)[0])
    own = getattr(rope, "mscale", None) or getattr(rope, "_scale", None)
    if isinstance(own, float | int) and np.float32(own) == np.float32(applied):
        return float(own)
    return applied


def _softmax(attn: Any, cfg: dict[str, Any], model: ModelPositions) -> float:
    import math

    scale = getattr(attn, "scale", None) or getattr(attn, "sm_scale", None)
    if scale is None:
        return 1.0
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    assert isinstance(text, dict)
    if text.get("query_pre_attn_scalar") or str(text.get("model_type", "")).startswith(("gemma2", "gemma3")):
        # transformers' scale for Gemma 2 and 3: query_pre_attn_scalar ** -0.5 (its default 256)
        return float(scale) * math.sqrt(float(text.get("query_pre_attn_scalar") or 256))
    head_dim = getattr(attn, "q_head_dim", None) or getattr(attn, "head_dim", None) or model.head_dim or 1
    return float(scale) * math.sqrt(float(head_dim))


def _group(model: ModelPositions, cfg: dict[str, Any], g: Any, ropes: dict[int, tuple[Any, Any]],
           seq: int) -> GroupRun | str:
    """One rope group as the installed mlx-lm runs it, or why not (a refusal)."""
    import numpy as np

    indices = [i for i in (g.layers if g.layers is not None else sorted(ropes)) if i in ropes]
    if not indices:
        return f"{NOT_MODELLED}: mlx-lm builds no rope for transformers' {g.name} layers"
    try:
        calls = [probe(ropes[i][1], seq) for i in indices]
    except Exception as exc:  # noqa: BLE001 - the rope fails on its first call: mlx-lm cannot serve this
        return f"{WILL_NOT_START}: mlx-lm's {type(ropes[indices[0]][1]).__name__} raises {type(exc).__name__}: {exc}"
    runs = [(inverse_frequencies(c), magnitude_of(ropes[i][1], c), bool(c["traditional"]))
            for i, c in zip(indices, calls, strict=True)]
    first = runs[0]
    if any(r[2] != first[2] or r[0].shape != first[0].shape or not np.array_equal(r[0], first[0])
           or r[1] != first[1] for r in runs[1:]):
        return f"{NOT_MODELLED}: mlx-lm builds different ropes within transformers' {g.name} layers"
    inv, magnitude, traditional = first
    softmax = _softmax(ropes[indices[0]][0], cfg, model)
    layout = "interleaved" if traditional else "rotate-half"
    wanted = mlx_lm.transformers_layout(model, cfg, g.layout)
    if inv.size * 2 != g.spec.rotary_dim or layout != wanted:
        return GroupRun(g.name, None, 1.0, softmax, [f"mlx-lm rotates {inv.size * 2} features paired {layout}, "
                                                     f"transformers {g.spec.rotary_dim} paired {wanted}"])
    return GroupRun(g.name, inv, magnitude, softmax)


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the installed mlx-lm computes for the model (the same meaning as :func:`posenc_cli.engines.mlx_lm.run`)."""
    from posenc_cli.models.record import rope_groups

    installed = version()
    if installed is None:
        raise PosencError("mlx-lm (with mlx) is not installed in this environment")
    argv = list(mlx_lm.INVOCATION)
    try:
        net = _build(cfg)
    except Exception as exc:  # noqa: BLE001 - whatever load_model raises, mlx-lm will not serve this config
        return EngineRun(mlx_lm.NAME, installed, max_model_len, [], argv,
                         refusal=f"{WILL_NOT_START}: mlx-lm raises {type(exc).__name__}: {exc}")
    ropes = layer_rope_modules(net)
    seq = seq_len or max_model_len
    groups: list[GroupRun] = []
    for g in rope_groups(model):
        got = _group(model, cfg, g, ropes, seq)
        if isinstance(got, str):
            return EngineRun(mlx_lm.NAME, installed, max_model_len, [], argv, refusal=got)
        groups.append(got)
    warnings = [n for g in groups for n in g.notes]
    try:  # the modelled divergences, as prose for the same config
        name, built, _ = mlx_lm.read(cfg)
        warnings += [w for rope in dict.fromkeys(r for r in built if r is not None)
                     for w in mlx_lm.divergences(name, cfg, rope, seq)]
    except mlx_lm.Refused:
        pass
    return EngineRun(mlx_lm.NAME, installed, max_model_len, groups, argv, accepts=None,
                     warnings=list(dict.fromkeys(warnings)))
