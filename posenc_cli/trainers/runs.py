"""What each training framework computes when it trains a model as shipped, in the shape of an engine run
(``(model, cfg, max_model_len, seq_len) -> EngineRun``, ``max_model_len`` the training length), for
``posenc check --trainers``.

Each runner calls the one function of :mod:`.trainers` or :mod:`.hf_trainers` that says what its framework computes
(the same one ``posenc scale --format`` refuses with), then posenc's frequency code on the rope dict that makes
transformers compute the same numbers:

* megatron: the Megatron-LM flags posenc renders for the model's rope (``posenc scale --format megatron``), or where
  it refuses, the one-to-one flags, through Megatron-LM's parsing (integers; the llama3 factor never forwarded; MLA's
  YaRN original length and betas unreachable) and Megatron-Core's rotary classes (for DeepSeek-V2/V3 and Kimi K2,
  MLA's, with its own softmax scale);
* megatron-bridge: ``AutoBridge.from_hf_pretrained`` on the config (its lossy import), then Megatron-Core;
* torchtitan, torchtune: the ``RoPE.Config`` / builder fields posenc renders, through their RoPE classes;
* trl, axolotl: transformers' modeling of the config as it is (neither changes the rope of a config it loads);
  trl refuses what its ``create_model_from_path`` cannot build with transformers' own classes (:func:`hf_loadable`);
* llamafactory: the same, with no ``rope_scaling`` key in the YAML (the key would replace the model's scaling: what
  it would train is measured in a note; a note also says where the key changes nothing, on a config LLaMA-Factory
  cannot scale);
* unsloth: ``FastLanguageModel.from_pretrained(max_seq_length=max_model_len)``: linear scaling past
  ``max_position_embeddings``, dynamic NTK static.

A framework that cannot train the model's rope gets a refusal whose verdict says why (cannot express, will not
start, not modelled), never numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import render
from posenc_cli.engines.runs import CANNOT_EXPRESS, NOT_MODELLED, EngineRun, GroupRun
from posenc_cli.trainers import frameworks as trainers
from posenc_cli.trainers import hf as hf_trainers

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import LayerRope, ModelPositions

Runner = Callable[["ModelPositions", "dict[str, Any]", int, "int | None"], EngineRun]
Setup = Callable[[trainers.Rope], "tuple[list[str], trainers.Trained, list[str]]"]

VERSIONS = {**trainers.VERSIONS, **hf_trainers.VERSIONS}
#: report order: the Megatron stack, the PyTorch-native ones, then the Hugging Face-based ones (scale's formats)
TRAINER_NAMES = (*render.TRAINER_FORMATS, *render.HF_TRAINER_FORMATS)


def _rope(model: ModelPositions, layer: LayerRope, max_model_len: int) -> trainers.Rope:
    from posenc_cli.models.inspection import spec_for

    spec = spec_for(model, layer)
    return trainers.Rope(dict(layer.params), spec.head_dim, spec.max_position_embeddings, max_model_len,
                         model.default_partial, model.text_model_type or model.model_type or "")


def _refused(name: str, max_model_len: int, verdict: str, why: str) -> EngineRun:
    return EngineRun(name, VERSIONS[name], max_model_len, [], [], refusal=f"{verdict}: {why}")


def _core(name: str, setup: Setup, attention_types: frozenset[str] = frozenset(),
          several_groups: str | None = None) -> Runner:
    """A runner for a framework with one rotary embedding per model (Megatron-LM's CLI, torchtitan, torchtune);
    ``attention_types``: model types whose attention (softmax scale included) the framework builds itself and posenc
    models (Megatron's MLA); ``several_groups``: why a model with several rope groups is not modelled, where the
    framework has a model-specific way to build them (else it cannot express them)."""

    def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
        if len(model.layers) != 1:
            groups = f"this model has {len(model.layers)} rope groups ({', '.join(g.name for g in model.layers)})"
            if several_groups is not None:
                return _refused(name, max_model_len, NOT_MODELLED, f"{several_groups}; {groups}")
            return _refused(name, max_model_len, CANNOT_EXPRESS,
                            f"{name} builds one rotary embedding per model; {groups}")
        layer = model.layers[0]
        rope = _rope(model, layer, max_model_len)
        if rope.model_type in trainers.MLA_TYPES and rope.model_type not in attention_types:
            # its rope and softmax scale come from the framework's own MLA model code (torchtitan's deepseek_v3 folds
            # YaRN's mscale into the softmax), not from the Llama-style rope posenc renders
            return _refused(name, max_model_len, NOT_MODELLED,
                            f"{rope.model_type} uses multi-latent attention, which {name} builds in its own model "
                            "code; posenc does not model it")
        if model.softmax_scale != 1.0 and rope.model_type not in attention_types:
            return _refused(name, max_model_len, NOT_MODELLED,
                            f"this model's attention scales the softmax by x{model.softmax_scale:.6g} "
                            f"({model.softmax_scale_reason or 'its attention module'}); posenc does not model "
                            f"{name}'s attention for it")
        try:
            invocation, trained, _ = setup(rope)
        except trainers.Refusal as refusal:
            return _refused(name, max_model_len, refusal.verdict, str(refusal))
        freqs = trained.freqs(rope, seq_len or max_model_len)
        softmax = trained.softmax_scale if trained.own_attention else model.softmax_scale * trained.softmax_scale
        group = GroupRun(layer.name, freqs.inv_freq, freqs.attention_factor, softmax)
        return EngineRun(name, VERSIONS[name], max_model_len, [group], invocation,
                         warnings=list(dict.fromkeys(trained.notes)), layout=trained.layout)

    return run


def _megatron(rope: trainers.Rope) -> tuple[list[str], trainers.Trained, list[str]]:
    """The flags posenc renders; where no flags reproduce transformers (llama3's constants, MLA's always-rounded
    YaRN), the one-to-one flags and what Megatron-Core trains with them (its fixed 1/4/8192, rounding); a refusal
    only where those cannot run either."""
    import shlex

    try:
        argv, trained, caveats = trainers.megatron_setup(rope)
    except trainers.Refusal as refusal:
        if refusal.verdict != CANNOT_EXPRESS:
            raise
        argv, trained, caveats = trainers.megatron_setup(rope, solve=False)
    return [shlex.join(argv)], trained, caveats


def _titan(rope: trainers.Rope) -> tuple[list[str], trainers.Trained, list[str]]:
    text, trained, caveats = trainers.torchtitan_setup(rope)
    trained.notes[:0] = caveats
    return [text], trained, caveats


def _tune(rope: trainers.Rope) -> tuple[list[str], trainers.Trained, list[str]]:
    text, trained, caveats = trainers.torchtune_setup(rope)
    if rope.params.get("rope_type") == "llama3" and trainers.fixed_llama3(rope.params) != rope.params:
        trained.notes.append("torchtune's Llama3ScaledRoPE takes only scale_factor: low_freq_factor/high_freq_factor/"
                             "original length are 1/4/8192")
    return text.splitlines(), trained, caveats


def _transformers_groups(model: ModelPositions, seq_len: int) -> list[GroupRun]:
    from posenc_cli.engines.transformers import groups_at

    return groups_at(model, seq_len)


def _llamafactory(model: ModelPositions, cfg: dict[str, Any], max_model_len: int,
                  seq_len: int | None = None) -> EngineRun:
    groups = _transformers_groups(model, seq_len or max_model_len)
    notes = []
    if len(model.layers) == 1 and model.max_position_embeddings:
        own = model.layers[0].params
        rope_type = own.get("rope_type", "default")
        if rope_type in hf_trainers.LLAMAFACTORY_TYPES and cfg and not hf_trainers.llamafactory_scales(cfg):
            notes.append(f"rope_scaling: {rope_type} in the YAML changes nothing here: LLaMA-Factory sets it on the "
                         f"top-level config, and transformers 4.x's {cfg.get('model_type')} config has no "
                         "rope_scaling that reaches the text model")
        elif rope_type in hf_trainers.LLAMAFACTORY_TYPES:
            configured = hf_trainers.llamafactory_configure(own, model.max_position_embeddings, max_model_len,
                                                            rope_type, cfg or None)
            if configured is not None:
                rope = _rope(model, model.layers[0], max_model_len)
                lf, window = configured  # LLaMA-Factory also sets max_position_embeddings, which dynamic reads
                theirs, ours = replace(rope, max_pos=window).freqs(lf), rope.freqs()
                off = hf_trainers.Difference(hf_trainers.inv_freq_off(theirs, ours),
                                             (theirs.attention_factor, ours.attention_factor))
                what = f"with rope_scaling: {rope_type} in the YAML, LLaMA-Factory replaces the model's scaling " \
                       f"with factor {lf['factor']:g} from {lf.get('original_max_position_embeddings', '')} " \
                       "(ceil(cutoff_len / original))"
                if not off.within():
                    notes.append(f"{what}: {off}")
                else:
                    notes.append(f"{what}: the same numbers")
    notes.append("LLaMA-Factory 0.9.5 trains the model's own rope when the YAML has no rope_scaling key")
    return EngineRun("llamafactory", VERSIONS["llamafactory"], max_model_len, groups,
                     [f"cutoff_len: {max_model_len}"], warnings=notes, layout="rotate-half")


def _axolotl(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    return EngineRun("axolotl", VERSIONS["axolotl"], max_model_len,
                     _transformers_groups(model, seq_len or max_model_len), [f"sequence_len: {max_model_len}"],
                     layout="rotate-half")


def hf_loadable(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """Why TRL 1.16.0's ``create_model_from_path`` cannot build this config with transformers' own classes, as
    (verdict, reason); None when it can. It loads ``AutoConfig`` by ``model_type`` (an unknown type loads only with
    ``trust_remote_code=True`` from the checkpoint's ``auto_map`` code), then takes ``getattr(transformers,
    architectures[0])``; where that is no transformers class it falls back to an Auto class, which may run the
    checkpoint's code: posenc runs neither, so those are not modelled."""
    from posenc_cli.models.model_types import generated

    data = generated()
    model_type = cfg.get("model_type")
    if model_type not in data["auto_config_types"]:  # None too: AutoConfig picks its class by model_type
        if "auto_map" in cfg:
            named = f"a {model_type} config class" if model_type else "config class for a file without model_type"
            return NOT_MODELLED, (f"transformers has no {named}: it loads only with trust_remote_code=True "
                                  "(model_init_kwargs), which runs the checkpoint's own code; posenc does not run it")
        return trainers.WILL_NOT_START, (f"transformers {data['transformers']} does not recognize model_type "
                                         f"{model_type} and the config has no auto_map: from_pretrained fails")
    architectures = cfg.get("architectures") or []
    if architectures and architectures[0] not in data["auto_model_classes"]:
        return NOT_MODELLED, (f"{architectures[0]} is no transformers class: TRL falls back to an Auto class (from "
                              "auto_map, or AutoModelForCausalLM), whose choice posenc does not model")
    return None


def _trl(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    unloadable = hf_loadable(cfg)
    if unloadable is not None:
        return _refused("trl", max_model_len, *unloadable)
    return EngineRun("trl", VERSIONS["trl"], max_model_len, _transformers_groups(model, seq_len or max_model_len),
                     [f"max_length={max_model_len}"], layout="rotate-half")


def _unsloth(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    name = "unsloth"
    if len(model.layers) != 1:
        return _refused(name, max_model_len, NOT_MODELLED,
                        f"posenc models Unsloth's Llama rotary, one rope per model; this model has {len(model.layers)}"
                        " rope groups")
    layer = model.layers[0]
    rope = _rope(model, layer, max_model_len)
    own_type = layer.params.get("rope_type", "default")
    if own_type not in ("default", "linear", "dynamic", "yarn", "llama3"):
        return _refused(name, max_model_len, NOT_MODELLED,
                        f"Unsloth computes {own_type} with its own rotary class, which posenc does not model")
    if rope.freqs().inv_freq.size * 2 != rope.head_dim:
        return _refused(name, max_model_len, NOT_MODELLED,
                        "Unsloth's plain rotary ignores partial_rotary_factor; posenc does not model partial rotary "
                        "for it")
    trained, notes = hf_trainers.unsloth_rope(layer.params, rope.max_pos, max_model_len, model.text_model_type)
    freqs = rope.freqs(trained, seq_len=seq_len or max_model_len)
    group = GroupRun(layer.name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale)
    return EngineRun(name, VERSIONS[name], max_model_len, [group],
                     [f"FastLanguageModel.from_pretrained(MODEL, max_seq_length={max_model_len})"], warnings=notes,
                     layout="rotate-half")


def registry() -> dict[str, Runner]:
    """Trainer name (``posenc scale --format`` names) -> runner, in report order."""
    return {"megatron": _core("megatron", _megatron, trainers.MLA_TYPES),
            # Bridge's Gemma 3/4 providers build local and global rope (rotary_base = (local, global))
            "megatron-bridge": _core("megatron-bridge", trainers.bridge_setup, several_groups=(
                "Megatron-Bridge builds per-layer rope in model-specific providers (Gemma 3/4: rotary_base "
                "(local, global)), which posenc does not model")),
            "torchtitan": _core("torchtitan", _titan), "torchtune": _core("torchtune", _tune),
            "llamafactory": _llamafactory, "axolotl": _axolotl, "unsloth": _unsloth, "trl": _trl}
