"""What ``posenc scale`` prints for each ``--format``: one rendering per consumer of the request's rope dict
(stdlib only: the engine modules keep numpy inside the functions that compute tables).

Each engine module is imported when its format is asked for: ``posenc scale`` without ``--config`` then loads one
engine, not four, nor the model reader (``tests/test_imports.py`` guards it).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import hf
from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_config, dumps_json
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.models.facts import ModelFacts

#: the Hugging Face-based trainers (posenc_cli.trainers.hf.FORMATS, named here so that other formats never
#: load that module)
HF_TRAINER_FORMATS = ("llamafactory", "axolotl", "unsloth", "trl")
#: Training frameworks (:mod:`posenc_cli.trainers.frameworks`, loaded only for these; a test holds the names equal).
TRAINER_FORMATS = ("megatron", "megatron-bridge", "torchtitan", "torchtune")
FORMATS = (*hf.FORMATS, "vllm", "sglang", "llama.cpp", "llama-cpp-python", *TRAINER_FORMATS, *HF_TRAINER_FORMATS)
#: The formats a training run reads (``scale --seq-len``, ``pick --trainer`` stages): transformers' config keys (the
#: config a stage's checkpoint carries) and every trainer.
TRAINING_FORMATS = (*hf.FORMATS, *TRAINER_FORMATS, *HF_TRAINER_FORMATS)


def render(req: ScaleRequest, fmt: str, model: str = "MODEL", *, text_config: bool = False,
           rope: dict[str, Any] | None = None, facts: ModelFacts | None = None,
           gguf: bool = False) -> tuple[str, list[str]]:
    """The text ``posenc scale`` prints on stdout for ``fmt``, and caveats for stderr.

    ``text_config``: the model keeps its rope settings in ``text_config`` (multimodal), where vLLM reads them.
    ``model``: the model name (or GGUF path) the engine command lines name. ``rope``: the model's whole
    ``rope_parameters`` after the request (one dict per layer type for Gemma 3), which engines that replace the
    dict must get whole; by default the request's one dict. ``facts``: the model (``--config``), whose GGUF
    architecture and converted rope llama.cpp's flags depend on; ``gguf``: the model was given as its GGUF file.
    """
    group = rope_parameters(req)
    rope = group if rope is None else rope
    trained = req.original_max
    if fmt in TRAINER_FORMATS:
        from posenc_cli.trainers import frameworks as trainers

        return trainers.render(req, fmt, facts, group)
    if fmt == "hf":
        return dumps_json(hf.format_hf(req)), []
    if fmt == "hf-v5":
        return dumps_json(hf.format_hf_v5(req)), []
    if fmt == "vllm":
        caveats = []
        if group.get("rope_type") == "dynamic":
            caveats.append("vLLM's dynamic NTK is static: max_trained_positions makes its base equal transformers' "
                           f"at {req.target} positions; shorter sequences keep that base, where transformers grows "
                           "its base from rope_theta")
        from posenc_cli.engines import vllm

        over = vllm.rope_overrides(rope, serve_len=req.target, trained_len=trained, text_config=text_config)
        return shlex.join(vllm.invocation(model, over, req.target)), caveats
    if fmt == "sglang":
        from posenc_cli.engines import sglang

        argv, caveats = sglang.request_invocation(rope, serve_len=req.target, trained_len=trained,
                                                  text_config=text_config, model_name=model)
        return shlex.join(argv), caveats
    if fmt in HF_TRAINER_FORMATS:  # a bare request: a model whose max_position_embeddings is the original length
        from posenc_cli.trainers import hf as hf_trainers

        return hf_trainers.render(fmt, hf_trainers.TrainerInput(req, rope, max_position_embeddings(req), model))
    if fmt in ("llama.cpp", "llama-cpp-python"):
        from posenc_cli.engines import llamacpp

        arch = llamacpp.arch_name(facts.model_type) if facts is not None and facts.model_type else "ARCH"
        native = facts.params if facts is not None else {}
        stacked = llamacpp.stacking(native, group, gguf=gguf)
        if stacked is not None and gguf:
            raise llamacpp.NoEquivalent(stacked)
        f = llamacpp.flags(group, max_model_len=req.target, arch=arch, in_gguf=False)
        argv = f.argv if fmt == "llama.cpp" else llamacpp.python_server_argv(f.argv, model)
        caveats = list(f.warnings) + ([stacked] if stacked else [])
        if any(isinstance(v, dict) for v in rope.values()):  # one dict per layer type (Gemma 3)
            caveats.append("llama.cpp takes one set of rope flags for every layer and reads per-layer bases from "
                           "the GGUF (rope.freq_base_swa), which posenc does not model: these flags are the extended "
                           "group's; run posenc check on the GGUF")
        return shlex.join(argv), caveats
    raise PosencError(f"--format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")


def render_for_model(config: dict[str, Any], facts: ModelFacts, req: ScaleRequest, fmt: str,
                     model: str = "MODEL", *, gguf: bool = False) -> tuple[str, list[str]]:
    """What ``posenc scale --config`` prints for ``fmt``: for the hf formats the keys to merge into ``config``
    (in its nesting, only the extended layer group changed); for an engine its command line with the model's whole
    ``rope_parameters`` after the request (what vLLM and SGLang replace)."""
    if fmt in hf.FORMATS:
        return dumps_config(hf.fragment(config, req, fmt, facts.group)), []
    from posenc_cli.models.config_keys import ABSENT, text_config
    from posenc_cli.models.model_positions import describe
    from posenc_cli.models.remote_code import v5_refusal
    from posenc_cli.models.rope_dicts import rope_dicts

    # where the language model's config sits as the reader found it (a remote-code family: where its engine reads it)
    where = describe(config).text_source.removesuffix(ABSENT)
    if fmt in HF_TRAINER_FORMATS:
        from posenc_cli.models.model_types import generated
        from posenc_cli.trainers import hf as hf_trainers

        patched, _, at = text_config(hf.patch_config(config, req, "hf-v5", facts.group))
        # a composite config class keeps its text model in a sub-config even when the file is flat (Qwen2.5-VL)
        entry = generated()["models"].get(str(config.get("model_type") or ""))
        composite = ".".join(entry["path"]) if entry and entry.get("path") else ""
        return hf_trainers.render(fmt, hf_trainers.TrainerInput(
            req, dict(patched["rope_parameters"]), int(patched.get("max_position_embeddings") or
                                                      max_position_embeddings(req)), model,
            nested=at.removesuffix(ABSENT) or composite, before=dict(text_config(config)[0]),
            model_type=facts.model_type))
    if fmt in ("vllm", "sglang") and where not in ("", "text_config"):
        # --hf-overrides sets a dict-valued key whole: an override of `thinker_config` would replace the thinker's
        # whole config, not its text model's rope dict
        raise PosencError(f"this model keeps its text model in {where}; {fmt}'s --hf-overrides would replace "
                          f"{where.split('.')[0]} whole, so posenc writes no override for it: use --format hf and "
                          "serve the patched config.json")
    if v5_refusal(config):  # remote code reads transformers 4 keys: the whole rope as the v4 file resolves it
        dicts, nested = rope_dicts(hf.patch_config(config, req, "hf", facts.group))
        rope = dicts if nested else dicts[""]
    else:
        rope = text_config(hf.patch_config(config, req, "hf-v5", facts.group))[0]["rope_parameters"]
    return render(req, fmt, model, text_config=facts.text_config, rope=rope, facts=facts, gguf=gguf)


def render_request(req: ScaleRequest, fmt: str, config: dict[str, Any] | None = None, facts: ModelFacts | None = None,
                   model: str = "MODEL", *, gguf: bool = False) -> tuple[str, list[str]]:
    """What ``posenc scale --format fmt`` prints (stdout text, stderr caveats) for ``req``: on the model whose
    config dict and facts are given (``--config``), else for the bare request. ``posenc scale`` and
    ``posenc pick --trainer`` both render through here."""
    if config is not None and facts is not None:
        return render_for_model(config, facts, req, fmt, model, gguf=gguf)
    return render(req, fmt, model)
