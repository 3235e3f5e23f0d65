"""``posenc audit``: does an exported checkpoint's config.json carry the RoPE the model was trained with?

The training settings say what the trainer computed: a framework's own file, read by that framework's module (its
registry record's ``reads_back``: LLaMA-Factory's and axolotl's YAML, Megatron-LM's arguments, a torchtitan TOML,
each following the framework's own code), a posenc plan from ``posenc pick --json`` (its ``extension.config_v5``,
:func:`read_plan`), or the model config.json the run loaded (HF Trainer, TRL, Unsloth load it with transformers: the
rope groups and window :func:`posenc_cli.models.model_positions.describe` reads from it, :func:`read_hf_config`).
Each becomes one transformers 5 rope dict (``rope_theta`` inside; one per layer type for a per-layer-type model's
config.json) and the window (``max_position_embeddings``) the model should be served with: a
:class:`~posenc_cli.trainers.settings.TrainedWith`. Which framework's reader reads a file is the registry's business
(:mod:`posenc_cli.frameworks.audit`, a stage above).

:func:`audit` then reads the exported config as transformers 5 does
(:func:`~posenc_cli.models.model_positions.describe`),
computes both spectra with :func:`posenc_cli.rope.frequencies.compute` and reports every difference that changes the
numbers, each named by its kind, with the config that would be right, written by
:func:`posenc_cli.models.convert.with_rope`.

Stdlib, numpy (through ``frequencies``) and yaml only; YAML through ``yaml.safe_load``, TOML through ``tomllib``
(``tomli`` on Python 3.10).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.engines.runs import SAME_RTOL, relative_difference
from posenc_cli.errors import PosencError
from posenc_cli.files import check_values, parse_json_object, read_bytes, read_text
from posenc_cli.models.config_keys import text_config
from posenc_cli.models.convert import with_rope
from posenc_cli.models.facts import extended_group
from posenc_cli.models.lint import oldest_reader
from posenc_cli.models.model_positions import describe
from posenc_cli.models.sources import Source, checked_source
from posenc_cli.trainers.settings import TrainedWith

#: the settings audit reads itself: a posenc plan, and a model's config.json
PLAN, HF_CONFIG = "posenc-plan", "hf-config"

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


#: the top-level keys of a posenc plan (``posenc pick --json``)
PLAN_KEYS = {"encoding", "reason", "caveats", "hyperparameters", "extension", "test_plan", "tests", "tasks",
              "fallback", "rule", "why", "vetoed", "inputs", "plan", "rules_file", "warnings", "trainer"}


def read_plan(data: Mapping[str, Any], path: str) -> TrainedWith:
    """What a posenc plan (``posenc pick --json``) trained with: its ``extension.config_v5``."""
    unknown = sorted(set(data) - PLAN_KEYS)
    if unknown:
        raise PosencError(f"{path}: unknown key {unknown[0]!r}: a posenc plan is `posenc pick --json` output "
                          f"({', '.join(sorted(PLAN_KEYS))})")
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
    return TrainedWith(PLAN, f"posenc plan {path}", dict(rope), window if isinstance(window, int) else None,
                       source_window=source_window, source_theta=source_theta)


def read_hf_config(data: Mapping[str, Any], path: str) -> TrainedWith:
    """The config.json a run loaded: HF Trainer, TRL and Unsloth build the model from it with transformers, so the
    run computed what :func:`~posenc_cli.models.model_positions.describe` reads from it (every rope group; its
    window)."""
    checked_source(Source(dict(data), path, "file", path))
    model = describe(data)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{path}: not a RoPE model (posenc reads it as {model.family}); there is no rope to audit "
                          "a checkpoint against")
    if len(model.layers) == 1:
        rope: dict[str, Any] = dict(model.layers[0].params)
    else:
        rope = {layer.rope_key or layer.name: dict(layer.params) for layer in model.layers}
    return TrainedWith(HF_CONFIG, f"config.json {path}", rope, model.max_position_embeddings,
                       ["a model config: HF Trainer, TRL and Unsloth build the model from it with transformers, so the "
                    "run computed what transformers reads from it"])


# ---------------------------------------------------------------- comparing


@dataclass
class Audit:
    trained: TrainedWith
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
    from posenc_cli.models.record import rope_groups  # numpy
    from posenc_cli.rope.frequencies import compute

    model = describe(cfg)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"the exported config is not a RoPE model (posenc reads it as {model.family})")
    groups = rope_groups(model)
    chosen = next((g for g in groups if g.name == group), groups[0])
    freqs = compute(chosen.spec, seq_len, top_level=chosen.top_level)
    return freqs.inv_freq, freqs.attention_factor, model.max_position_embeddings


def _same(a: tuple[Any, float, int | None], b: tuple[Any, float, int | None], window: bool = True) -> bool:
    import numpy as np

    return bool(a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and a[1] == b[1]
                and (not window or a[2] == b[2]))


def _form(text: Mapping[str, Any]) -> str:
    return "v5" if isinstance(text.get("rope_parameters"), Mapping) and not text.get("rope_scaling") else "v4"


def _trained_groups(trained: TrainedWith, model: Any, label: str,
                    setattr_dict: bool) -> tuple[dict[str, dict[str, Any] | None], list[str]]:
    """The trained rope dict of each rope group of ``model`` (None: the training left that group as it was), and
    notes. A per-layer-type trained dict must name every group; a flat one on a model with several groups is the
    extended group's (the one already scaled, else full attention), except for axolotl, whose setattr of a flat
    dict fails there."""
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
    if setattr_dict:
        raise PosencError(f"{trained.label}: axolotl sets model_config's rope_parameters on the built config; a flat "
                          f"dict on this model's per-layer rope ({', '.join(keys.values())}) fails in transformers 5 "
                          f"(KeyError: {keys[names[0]]!r}): give one dict per layer type")
    chosen = extended_group(model).name
    others = [n for n in names if n != chosen]
    return ({n: dict(rope) if n == chosen else None for n in names},
            [f"the settings give one rope dict: compared with {chosen}; {', '.join(others)} compared with the "
             "checkpoint's own (the settings say nothing about them)"])


def audit(checkpoint_label: str, exported: Mapping[str, Any] | None, trained: TrainedWith,
          to: str | None = None, *, setattr_dict: bool = False) -> Audit:
    """Every difference between ``exported`` (None: no config.json) and ``trained`` that changes the served numbers,
    in every rope group, with the config that would be right (in the file's own transformers form, or ``to``).
    ``setattr_dict``: the framework sets a flat rope dict on the built config (its reader's
    :attr:`~posenc_cli.trainers.settings.Reader.setattr_dict`), which fails on a model with several rope groups."""
    if exported is None:
        return _without_config(checkpoint_label, trained, to)
    findings: list[Finding] = []
    text = text_config(exported)[0]
    window_raw = text.get("max_position_embeddings")
    if isinstance(window_raw, float):
        findings.append(Finding("float-window", "max_position_embeddings", window_raw, int(window_raw),
                                f"max_position_embeddings is {window_raw!r}, a float: transformers 5's config "
                                "classes refuse it (strict int field) and LLaMA-Factory writes it so"))
    model = describe(exported)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{checkpoint_label}: not a RoPE model (posenc reads it as {model.family})")
    per_group, notes = _trained_groups(trained, model, checkpoint_label, setattr_dict)
    trained.notes.extend(notes)
    form = to or _form(text)
    if form == "v5":
        _note_v5_only(exported, trained)
    window = trained.window if trained.window is not None else model.max_position_embeddings
    if window is None:
        raise PosencError(f"{checkpoint_label}: neither the config nor the training settings give a window")
    fixed: dict[str, Any] = dict(exported)
    for layer in model.layers:
        rope = per_group[layer.name] or dict(layer.params)
        fixed = with_rope(fixed, layer.rope_key, rope, window, form, head_dim=layer.head_dim or model.head_dim)
    found, numbers = _rope_findings(exported, fixed, model, per_group, window, form, trained, text)
    findings += found
    if trained.window is not None and model.max_position_embeddings != trained.window:
        findings.append(_window_finding(model, per_group, trained.window, window_raw))
    if not findings:
        return Audit(trained, checkpoint_label, [], None, None, None)
    return Audit(trained, checkpoint_label, findings, fixed, _rope_keys(fixed), numbers)


def _without_config(checkpoint_label: str, trained: TrainedWith, to: str | None) -> Audit:
    """A checkpoint without config.json: the one finding, and the keys a config needs (for one rope dict)."""
    finding = Finding("missing-config", "config.json", None, "config.json",
                      "the checkpoint has no config.json: nothing tells transformers or an engine the rope it was "
                      "trained with")
    missing = None
    flat = trained.rope is not None and not any(isinstance(v, Mapping) for v in trained.rope.values())
    if trained.rope is not None and trained.window is not None and flat:
        missing = with_rope({"max_position_embeddings": trained.window}, "", trained.rope, trained.window, to or "v5")
    return Audit(trained, checkpoint_label, [finding], None, missing, None)


def _note_v5_only(exported: Mapping[str, Any], trained: TrainedWith) -> None:
    """Say so when the config can be read only by transformers 5 (the form the right config is written in)."""
    oldest = oldest_reader(exported)
    if oldest is not None and int(oldest[0].split(".")[0]) >= 5:
        trained.notes.append(f"config.json needs transformers >= {oldest[0]} ({oldest[1]}): a transformers 4 "
                             "reader (and an engine built on one) sees neither its rope_theta nor its scaling; "
                             "--to v4 writes the keys both read")


def _rope_findings(exported: Mapping[str, Any], fixed: Mapping[str, Any], model: Any,
                   per_group: dict[str, dict[str, Any] | None], window: int, form: str, trained: TrainedWith,
                   text: Mapping[str, Any]) -> tuple[list[Finding], dict[str, Any] | None]:
    """Each rope group whose served numbers differ from the trained ones: the keys that make the difference, and
    what the first such difference does to the spectrum."""
    several = len(model.layers) > 1
    raw_all = text.get("rope_scaling") or text.get("rope_parameters") or {}
    raw_all = dict(raw_all) if isinstance(raw_all, Mapping) else {}
    findings: list[Finding] = []
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
    return findings, numbers


def _window_finding(model: Any, per_group: dict[str, dict[str, Any] | None], trained_window: int,
                    window_raw: Any) -> Finding:
    """The exported window is not the trained one (worse for dynamic NTK, which scales from it)."""
    if any((per_group[g.name] or g.params).get("rope_type") == "dynamic" for g in model.layers):
        return Finding(
            "dynamic-window", "max_position_embeddings", window_raw, trained_window,
            f"max_position_embeddings is {window_raw!r}; the model was trained with {trained_window}: dynamic NTK "
            f"keeps plain RoPE up to max_position_embeddings and scales from it, so served frequencies differ "
            f"from the trained ones (engines also cap the context there)")
    return Finding("window", "max_position_embeddings", window_raw, trained_window,
                   f"max_position_embeddings is {window_raw!r}; the model was trained for {trained_window} (engines "
                   "cap the context at this window)")


def _rope_keys(fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The right config's keys that carry positions, in its nesting: what to merge by hand."""
    fixed_text, _, where = text_config(fixed)
    keys = ("rope_theta", "rope_local_base_freq", "rope_scaling", "rope_parameters", "partial_rotary_factor",
            "max_position_embeddings")
    fragment: dict[str, Any] = {k: fixed_text[k] for k in keys if k in fixed_text}
    for key in reversed(where.split(".") if where else []):
        fragment = {key: fragment}
    return fragment


def _spectrum_difference(have: tuple[Any, float, int | None], want: tuple[Any, float, int | None]) -> dict[str, Any]:
    h, w = have[0], want[0]
    if h.shape == w.shape:
        rel = relative_difference(w, h)
        # two routes to the same numbers may differ by float32 rounding: those pairs do not count as differing
        out: dict[str, Any] = {"pairs": int(w.size), "pairs_differing": int((rel > SAME_RTOL).sum()),
                               "max_relative_difference": float(rel.max())}
    else:
        out = {"pairs": int(w.size), "exported_pairs": int(h.size)}
    return out | {"attention_factor_exported": have[1], "attention_factor_trained": want[1]}


_IGNORED = {"rope_type", "rope_theta"}


def _key_findings(exported: Mapping[str, Any], group: str, name: str | None, own: dict[str, Any],
                  raw: Mapping[str, Any], rope: Mapping[str, Any], window: int, form: str, seq_len: int, want: Any,
                  trained: TrainedWith, text: Mapping[str, Any]) -> list[Finding]:
    """Name each key whose exported value changes the numbers: put the trained value into the exported dict, one key
    at a time, and keep the keys that move the spectrum (a dropped key whose default is the trained value is no
    finding)."""
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
