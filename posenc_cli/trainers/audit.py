"""``posenc audit``: does an exported checkpoint's config.json carry the RoPE the model was trained with?

The training settings (a LLaMA-Factory or axolotl YAML, Megatron-LM arguments, a torchtitan TOML, a posenc plan
from ``posenc pick --json``, or the model config.json the run loaded) say what the trainer computed;
:func:`trained_rope` turns them into one transformers 5 rope dict (``rope_theta`` inside; one per layer type for
a per-layer-type model's config.json) and the window (``max_position_embeddings``) the model should be served
with, following what each framework's own code does (file and line references below):

* LLaMA-Factory 0.9.5 ``configure_rope`` (``model/model_utils/rope.py`` L35-84): factor
  ``float(ceil(cutoff_len / old))`` with ``old`` the base model's original length (its rope dict's
  ``original_max_position_embeddings``, else ``max_position_embeddings``); no scaling when ``cutoff_len <= old``;
  ``original_max_position_embeddings`` for dynamic and yarn, ``low_freq_factor 1.0, high_freq_factor 4.0`` for
  llama3; the window ``old * factor``.
* Megatron-LM (megatron-core 0.19.2 ``megatron/training/arguments.py``): ``--position-embedding-type rope|yarn``,
  ``--rotary-base``, ``--rotary-percent``, ``--rotary-seq-len-interpolation-factor`` (linear),
  ``--use-rope-scaling`` (llama3; the factor is always 8.0, ``--rope-scaling-factor`` never reaches the model:
  ``argument_utils.py`` L464, NVIDIA/Megatron-LM #6305), ``--rotary-scaling-factor`` and the ``--yarn-*``,
  ``--mscale``, ``--mscale-all-dim`` flags (defaults from ``_apply_yarn_config_from_args``: 4096, 32, 1, True);
  Megatron's YaRN attention factor is ``mscale(s, mscale) / mscale(s, mscale_all_dim)`` whatever the two are.
* axolotl 0.21: ``model_config`` (alias ``overrides_of_model_config``) is ``setattr`` on the built config: only a
  full ``rope_parameters`` (or ``rope_scaling``) dict with ``rope_type`` and ``rope_theta`` takes effect under
  transformers 5; a bare ``rope_theta`` is ignored.
* torchtitan 0.3: the rope lives in the model flavour (``models/llama3/__init__.py``: theta 500000, llama scaling
  factor 8, 1/4/8192, max_seq_len 131072); its HF save writes no config.json.
* a posenc plan: its ``extension.config_v5``.
* a model's config.json (HF Trainer, TRL, Unsloth: they load it with transformers): the rope groups and window
  :func:`posenc_cli.models.positions.describe` reads from it, the same reader as every command.

:func:`audit` then reads the exported config as transformers 5 does (:func:`posenc_cli.models.positions.describe`),
computes
both spectra with :func:`posenc_cli.rope.frequencies.compute` and reports every difference that changes the numbers,
each named by its kind, with the config that would be right, written by :func:`posenc_cli.models.convert.with_rope`.

Stdlib, numpy (through ``frequencies``) and yaml only; YAML through ``yaml.safe_load``, TOML through ``tomllib``
(``tomli`` on Python 3.10).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.files import check_values, parse_json_object, read_bytes, read_text

FRAMEWORKS = ("llama-factory", "megatron", "axolotl", "torchtitan", "posenc-plan", "hf-config")

#: Every kind of finding, with what it means (README and ``--json`` use these names).
KINDS = {
    "missing-config": "the checkpoint has no config.json (torchtitan's HF save writes none)",
    "source-config": "config.json is the original model's, not the trained one (Megatron-Bridge "
                     "save_hf_pretrained, torchtune copy it)",
    "dropped-keys": "rope keys the training used are missing from config.json",
    "reset-factor": "the factor is 2.0, LLaMA-Factory's inference/export value, not the trained one",
    "factor": "the factor differs from the trained one",
    "theta-lost-v5": "rope_parameters (transformers 5) carries another rope_theta than the trained one",
    "theta": "rope_theta differs from the trained one",
    "rope-type": "the rope type differs from the trained one",
    "changed-key": "a rope key has another value than the trained one",
    "float-window": "max_position_embeddings is a float, which transformers 5 refuses",
    "window": "max_position_embeddings differs from the trained window",
    "dynamic-window": "max_position_embeddings of a dynamic NTK model differs from the trained one: dynamic scales "
                      "from it, so the served frequencies are not the trained ones",
}

_LF_TYPES = ("linear", "dynamic", "yarn", "llama3")
#: Rope-ish words: a key or flag holding one of these that the framework does not have is an error (a typo, or a
#: setting the framework would itself reject or ignore).
_ROPE_WORDS = ("rope", "rotary", "yarn", "mscale", "theta")


@dataclass
class Trained:
    """What the trainer computed: ``rope`` (a transformers 5 rope dict, ``rope_theta`` inside; None: the training
    left the model's rope as it was) and ``window`` (None: not checked)."""

    framework: str
    label: str
    rope: dict[str, Any] | None
    window: int | None
    notes: list[str] = field(default_factory=list)
    source_window: int | None = None  # the length before training (a plan's "from"), when the settings say it
    source_theta: float | None = None


@dataclass
class Finding:
    """One mismatch; ``group``: the rope group (layer type) it is in, "" for a model with one rope."""

    kind: str
    key: str
    exported: Any
    trained: Any
    message: str
    group: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group or None, "key": self.key, "exported": self.exported,
                "trained": self.trained, "message": f"{self.group}: {self.message}" if self.group else self.message}


# ---------------------------------------------------------------- reading the training settings


def load_settings(path: str) -> tuple[str, Any]:
    """(format, parsed content) of a training-settings file: ``yaml``, ``toml``, ``json`` or ``args`` (a Megatron
    command line). Every failure is one PosencError."""
    p = Path(path)
    if p.is_dir():
        raise PosencError(f"--trained-with {path} is a folder; pass the training settings file")
    suffix = p.suffix.lower()
    if suffix == ".json":
        return "json", parse_json_object(read_bytes(path, f"--trained-with {path}"), path)
    text = read_text(path, f"--trained-with {path}")
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise PosencError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
        if not isinstance(data, dict):
            raise PosencError(f"{path}: expected a YAML mapping of settings, got {type(data).__name__}")
        check_values(data, path)  # YAML's .nan and .inf are no setting any trainer runs
        return "yaml", data
    if suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
            except ModuleNotFoundError:
                raise PosencError("reading a TOML file on Python 3.10 needs tomli: pip install tomli") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PosencError(f"{path}: not valid TOML: {exc}") from None
        check_values(data, path)  # TOML's nan and inf likewise
        return "toml", data
    return "args", text


def detect_framework(fmt: str, data: Any, path: str) -> str:
    """Which framework wrote a settings file (``--framework`` overrides this)."""
    if fmt == "args":
        return "megatron"
    if fmt == "toml":
        return "torchtitan"
    if fmt == "json":
        from posenc_cli.models.sources import MODEL_KEYS

        # a plan is `posenc pick --json` output; a file with model keys and no plan key is a model's config.json
        model_config = not set(data) & _PLAN_KEYS and any(k in data for k in MODEL_KEYS)
        return "hf-config" if model_config else "posenc-plan"
    axolotl = {"base_model", "sequence_len", "model_config", "overrides_of_model_config"} & set(data)
    llama_factory = {"model_name_or_path", "cutoff_len", "stage", "finetuning_type"} & set(data)
    if axolotl and not llama_factory:
        return "axolotl"
    if llama_factory and not axolotl:
        return "llama-factory"
    raise PosencError(f"{path}: cannot tell whether this YAML is LLaMA-Factory's or axolotl's; pass --framework")


def trained_rope(path: str, exported: Mapping[str, Any] | None, framework: str | None = None,
                 base: Mapping[str, Any] | None = None) -> Trained:
    """The rope and window the settings file ``path`` trained with. ``exported``: the checkpoint's config (None:
    missing), read for what the settings leave to the model (theta, the original length); ``base``: the base
    model's config when known (a local LLaMA-Factory ``model_name_or_path``), which wins over ``exported``."""
    fmt, data = load_settings(path)
    framework = framework or detect_framework(fmt, data, path)
    if framework not in FRAMEWORKS:
        raise PosencError(f"--framework {framework!r} is not known; use one of: {', '.join(FRAMEWORKS)}")
    want = {"llama-factory": "yaml", "axolotl": "yaml", "megatron": "args", "torchtitan": "toml",
            "posenc-plan": "json", "hf-config": "json"}[framework]
    if fmt != want:
        raise PosencError(f"{path}: {framework} settings are a {want} file, not {fmt}")
    if framework == "llama-factory":
        return _llama_factory(data, path, base if base is not None else exported)
    if framework == "posenc-plan":
        return _plan(data, path)
    if framework == "hf-config":
        return _hf_config(data, path)
    if framework == "megatron":
        return _megatron(data if isinstance(data, str) else "", path)
    if framework == "axolotl":
        return _axolotl(data, path, exported)
    return _torchtitan(data, path)


def _reject_rope_keys(data: Mapping[str, Any], known: set[str], path: str, what: str) -> None:
    for key in data:
        if key not in known and any(w in str(key).lower() for w in _ROPE_WORDS):
            raise PosencError(f"{path}: unknown key {key!r}: {what}")


def _positive_int(value: Any, name: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PosencError(f"{path}: {name} must be a positive whole number, got {value!r}")
    return value


def _model_rope(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], int | None, Mapping[str, Any]]:
    """(the flat rope dict as transformers 5 reads it, the window, the raw rope dict as written) of a config."""
    from posenc_cli.models.config_keys import text_config
    from posenc_cli.models.model_positions import describe

    model = describe(cfg)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"the config is not a RoPE model (posenc reads it as {model.family})")
    text = text_config(cfg)[0]
    raw = text.get("rope_scaling") or text.get("rope_parameters") or {}
    return dict(model.layers[0].params), model.max_position_embeddings, raw if isinstance(raw, Mapping) else {}


def _llama_factory(data: Mapping[str, Any], path: str, model_cfg: Mapping[str, Any] | None) -> Trained:
    _reject_rope_keys(data, {"rope_scaling"}, path, "LLaMA-Factory's only RoPE setting is rope_scaling "
                      "(linear, dynamic, yarn or llama3; hparams/model_args.py)")
    kind = data.get("rope_scaling")
    if kind is not None and kind not in _LF_TYPES:
        raise PosencError(f"{path}: rope_scaling {kind!r} is not one LLaMA-Factory takes; use one of: "
                          f"{', '.join(_LF_TYPES)}")
    if "export_dir" in data and not data.get("do_train"):
        raise PosencError(f"{path} is a LLaMA-Factory export settings file (export_dir, no do_train); pass the "
                          "training YAML: it says what the model was trained with")
    cutoff = _positive_int(data.get("cutoff_len", 2048), "cutoff_len", path)  # DataArguments' default
    label = f"LLaMA-Factory {path}"
    if kind is None:
        return Trained("llama-factory", label, None, None, ["no rope_scaling: LLaMA-Factory left the rope as it was"])
    if model_cfg is None:
        raise PosencError(f"{path}: LLaMA-Factory scales from the model's own length and theta, and the checkpoint "
                          "has no config.json to read them from")
    params, window, raw = _model_rope(model_cfg)
    orig = raw.get("original_max_position_embeddings")
    note = ""
    if isinstance(orig, (int, float)) and not isinstance(orig, bool):
        old = int(orig)
    else:
        old = window or 0
        factor = raw.get("factor")
        if base_is_exported(model_cfg, raw) and isinstance(factor, (int, float)) and factor > 1:
            old = int(round(old / factor))  # the window LLaMA-Factory itself raised from old * factor
            note = (f"the model's length before training is taken as {old} (max_position_embeddings / factor of a "
                    "config LLaMA-Factory scaled); pass --base with the base model's config to be sure")
    if not old:
        raise PosencError("the config has no max_position_embeddings for LLaMA-Factory to scale from")
    notes: list[str] = [note] if note else []
    if cutoff <= old:
        notes.append(f"cutoff_len {cutoff} <= the model's length {old}: LLaMA-Factory disabled rope scaling")
        return Trained("llama-factory", label, None, None, notes)
    factor = float(math.ceil(cutoff / old))
    rope: dict[str, Any] = {"rope_type": kind, "factor": factor}
    if kind in ("dynamic", "yarn", "llama3"):
        rope["original_max_position_embeddings"] = old
    if kind == "llama3":
        rope |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    rope["rope_theta"] = params["rope_theta"]
    if factor != cutoff / old:
        notes.append(f"LLaMA-Factory rounds the factor up: ceil({cutoff} / {old}) = {factor:g}")
    return Trained("llama-factory", label, rope, int(old * factor), notes, source_window=old)


def base_is_exported(cfg: Mapping[str, Any], raw: Mapping[str, Any]) -> bool:
    """Whether a config read for LLaMA-Factory's original length already carries a scaling (then its window is
    ``old * factor``, as LLaMA-Factory writes it)."""
    return raw.get("rope_type", raw.get("type")) in _LF_TYPES


_PLAN_KEYS = {"encoding", "reason", "caveats", "hyperparameters", "extension", "test_plan", "tests", "fallback",
              "rule", "why", "vetoed", "inputs", "plan", "rules_file", "warnings", "trainer"}


def _plan(data: Mapping[str, Any], path: str) -> Trained:
    unknown = sorted(set(data) - _PLAN_KEYS)
    if unknown:
        raise PosencError(f"{path}: unknown key {unknown[0]!r}: a posenc plan is `posenc pick --json` output "
                          f"({', '.join(sorted(_PLAN_KEYS))})")
    ext = data.get("extension")
    if not isinstance(ext, Mapping) or not isinstance(ext.get("config_v5"), Mapping):
        raise PosencError(f"{path}: the plan has no extension config (extension.config_v5): it keeps the model as "
                          "it is, so there is nothing to audit an export against")
    cfg = ext["config_v5"]
    if "text_config" in cfg and isinstance(cfg["text_config"], Mapping):
        cfg = cfg["text_config"]
    rope = cfg.get("rope_parameters")
    if not isinstance(rope, Mapping) or "rope_theta" not in rope:
        raise PosencError(f"{path}: extension.config_v5 has no flat rope_parameters with rope_theta (a per-layer-type "
                          "plan is not audited yet)")
    window = cfg.get("max_position_embeddings")
    inputs: Mapping[str, Any] = data["inputs"] if isinstance(data.get("inputs"), Mapping) else {}
    source_theta = inputs.get("theta") if isinstance(inputs.get("theta"), (int, float)) else None
    source_window = ext.get("from") if isinstance(ext.get("from"), int) else None
    return Trained("posenc-plan", f"posenc plan {path}", dict(rope), window if isinstance(window, int) else None,
                   source_window=source_window, source_theta=source_theta)


def _hf_config(data: Mapping[str, Any], path: str) -> Trained:
    """The config.json a run loaded: HF Trainer, TRL and Unsloth build the model from it with transformers, so the
    run computed what :func:`posenc_cli.models.positions.describe` reads from it (every rope group; its window)."""
    from posenc_cli.models.model_positions import describe
    from posenc_cli.models.sources import Source, checked_source

    checked_source(Source(dict(data), path, "file", path))
    model = describe(data)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{path}: not a RoPE model (posenc reads it as {model.family}); there is no rope to audit "
                          "a checkpoint against")
    if len(model.layers) == 1:
        rope: dict[str, Any] = dict(model.layers[0].params)
    else:
        rope = {layer.rope_key or layer.name: dict(layer.params) for layer in model.layers}
    return Trained("hf-config", f"config.json {path}", rope, model.max_position_embeddings,
                   ["a model config: HF Trainer, TRL and Unsloth build the model from it with transformers, so the "
                    "run computed what transformers reads from it"])


# Megatron-LM flags (megatron-core 0.19.2 megatron/training/arguments.py): name -> takes a value
_MEGATRON_FLAGS = {
    "--position-embedding-type": True, "--rotary-base": True, "--rotary-percent": True,
    "--rotary-seq-len-interpolation-factor": True, "--use-rope-scaling": False, "--rope-scaling-factor": True,
    "--rotary-interleaved": False, "--rotary-scaling-factor": True, "--mscale": True, "--mscale-all-dim": True,
    "--yarn-original-max-position-embeddings": True, "--yarn-beta-fast": True, "--yarn-beta-slow": True,
    "--yarn-correction-range-round-to-int": False, "--no-yarn-correction-range-round-to-int": False,
    "--rope-type": True, "--no-rope-fusion": False, "--max-position-embeddings": True, "--seq-length": True,
}


def _megatron_args(text: str, path: str) -> dict[str, str | bool]:
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise PosencError(f"{path}: cannot split the command line: {exc}") from None
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, inline = word.partition("=")
        if name not in _MEGATRON_FLAGS:
            if any(w in name for w in _ROPE_WORDS):
                raise PosencError(f"{path}: unknown Megatron-LM flag {name!r} (megatron-core 0.19.2 has "
                                  f"{', '.join(f for f in _MEGATRON_FLAGS if any(w in f for w in _ROPE_WORDS))})")
            continue
        if not _MEGATRON_FLAGS[name]:
            out[name] = True
            continue
        if eq:
            out[name] = inline
        elif i < len(words) and not words[i].startswith("--"):
            out[name] = words[i]
            i += 1
        else:
            raise PosencError(f"{path}: {name} needs a value")
    return out


def _number(args: Mapping[str, str | bool], name: str, default: float | None, path: str,
            integer: bool = False) -> float | None:
    value = args.get(name)
    if value is None:
        return default
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        kind = "a whole number (Megatron-LM parses it with type=int)" if integer else "a number"
        raise PosencError(f"{path}: {name} {value!r} is not {kind}") from None
    if not math.isfinite(number) or number <= 0:
        raise PosencError(f"{path}: {name} must be a positive number, got {value!r}")
    return float(number)


def _megatron(text: str, path: str) -> Trained:
    from posenc_cli.rope.attention_factors import yarn_mscale

    args = _megatron_args(text, path)
    kind = str(args.get("--position-embedding-type", "learned_absolute"))
    if kind not in ("rope", "yarn"):
        raise PosencError(f"{path}: --position-embedding-type is {kind!r}"
                          + (" (Megatron-LM's default)" if "--position-embedding-type" not in args else "")
                          + ": the run trained no RoPE posenc can audit (rope or yarn)")
    theta = _number(args, "--rotary-base", 10000.0, path, integer=True)
    assert theta is not None
    notes: list[str] = []
    rope: dict[str, Any]
    if kind == "yarn":
        factor = _number(args, "--rotary-scaling-factor", 1.0, path) or 1.0
        if factor <= 1:
            raise PosencError(f"{path}: --position-embedding-type yarn with --rotary-scaling-factor {factor:g}: "
                              "no scaling")
        mscale = _number(args, "--mscale", 1.0, path) or 1.0
        all_dim = float(str(args.get("--mscale-all-dim", "0")))
        rope = {"rope_type": "yarn", "factor": factor,
                "original_max_position_embeddings": int(_number(
                    args, "--yarn-original-max-position-embeddings", 4096, path, integer=True) or 4096),
                "beta_fast": _number(args, "--yarn-beta-fast", 32.0, path),
                "beta_slow": _number(args, "--yarn-beta-slow", 1.0, path),
                "truncate": "--no-yarn-correction-range-round-to-int" not in args}
        # Megatron: mscale(s, mscale) / mscale(s, mscale_all_dim), even when one of them is 0 (HF then ignores both)
        attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim)
        if mscale and all_dim:
            rope |= {"mscale": mscale, "mscale_all_dim": all_dim}
        elif not math.isclose(attention, yarn_mscale(factor), rel_tol=1e-12):
            rope["attention_factor"] = attention
            notes.append(f"Megatron's YaRN attention factor with --mscale {mscale:g} --mscale-all-dim {all_dim:g} "
                         f"is {attention:.6g}; transformers needs it as attention_factor")
    elif "--use-rope-scaling" in args:
        asked = _number(args, "--rope-scaling-factor", 8.0, path)
        rope = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0}
        if asked != 8.0:
            notes.append(f"Megatron-LM does not forward --rope-scaling-factor {asked:g} to the model "
                         "(argument_utils.py gpt_config_from_args, NVIDIA/Megatron-LM #6305): it trained with 8")
    elif "--rotary-seq-len-interpolation-factor" in args:
        rope = {"rope_type": "linear",
                "factor": _number(args, "--rotary-seq-len-interpolation-factor", None, path, integer=True)}
    else:
        rope = {"rope_type": "default"}
    rope["rope_theta"] = theta
    percent = _number(args, "--rotary-percent", 1.0, path)
    if percent is not None and percent != 1.0:
        if percent > 1:
            raise PosencError(f"{path}: --rotary-percent must be at most 1, got {percent:g}")
        rope["partial_rotary_factor"] = percent
        if kind == "yarn":
            notes.append("Megatron's YaRN rotates the whole head whatever --rotary-percent says (open PR "
                         "NVIDIA/Megatron-LM #7476); transformers will rotate only the given part")
    if "--rotary-interleaved" in args:
        notes.append("--rotary-interleaved: Megatron rotated adjacent pairs; transformers rotates halves, so the HF "
                     "export must permute the q/k weights (config.json cannot say which layout the weights have)")
    window = _number(args, "--max-position-embeddings", None, path, integer=True) or _number(
        args, "--seq-length", None, path, integer=True)
    return Trained("megatron", f"Megatron-LM arguments {path}", rope, int(window) if window else None, notes)


_AXOLOTL_ROPE = {"rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings",
                 "partial_rotary_factor"}


def _axolotl(data: Mapping[str, Any], path: str, exported: Mapping[str, Any] | None = None) -> Trained:
    if "rope_scaling" in data:
        raise PosencError(f"{path}: axolotl rejects a top-level rope_scaling (\"it should now be a key under "
                          "model_config\", utils/schemas/deprecated.py)")
    _reject_rope_keys(data, set(), path, "axolotl takes rope settings under model_config")
    over = data.get("model_config", data.get("overrides_of_model_config")) or {}
    if not isinstance(over, Mapping):
        raise PosencError(f"{path}: model_config must be a mapping, got {type(over).__name__}")
    _reject_rope_keys(over, _AXOLOTL_ROPE, path, f"model_config takes {', '.join(sorted(_AXOLOTL_ROPE))}")
    label = f"axolotl {path}"
    notes: list[str] = []
    window = _axolotl_window(data, over, exported, path)
    rope = over.get("rope_parameters") or over.get("rope_scaling")
    if rope is None:
        if "rope_theta" in over:
            notes.append("model_config: rope_theta alone is ignored under transformers 5 (axolotl 0.21): the model "
                         "trained with its checkpoint's theta")
        return Trained("axolotl", label, None, window, notes)
    if not isinstance(rope, Mapping):
        raise PosencError(f"{path}: model_config rope dict must be a mapping, got {rope!r}")
    rope = dict(rope)
    nested = {k: v for k, v in rope.items() if isinstance(v, Mapping)}
    if nested and len(nested) != len(rope):
        raise PosencError(f"{path}: model_config's rope dict mixes per-layer-type dicts ({', '.join(nested)}) with "
                          "flat keys; give one dict per layer type")
    for name, group in (nested or {"": rope}).items():
        where = f"model_config's rope dict{f' for {name}' if name else ''}"
        if "rope_type" not in group:
            raise PosencError(f"{path}: {where} has no rope_type; under transformers 5 axolotl fails with KeyError: "
                              "'rope_type' (write rope_type, not type)")
        if "rope_theta" not in group:
            if "rope_theta" not in over or nested:
                raise PosencError(f"{path}: {where} has no rope_theta; under transformers 5 the model is built with "
                                  "rope_theta None (TypeError): add rope_theta to it")
            rope["rope_theta"] = over["rope_theta"]
    if nested:
        rope = {name: dict(group) for name, group in nested.items()}
    if any(g.get("rope_type") == "dynamic" for g in (nested or {"": rope}).values()) and (
            window is not None and window == data.get("sequence_len")):
        notes.append(f"dynamic NTK under transformers 5 scales from the live config's max_position_embeddings, which "
                     f"axolotl raises to sequence_len ({window}) after building the model: the run trained plain RoPE "
                     f"up to {window}, and the export must carry max_position_embeddings {window}")
    return Trained("axolotl", label, rope, window, notes)


def _axolotl_window(data: Mapping[str, Any], over: Mapping[str, Any], exported: Mapping[str, Any] | None,
                    path: str) -> int | None:
    """The window axolotl 0.21 trains with: model_config's max_position_embeddings (set before the model is built),
    else the checkpoint's, raised to sequence_len when that is longer (loaders/model.py _adjust_model_config, after
    the model is built). None: neither is known."""
    given = over.get("max_position_embeddings")
    if given is not None:
        given = _positive_int(given, "model_config max_position_embeddings", path)
    elif exported is not None:
        from posenc_cli.models.config_keys import text_config

        value = text_config(exported)[0].get("max_position_embeddings")
        given = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    seq = data.get("sequence_len")
    if seq is not None:
        seq = _positive_int(seq, "sequence_len", path)
    if given is None or seq is None:
        return given if seq is None else seq
    return max(given, seq)


#: torchtitan 0.3 flavours' rope (models/llama3/__init__.py: every Llama 3 flavour; qwen3: plain, theta 1e6)
_TITAN_ROPE = {
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_theta": 500000.0}, 131072),
    "qwen3": ({"rope_type": "default", "rope_theta": 1000000.0}, None),
}


def _torchtitan(data: Mapping[str, Any], path: str) -> Trained:
    model = data.get("model")
    if not isinstance(model, Mapping) or "name" not in model:
        raise PosencError(f"{path}: no [model] name: cannot tell which torchtitan model trained")
    name = str(model["name"])
    if name not in _TITAN_ROPE:
        raise PosencError(f"{path}: torchtitan model {name!r} is not audited yet; known: {', '.join(_TITAN_ROPE)}")
    _reject_rope_keys(model, {"name", "flavor"}, path, "torchtitan sets RoPE in the model flavour's code, not the TOML")
    rope, window = _TITAN_ROPE[name]
    return Trained("torchtitan", f"torchtitan {path} ({name} {model.get('flavor', '')})".replace(" )", ")"),
                   dict(rope), window)


# ---------------------------------------------------------------- comparing


@dataclass
class Audit:
    trained: Trained
    checkpoint: str
    findings: list[Finding]
    fixed: dict[str, Any] | None  # the whole config that would be right (None: no config to patch, or no change)
    fragment: dict[str, Any] | None  # its rope keys: what to merge by hand
    numbers: dict[str, Any] | None  # what the mismatch does to the spectrum

    def as_dict(self) -> dict[str, Any]:
        t = self.trained
        return {"checkpoint": self.checkpoint, "trained_with": t.label, "framework": t.framework,
                "trained": {"rope_parameters": t.rope, "max_position_embeddings": t.window},
                "findings": [f.as_dict() for f in self.findings], "numbers": self.numbers,
                "config": self.fixed, "config_fragment": self.fragment, "notes": t.notes}


def _numbers(cfg: Mapping[str, Any], seq_len: int | None, group: str | None = None) -> tuple[Any, float, int | None]:
    """(inv_freq, attention factor, window) transformers 5 builds from ``cfg`` for the rope group named ``group``
    (default: the first), at ``seq_len``."""
    from posenc_cli.models.inspection import spec_for
    from posenc_cli.models.model_positions import describe
    from posenc_cli.rope.frequencies import compute

    model = describe(cfg)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"the exported config is not a RoPE model (posenc reads it as {model.family})")
    layer = next((g for g in model.layers if g.name == group), model.layers[0])
    freqs = compute(spec_for(model, layer), seq_len, top_level=model.top_level)
    return freqs.inv_freq, freqs.attention_factor, model.max_position_embeddings


def _same(a: tuple[Any, float, int | None], b: tuple[Any, float, int | None], window: bool = True) -> bool:
    import numpy as np

    return bool(a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and a[1] == b[1]
                and (not window or a[2] == b[2]))


def _form(text: Mapping[str, Any]) -> str:
    return "v5" if isinstance(text.get("rope_parameters"), Mapping) and not text.get("rope_scaling") else "v4"


def _trained_groups(trained: Trained, model: Any, label: str) -> tuple[dict[str, dict[str, Any] | None], list[str]]:
    """The trained rope dict of each rope group of ``model`` (None: the training left that group as it was), and
    notes. A per-layer-type trained dict must name every group; a flat one on a model with several groups is the
    extended group's (the one already scaled, else full attention), except for axolotl, whose setattr of a flat
    dict fails there."""
    from posenc_cli.models.facts import extended_group

    names = [g.name for g in model.layers]
    keys = {g.name: g.rope_key or g.name for g in model.layers}
    rope = trained.rope
    if rope is None:
        return dict.fromkeys(names), []
    if any(isinstance(v, Mapping) for v in rope.values()):
        missing = [n for n in names if keys[n] not in rope]
        unknown = sorted(set(rope) - set(keys.values()))
        if missing or unknown or len(names) < 2:
            raise PosencError(f"{trained.label} gives rope dicts for {', '.join(rope)}; {label} has rope groups "
                              f"{', '.join(keys.values()) if len(names) > 1 else '(one, flat)'}")
        return {n: dict(rope[keys[n]]) for n in names}, []
    if len(names) == 1:
        return {names[0]: dict(rope)}, []
    if trained.framework == "axolotl":
        raise PosencError(f"{trained.label}: axolotl sets model_config's rope_parameters on the built config; a flat "
                          f"dict on this model's per-layer rope ({', '.join(keys.values())}) fails in transformers 5 "
                          f"(KeyError: {keys[names[0]]!r}): give one dict per layer type")
    chosen = extended_group(model).name
    others = [n for n in names if n != chosen]
    return ({n: dict(rope) if n == chosen else None for n in names},
            [f"the settings give one rope dict: compared with {chosen}; {', '.join(others)} compared with the "
             "checkpoint's own (the settings say nothing about them)"])


def audit(checkpoint_label: str, exported: Mapping[str, Any] | None, trained: Trained, to: str | None = None) -> Audit:
    """Every difference between ``exported`` (None: no config.json) and ``trained`` that changes the served numbers,
    in every rope group, with the config that would be right (in the file's own transformers form, or ``to``)."""
    from posenc_cli.models.config_keys import text_config
    from posenc_cli.models.convert import with_rope
    from posenc_cli.models.model_positions import describe

    findings: list[Finding] = []
    if exported is None:
        findings.append(Finding("missing-config", "config.json", None, "config.json",
                                "the checkpoint has no config.json: nothing tells transformers or an engine the "
                                "rope it was trained with"))
        missing = None
        flat = trained.rope is not None and not any(isinstance(v, Mapping) for v in trained.rope.values())
        if trained.rope is not None and trained.window is not None and flat:
            missing = with_rope({"max_position_embeddings": trained.window}, "", trained.rope, trained.window,
                                to or "v5")
        return Audit(trained, checkpoint_label, findings, None, missing, None)
    text = text_config(exported)[0]
    window_raw = text.get("max_position_embeddings")
    if isinstance(window_raw, float):
        findings.append(Finding("float-window", "max_position_embeddings", window_raw, int(window_raw),
                                f"max_position_embeddings is {window_raw!r}, a float: transformers 5's config "
                                "classes refuse it (strict int field) and LLaMA-Factory writes it so"))
    model = describe(exported)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{checkpoint_label}: not a RoPE model (posenc reads it as {model.family})")
    per_group, notes = _trained_groups(trained, model, checkpoint_label)
    trained.notes.extend(notes)
    raw_all = text.get("rope_scaling") or text.get("rope_parameters") or {}
    raw_all = dict(raw_all) if isinstance(raw_all, Mapping) else {}
    form = to or _form(text)
    if form == "v5":
        from posenc_cli.models.lint import oldest_reader

        oldest = oldest_reader(exported)
        if oldest is not None and int(oldest[0].split(".")[0]) >= 5:
            trained.notes.append(f"config.json needs transformers >= {oldest[0]} ({oldest[1]}): a transformers 4 "
                                 "reader (and an engine built on one) sees neither its rope_theta nor its scaling; "
                                 "--to v4 writes the keys both read")
    window = trained.window if trained.window is not None else model.max_position_embeddings
    if window is None:
        raise PosencError(f"{checkpoint_label}: neither the config nor the training settings give a window")
    several = len(model.layers) > 1
    fixed: dict[str, Any] = dict(exported)
    for layer in model.layers:
        rope = per_group[layer.name] or dict(layer.params)
        fixed = with_rope(fixed, layer.rope_key, rope, window, form, head_dim=layer.head_dim or model.head_dim)
    numbers = None
    for layer in model.layers:
        name = layer.name if several else None
        # dynamic NTK is plain up to the window and scales past it: compared there too
        types = {layer.params.get("rope_type"), (per_group[layer.name] or {}).get("rope_type")}
        for seq_len in (window, 2 * window) if "dynamic" in types else (window,):
            want = _numbers(fixed, seq_len, name)
            have = _numbers(exported, seq_len, name)
            if not _same(have, want, window=False):
                break
        else:
            continue
        own = dict(layer.params)
        per_type = raw_all.get(layer.rope_key) if layer.rope_key else None
        raw: Mapping[str, Any] = per_type if isinstance(per_type, Mapping) else raw_all
        found = _key_findings(exported, layer.rope_key, name, own, raw, per_group[layer.name] or own,
                              model.max_position_embeddings or window, form, seq_len, want, trained, text)
        for finding in found:
            finding.group = layer.name if several else ""
        findings += found
        if numbers is None:
            numbers = _spectrum_difference(have, want) | ({"group": layer.name} if several else {})
    if trained.window is not None and model.max_position_embeddings != trained.window:
        dynamic = [g for g in model.layers if (per_group[g.name] or g.params).get("rope_type") == "dynamic"]
        if dynamic:
            findings.append(Finding(
                "dynamic-window", "max_position_embeddings", window_raw, trained.window,
                f"max_position_embeddings is {window_raw!r}; the model was trained with {trained.window}: dynamic NTK "
                f"keeps plain RoPE up to max_position_embeddings and scales from it, so served frequencies differ "
                f"from the trained ones (engines also cap the context there)"))
        else:
            findings.append(Finding("window", "max_position_embeddings", window_raw, trained.window,
                                    f"max_position_embeddings is {window_raw!r}; the model was trained for "
                                    f"{trained.window} (engines cap the context at this window)"))
    if not findings:
        return Audit(trained, checkpoint_label, [], None, None, None)
    fixed_text, _, where = text_config(fixed)
    keys = ("rope_theta", "rope_local_base_freq", "rope_scaling", "rope_parameters", "partial_rotary_factor",
            "max_position_embeddings")
    fragment: dict[str, Any] = {k: fixed_text[k] for k in keys if k in fixed_text}
    for key in reversed(where.split(".") if where else []):
        fragment = {key: fragment}
    return Audit(trained, checkpoint_label, findings, fixed, fragment, numbers)


def _spectrum_difference(have: tuple[Any, float, int | None], want: tuple[Any, float, int | None]) -> dict[str, Any]:
    import numpy as np

    from posenc_cli.engines.runs import SAME_RTOL

    h, w = have[0].astype(np.float64), want[0].astype(np.float64)
    if h.shape == w.shape:
        rel = np.abs(h - w) / w
        # two routes to the same numbers may differ by float32 rounding: those pairs do not count as differing
        out: dict[str, Any] = {"pairs": int(w.size), "pairs_differing": int((rel > SAME_RTOL).sum()),
                               "max_relative_difference": float(rel.max())}
    else:
        out = {"pairs": int(w.size), "exported_pairs": int(h.size)}
    return out | {"attention_factor_exported": have[1], "attention_factor_trained": want[1]}


_IGNORED = {"rope_type", "rope_theta"}


def _key_findings(exported: Mapping[str, Any], group: str, name: str | None, own: dict[str, Any],
                  raw: Mapping[str, Any], rope: Mapping[str, Any], window: int, form: str, seq_len: int, want: Any,
                  trained: Trained, text: Mapping[str, Any]) -> list[Finding]:
    """Name each key whose exported value changes the numbers: put the trained value into the exported dict, one key
    at a time, and keep the keys that move the spectrum (a dropped key whose default is the trained value is no
    finding)."""
    from posenc_cli.models.convert import with_rope

    def numbers_with(params: Mapping[str, Any]) -> Any:
        return _numbers(with_rope(exported, group, dict(params), window, form), seq_len, name)

    out: list[Finding] = []
    own_type, want_type = own.get("rope_type", "default"), rope.get("rope_type", "default")
    where = "rope_parameters" if _form(text) == "v5" else "rope_scaling"
    ours, theirs = own.get("rope_theta"), rope.get("rope_theta")
    # the original model's config: plain RoPE at (at most) the length training started from, and, where the
    # settings say it (a posenc plan), the theta it started from
    source_len = trained.source_window or rope.get("original_max_position_embeddings")
    if own_type == "default" and (want_type != "default" or trained.source_theta is not None) and (
            source_len is not None and window <= source_len) and (
            trained.source_theta is None or ours == trained.source_theta):
        what = f"{want_type} x{rope.get('factor', 1):g}" if want_type != "default" else "plain RoPE"
        theta = f", rope_theta {theirs:g} (config.json: {ours:g})" if ours != theirs else ""
        out.append(Finding("source-config", where, None, dict(rope),
                           f"config.json is the original model's: plain RoPE at window {window}, while the model "
                           f"was trained with {what}{theta}"))
        return out
    if ours != theirs:
        if _form(text) == "v5":
            lost = "rope_parameters has no rope_theta" if "rope_theta" not in raw else (
                f"rope_parameters says rope_theta {ours:g}")
            out.append(Finding("theta-lost-v5", "rope_theta", ours, theirs,
                               f"{lost}; transformers 5 reads {ours:g}, the model was trained with {theirs:g}"))
        else:
            out.append(Finding("theta", "rope_theta", ours, theirs,
                               f"rope_theta is {ours:g}; the model was trained with {theirs:g}"))
    if own_type != want_type:
        if own_type == "default":
            out.append(Finding("dropped-keys", where, None, dict(rope),
                               f"the rope scaling is gone: config.json says plain RoPE, the model was trained "
                               f"with {want_type} x{rope.get('factor', 1):g}"))
        else:
            out.append(Finding("rope-type", "rope_type", own_type, want_type,
                               f"rope_type is {own_type!r}; the model was trained with {want_type!r}"))
        return out  # every other key follows from the type
    keys = [k for k in dict.fromkeys([*rope, *own]) if k not in _IGNORED]
    own = {**own, "rope_theta": rope.get("rope_theta")}  # theta is reported above; each key is tried on its own
    have = numbers_with(own)
    for key in keys:
        trial = dict(own)
        if key in rope:
            trial[key] = rope[key]
        else:
            trial.pop(key, None)
        if _same(numbers_with(trial), have, window=False):
            continue
        ours, theirs = own.get(key), rope.get(key)
        if key not in raw and key in rope:
            out.append(Finding("dropped-keys", key, None, theirs,
                               f"{key} is missing (transformers then uses {_shown(ours)}); the model was trained "
                               f"with {_shown(theirs)}"))
        elif key == "factor":
            reset = ours == 2.0 and theirs != 2.0
            out.append(Finding("reset-factor" if reset else "factor", key, ours, theirs,
                               f"factor is {ours:g}" + (" (LLaMA-Factory's inference/export reset)" if reset else "")
                               + f"; the model was trained with {theirs:g}"))
        else:
            out.append(Finding("changed-key", key, ours, theirs,
                               f"{key} is {_shown(ours)}; the model was trained with {_shown(theirs)}"))
    return out


def _shown(value: Any) -> str:
    if value is None:
        return "its default"
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:  # a NaN the exported config holds: Python's spelling, in a message
        return repr(value)
