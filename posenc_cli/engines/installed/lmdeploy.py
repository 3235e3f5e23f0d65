"""LMDeploy TurboMind as the user's installed lmdeploy computes it: its own rope parser run, its CUDA kernel modelled.

``run`` builds the transformers config object lmdeploy builds (``AutoConfig``; the text model's sub-config for a
multimodal wrapper, as ``source_model_config`` and the model classes take it), then runs the installed
``lmdeploy/turbomind/models/utils.py``'s ``parse_rope_param`` and ``copy_rope_config``. The frequencies come from
posenc's model of TurboMind's kernel (:func:`posenc_cli.engines.lmdeploy.frequencies`): **the kernel is modelled**, it
is C++/CUDA and cannot run without a GPU.

The parser is taken from the installed file itself: its top-level definitions the parser needs (and the
``SUPPORTED_ARCHS`` dict of ``supported_models.py``) are compiled from the package's source text and run. Importing
``lmdeploy.turbomind`` would load the CUDA extension, which needs libcuda, and lmdeploy's package import needs its
serving dependencies; the parser itself uses neither. :func:`version` is None when the distribution is absent or
those files are missing.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import lmdeploy as model_of
from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun, GroupRun

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

_PARSER = "lmdeploy/turbomind/models/utils.py"
_ARCHS = "lmdeploy/turbomind/supported_models.py"
_OVERRIDES = "lmdeploy/pytorch/config.py"
_NEEDED = ("source_model_config", "_optional_attr", "_param_get", "_param_has", "_ROPE_TYPE_MAP",
           "rope_type_to_int", "_get_mscale", "parse_rope_param", "copy_rope_config")


def _file(relative: str) -> Path | None:
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution("lmdeploy").locate_file(relative)))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def version() -> str | None:
    """The installed lmdeploy's version; None when it is not installed or its rope parser's files are missing."""
    from importlib import metadata

    try:
        found = metadata.version("lmdeploy")
    except metadata.PackageNotFoundError:
        return None
    return found if _file(_PARSER) is not None and _file(_ARCHS) is not None else None


def _definitions(relative: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The top-level functions and assignments named ``names`` of the installed file, compiled and run."""
    path = _file(relative)
    if path is None:
        raise FileNotFoundError(relative)
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def wanted(node: ast.stmt) -> bool:
        if isinstance(node, ast.FunctionDef):
            return node.name in names
        return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)

    namespace: dict[str, Any] = {"math": math, "SimpleNamespace": SimpleNamespace}
    body = [node for node in tree.body if wanted(node)]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _supported_archs() -> tuple[str, ...]:
    """The installed ``SUPPORTED_ARCHS`` (the architectures TurboMind runs)."""
    return tuple(_definitions(_ARCHS, ("SUPPORTED_ARCHS",))["SUPPORTED_ARCHS"])


def _hf_text_config(cfg: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    """The transformers config object TurboMind's model class reads: ``AutoConfig`` of ``cfg`` through the
    installed ``source_model_config``, ``overrides`` (``--hf-overrides``) merged by the installed
    ``override_hf_config`` as ``lmdeploy/turbomind/converter.py`` does, then a multimodal aggregate's
    ``text_config`` / ``llm_config``."""
    import copy
    import warnings

    from transformers import AutoConfig

    parser = _definitions(_PARSER, _NEEDED)
    # a deep copy: AutoConfig and the override merge write into the nested rope dict, which is the caller's
    served = copy.deepcopy({k: v for k, v in cfg.items() if k != "quantization_config"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hf = parser["source_model_config"](AutoConfig.for_model(**served))
        except ValueError:
            # a remote-code wrapper (InternVL's internvl_chat): its config class builds the language model's config
            # from `llm_config` with that config's own transformers class, which is built here the same way
            if not isinstance(cfg.get("llm_config"), dict):
                raise
            return AutoConfig.for_model(**cfg["llm_config"])
    if overrides:
        merge = _definitions(_OVERRIDES, ("_override_hf_config_dict", "_overide_hf_config_cfg",
                                          "_override_hf_config", "override_hf_config"))
        merge["override_hf_config"](hf, overrides)
    for key in ("text_config", "llm_config"):
        sub = getattr(hf, key, None)
        if sub is not None:
            return sub
    return hf


def _parsed(cfg: dict[str, Any], overrides: dict[str, Any] | None = None) -> model_of.TurboMindRope:
    """The installed parser's ``RopeConfig`` for ``cfg`` served with ``overrides`` (``parse_rope_param`` then
    ``copy_rope_config``, with the head dim ``make_attention_config`` uses). Raises RuntimeError where lmdeploy
    does, ValueError when transformers has no config class for the model (its remote code)."""
    parser = _definitions(_PARSER, _NEEDED)
    text = _hf_text_config(cfg, overrides)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    rope_param, window = parser["parse_rope_param"](text, head_dim)
    into = SimpleNamespace()
    parser["copy_rope_config"](into, rope_param, window)
    kind = {v: k for k, v in parser["_ROPE_TYPE_MAP"].items()}[into.type]
    fields = {k: v for k, v in vars(into).items() if k not in ("type", "mrope_section")}
    return model_of.TurboMindRope(kind, **fields)


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the installed TurboMind computes serving ``max_model_len`` for a prompt of ``seq_len`` tokens (default:
    that long), with the ``--hf-overrides`` posenc's invocation carries (:func:`posenc_cli.engines.lmdeploy.served`):
    its parser run on the config they give, its kernel modelled. One rope for every layer group (TurboMind has one
    per model)."""
    from posenc_cli.models.record import rope_groups

    installed = version() or "unknown"
    why = model_of.refusal(cfg, _supported_archs())
    groups_of = rope_groups(model) if why is None else []
    over = model_of.served(dict(groups_of[0].spec.params), model.max_position_embeddings or 0, cfg)[2] \
        if groups_of else None
    argv = model_of.invocation("MODEL", over, max_model_len)
    if why is None and len({model_of.json_key(g.spec.params) for g in groups_of}) > 1:
        why = f"{NOT_MODELLED}: TurboMind has one rope per model, this config one per layer type"
    if why is not None:
        return EngineRun(model_of.NAME, installed, max_model_len, [], argv, refusal=why)
    try:
        rope = _parsed(cfg, over)
    except RuntimeError as exc:
        return EngineRun(model_of.NAME, installed, max_model_len, [], argv,
                         refusal=f"{WILL_NOT_START}: TurboMind's parser raises {exc}")
    except ValueError as exc:  # transformers has no class for the config: lmdeploy would run the model's own code
        return EngineRun(model_of.NAME, installed, max_model_len, [], argv,
                         refusal=f"{NOT_MODELLED}: transformers cannot build this config without the model's remote "
                                 f"code ({str(exc).split('.')[0]})")
    inv, attention = model_of.frequencies(rope, seq_len or max_model_len)
    groups = [GroupRun(g.name, inv, attention, model.softmax_scale) for g in groups_of]
    return EngineRun(model_of.NAME, installed, max_model_len, groups, argv, accepts=max_model_len)
