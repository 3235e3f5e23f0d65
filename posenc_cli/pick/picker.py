"""``posenc pick``: gather the facts, run the decision rules, and fill in the exact numbers (stdlib only).

Any config block in the answer comes from :mod:`posenc_cli.rope.scaling`, the code behind ``posenc scale``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, NamedTuple

from posenc_cli.engines import hf
from posenc_cli.errors import PosencError
from posenc_cli.models.extension import extend
from posenc_cli.pick.planning import plan
from posenc_cli.pick.rules import Trace, decide, extension_factor, load_rules, render
from posenc_cli.pick.rules_schema import Rule, RulesError, RuleSet
from posenc_cli.rope import scaling
from posenc_cli.rope.scaling import ScaleRequest
from posenc_cli.rope.slopes import MAX_HEADS, alibi_slope_list
from posenc_cli.units import format_length

EXTRAPOLATION = ("none", "moderate", "strong")
DEFAULT_HEADS = 32


class PickInputs(NamedTuple):
    ctx: int
    trained_ctx: int | None = None
    extrapolation: str = "none"
    budget: int = 0
    config: str | None = None
    head_dim: int | None = None
    heads: int | None = None
    theta: float | None = None
    rules: str | None = None
    typical_ctx: int | None = None


def gather_facts(inp: PickInputs) -> tuple[dict[str, Any], float | None, Any]:
    """Input facts for the rules, the existing model's partial rotary factor, and its scaling facts (or None)."""
    if inp.extrapolation not in EXTRAPOLATION:
        raise PosencError(f"{{extrapolation}} {inp.extrapolation!r} is not known; use one of: "
                          f"{', '.join(EXTRAPOLATION)}", "extrapolation")
    if inp.budget < 0:
        raise PosencError(f"{{budget}} must not be negative, got {inp.budget}", "budget")
    if inp.heads is not None and not 1 <= inp.heads <= MAX_HEADS:
        raise PosencError(f"{{heads}} must be a positive integer up to {MAX_HEADS}, got {inp.heads}", "heads")
    if inp.head_dim is not None:
        scaling.check_head_dim(inp.head_dim)
    if inp.theta is not None:
        scaling.check_theta(inp.theta)
    facts: dict[str, Any] = {"ctx": inp.ctx, "budget": inp.budget, "extrapolation": inp.extrapolation,
                             "existing": inp.config is not None, "model_encoding": "none",
                             "model_rope_type": "none", "original_ctx": 0, "model_scaled": False,
                             "typical_ctx": inp.typical_ctx or 0, "yarn_remapped": False, "model_keepable": True,
                             "model_replaceable": True, "served_ctx": 0}
    if inp.typical_ctx is not None and not 1 <= inp.typical_ctx <= inp.ctx:
        raise PosencError(f"{{typical_ctx}} must be between 1 and {{ctx}} ({inp.ctx}), got {inp.typical_ctx}",
                          "typical_ctx", "ctx")
    theta, head_dim, heads, trained, prf = inp.theta, inp.head_dim, inp.heads, inp.trained_ctx, None
    model_facts: Any = None
    source: Any = None
    if inp.config is not None:
        # the model reader loads only for --config: it is a third of pick's start-up (tests/test_layout.py lists
        # these as the deliberate light lazy imports)
        from posenc_cli.models.facts import model_facts as facts_of
        from posenc_cli.models.rope_dicts import REMAPS_YARN
        from posenc_cli.models.sources import describe_source, read_source

        source = read_source(inp.config)
        model = describe_source(source)
        facts["model_encoding"] = model.family
        facts["yarn_remapped"] = (model.text_model_type or model.model_type) in REMAPS_YARN
        head_dim = head_dim or model.head_dim
        heads = heads or model.num_heads
        if model.family == "rope" and model.layers:
            # per-layer rope (Gemma 3: sliding and full attention): the scaled group, else full attention, is the
            # one an extension changes; the others keep their settings (models.extended_group)
            model_facts = facts_of(model, source.label, cfg=source.config)
            params = model_facts.params
            for name, given, own in (("theta", inp.theta, model_facts.theta),
                                     ("head_dim", inp.head_dim, model_facts.head_dim)):
                if given is not None and own is not None and given != own:
                    raise PosencError(f"{{{name}}} {given:g} differs from the model's own {own:g}; pick extends the "
                                      f"model as it is (leave {{{name}}} out, or drop {{config}} for a new model)",
                                      name, "config")
            head_dim = model_facts.head_dim or head_dim
            facts["model_rope_type"] = params["rope_type"]
            facts["model_keepable"] = params["rope_type"] in KEEP
            # extension.extend refuses to replace a rope type posenc does not write; the rules must not ask it to
            facts["model_replaceable"] = params["rope_type"] in set(scaling.METHODS.values())
            facts["model_scaled"] = params["rope_type"] != "default"
            theta = model_facts.theta
            prf = params.get("partial_rotary_factor")
            if model.max_position_embeddings:
                # the length it was trained at (its window, unless the reach past it is training-free): the rules'
                # caps measure the jump from there, as scale's warnings do
                if trained is None:
                    trained = model_facts.trained or model_facts.native or model.max_position_embeddings
                facts["original_ctx"] = model_facts.original or 0
                facts["served_ctx"] = model_facts.native or 0
        elif trained is None:
            trained = model.max_position_embeddings
        if trained is None:
            raise PosencError(f"{inp.config} names no trained length (BLOOM-style configs omit it): pass "
                              "{trained_ctx}", "trained_ctx")
    facts["trained_ctx"] = trained if trained is not None else inp.ctx
    facts["head_dim"] = int(head_dim or scaling.DEFAULT_HEAD_DIM)
    facts["heads"] = heads or DEFAULT_HEADS
    # what neither the command line nor a model gave, so the plan's numbers rest on posenc's defaults (said in the plan)
    facts["assumed"] = {k: facts[k] for k, given in (("head_dim", head_dim), ("heads", heads)) if not given}
    facts["theta"] = float(theta or 0.0)
    return facts, (float(prf) if prf is not None else None), (model_facts, source)


def _test_spec(item: dict[str, Any], facts: dict[str, Any], deployed: int | None = None) -> dict[str, Any]:
    """One test of the plan as data (for a harness): lengths in tokens, thresholds as fractions. ``deployed``: the
    length a ``--typical-ctx`` answer serves, which replaces ``ctx`` as a test length (it tests what it deploys)."""
    (kind, spec), = item.items()
    if kind == "text":
        return {"kind": "text", "text": render(str(spec), facts)}
    out: dict[str, Any] = {"kind": kind}
    for key, value in spec.items():
        out[key] = _length(value, facts, deployed) if key in ("length", "baseline") else float(value)
    return out


def _length(name: str, facts: dict[str, Any], deployed: int | None) -> int:
    return deployed if deployed is not None and name == "ctx" else int(facts[name])


def _test_line(item: dict[str, Any], facts: dict[str, Any], deployed: int | None = None) -> str:
    (kind, spec), = item.items()
    if kind == "niah":
        n = _length(spec["length"], facts, deployed)
        label = ""
        if spec["length"] == "ctx":
            label = (", the length deployed for --typical-ctx" if deployed is not None
                     else ", the full target length")
        return (f"needle-in-a-haystack at {format_length(n)} ({n:,} tokens{label}), needles at "
                f"every depth: pass rate >= {spec['pass_rate']:.0%}")
    if kind == "perplexity":
        n, base = _length(spec["length"], facts, deployed), _length(spec["baseline"], facts, deployed)
        return (f"perplexity at {format_length(n)} within {spec['margin']:.0%} of the model's own perplexity at "
                f"{format_length(base)}")
    if kind == "regression":
        n = _length(spec["length"], facts, deployed)
        return (f"short-context regression: perplexity and task scores at {format_length(n)} with the change within "
                f"{spec['margin']:.0%} of the model without it")
    return render(str(spec), facts)


#: What "keep the model's own scaling" becomes, per rope type of the model; other types are not extended
#: (the rules see ``model_keepable``): a yarn dict would drop dynamic's growth or proportional's full-width
#: frequencies.
KEEP = {"none": "yarn", "default": "yarn", "yarn": "yarn", "llama3": "llama3", "linear": "linear"}


#: What an answer must say when it serves dynamic NTK: engines do not agree on it (engines/vllm.py, sglang.py,
#: llamacpp.py), so no rule, shipped or custom, recommends it without this.
DYNAMIC_CAVEAT = ("Engines differ on dynamic NTK: transformers grows the base with each sequence's length, while vLLM "
                  "and SGLang compute one static base when they load the model and use it at every length (vLLM's "
                  "from max_trained_positions, which `posenc scale dynamic --engine vllm` sets), and llama.cpp has no "
                  "dynamic NTK at all (it runs plain RoPE); `posenc check` compares them.")


def _targets(rule: Rule, facts: dict[str, Any]) -> tuple[int, int] | None:
    """(the length the rule's extension deploys, the length its factor reaches): they differ when a training-free
    static scaling is sized for ``--typical-ctx``; None without an extension."""
    ext = rule.body.get("extension")
    if ext is None:
        return None
    factor = extension_factor(rule, facts)
    assert factor is not None
    trained = int(facts["trained_ctx"])
    full = target = int(round(trained * factor))
    if facts["typical_ctx"] and not ext.get("fine_tune", False):
        # static scaling costs short prompts: size the factor for the typical request (the Qwen cards' advice)
        target = max(min(target, int(facts["typical_ctx"])), trained)
    return target, full


class PlanRequests(NamedTuple):
    """The requests behind a plan's extension (for ``pick --trainer``). ``served`` is the one ``extension.config``
    and ``extension.command`` carry; ``trained`` is the rope the plan's fine-tuning stages train with, ``trained_argv``
    the ``posenc scale`` command that gives it: the served one, except for an ABF plan that stops short of the
    target (plain RoPE at the raised theta is trained, the yarn jump on top is training-free)."""

    served: ScaleRequest
    trained: ScaleRequest
    trained_argv: list[str]


def scale_argv(method: str, flags: list[str], source: Any, head_dim: int, prf: float | None) -> list[str]:
    """The ``posenc scale`` command for ``flags``: on the model as the user named it, else with the head dim (and
    partial rotary factor) a bare request needs."""
    if source is not None:
        return ["posenc", "scale", method, "--config", inputs_config(source), *flags]
    argv = ["posenc", "scale", method, *flags, "--head-dim", str(head_dim)]
    return argv + (["--partial-rotary-factor", f"{prf:g}"] if prf is not None else [])


def plain_request(facts: dict[str, Any], length: int, theta: float, prf: float | None,
                  model: Any = None) -> tuple[ScaleRequest, list[str]]:
    """Plain RoPE at ``theta`` with window ``length`` and its ``posenc scale`` command (ntk x1 is exactly
    "rope_theta, no scaling"): what a new model pre-trains with, and an ABF plan's stages."""
    if model is not None:
        req = extend("ntk", model, original_max=length, factor=1.0, theta=theta, notes=[])
    else:
        req = extend("ntk", None, original_max=length, factor=1.0, theta=theta, head_dim=int(facts["head_dim"]),
                     partial_rotary_factor=prf)
    return req, ["--original-max", format_length(length), "--factor", "1", "--theta", f"{theta:g}"]


class _Built(NamedTuple):
    """An extension's request, the ``posenc scale`` flags that give its numbers, and (ABF with a jump on top) the
    request its stages train, with its flags."""

    req: ScaleRequest
    flags: list[str]
    note: str | None
    trained_req: ScaleRequest | None = None
    trained_flags: list[str] = []


def _extension(rule: Rule, facts: dict[str, Any], hyper: dict[str, Any], prf: float | None,
               model: Any, source: Any, targets: tuple[int, int]) -> tuple[dict[str, Any], PlanRequests] | None:
    """The rule's extension as the answer's ``extension`` entry and the requests a plan trains and serves; None
    when the target needs no extension."""
    ext = rule.body["extension"]
    method = _method(rule, ext["method"], facts["model_rope_type"])
    theta = facts["theta"] or hyper.get("theta") or scaling.DEFAULT_THETA
    target, full = targets
    if target <= int(facts["trained_ctx"]):
        return None
    fine_tune = bool(ext.get("fine_tune", False))
    if method == "abf":
        built = _abf(ext, facts, target, float(facts["theta"] or theta), prf, model)
    else:
        built = _scaled(method, facts, target, float(theta), prf, model, fine_tune)
        built = built._replace(note=_typical_note(ext, facts, target, full))
    req, flags = built.req, built.flags
    v4, v5 = hf.format_hf(req), hf.format_hf_v5(req)
    config, config_format = v4, "hf"
    if model is not None:
        config_format = hf.own_format(model)
        config = hf.fragment(source.config, req, config_format, model.group)
    elif method != "abf":
        flags = ["--original-max", format_length(req.original_max), "--target", format_length(req.target),
                 "--theta", f"{req.theta:g}"]
    given = source if model is not None else None
    argv = scale_argv(req.method, flags, given, req.head_dim, prf)
    if req.fine_tuned:
        argv.append("--fine-tuned")
    requests = PlanRequests(req, req, argv) if built.trained_req is None else PlanRequests(
        req, built.trained_req, scale_argv(built.trained_req.method, built.trained_flags, given, req.head_dim, prf))
    trained = int(facts["trained_ctx"])
    abf = ext["method"] == "abf"
    written = given is not None and given.kind == "gguf"
    return {
        "method": ext["method"] if abf else req.method,
        "factor": target / trained if abf else req.factor,
        "from": trained if abf else req.original_max,
        "to": req.target,
        "fine_tune": fine_tune,
        "fine_tune_tokens": render(str(ext.get("tokens", "none")), facts),
        "note": built.note,
        "config": config,
        "config_format": config_format,
        "config_v4": v4,
        "config_v5": v5,
        # a GGUF carries its rope in its header: the command writes a new GGUF (a trainer's runs read the config keys)
        "command": shlex.join([*argv, "-o", NEW_GGUF] if written else argv),
        "output": NEW_GGUF if written else None,
        "warnings": scaling.warnings_for(req),
    }, requests


def _method(rule: Rule, method: str, rope_type: str) -> str:
    """The rule's extension method; ``keep`` is the model's own family, its factor multiplied by the jump
    (llama3 stays llama3, ...: :func:`posenc_cli.models.extension.extend`)."""
    if method != "keep":
        return method
    if rope_type not in KEEP:
        raise RulesError(f"rule {rule.id!r} extends with 'keep', which posenc cannot do for rope_type "
                         f"{rope_type!r}; add the condition model_keepable == true")
    return KEEP[rope_type]


def _typical_note(ext: dict[str, Any], facts: dict[str, Any], target: int, full: int) -> str | None:
    """The rule's note; for a static scaling sized for --typical-ctx, what that costs."""
    if target < full:
        return (f"Sized for --typical-ctx {format_length(target)}: static scaling costs short prompts (the Qwen "
                f"cards set the factor to the length needed), so this serves up to {format_length(target)}; "
                f"longer requests need the config for {format_length(full)}. vLLM, SGLang and llama.cpp apply it "
                "to every request alike.")
    return render(str(ext["note"]), facts) if ext.get("note") else None


def _scaled(method: str, facts: dict[str, Any], target: int, theta: float, prf: float | None, model: Any,
            fine_tune: bool) -> _Built:
    """A scaling from the trained length to ``target``, on the model or on the planned new one."""
    trained = int(facts["trained_ctx"])
    flags: list[str] = ["--target", format_length(target)]
    if model is None:
        return _Built(extend(method, None, original_max=trained, target=target, theta=theta,
                             head_dim=int(facts["head_dim"]), partial_rotary_factor=prf, fine_tuned=fine_tune),
                      flags, None)
    # --trained-ctx other than the model's window: the user says the checkpoint was trained elsewhere (and the
    # "same numbers" command must say so too)
    # a target short of a training-free window (a card-patched file asked for less): the scaling for it, from the
    # trained length, as on the file it was patched from
    explicit = trained != (model.trained or model.native) or target < (model.native or 0)
    req = extend(method, model, target=target, fine_tuned=fine_tune, original_max=trained if explicit else None)
    if explicit:
        flags += ["--original-max", format_length(trained)]
    return _Built(req, flags, None)


def _abf(ext: dict[str, Any], facts: dict[str, Any], target: int, old_theta: float, prf: float | None,
         model: Any) -> _Built:
    """Adjusted base frequency: rope_theta raised to theta_stage, the window set to the length the plan trains
    to, and a training-free yarn jump on top when the plan stops short of the target; built as the plain request
    from the trained window (ntk x1 is exactly "rope_theta, no scaling")."""
    window, new_theta = int(facts["train_to"]), float(facts["theta_stage"])
    method = "yarn" if target > window else "ntk"
    shape: dict[str, Any] = {"target": target} if method == "yarn" else {"factor": 1.0}
    flags = ["--original-max", format_length(window),
             *(["--target", format_length(target)] if method == "yarn" else ["--factor", "1"]),
             "--theta", f"{new_theta:g}"]
    if model is not None:
        req = extend(method, model, original_max=window, theta=new_theta, notes=[], **shape)
    else:
        req = extend(method, None, original_max=window, theta=new_theta, head_dim=int(facts["head_dim"]),
                     partial_rotary_factor=prf, **shape)
    said = [f"ABF: rope_theta {old_theta:g} -> {new_theta:g}, trained in stages up to {format_length(window)}"]
    if facts["model_scaled"]:
        said.append(f"this replaces the model's own {facts['model_rope_type']} scaling")
    if target > window:
        said.append(f"a training-free yarn x{target / window:g} on top serves {format_length(target)}")
    note = "; ".join(said) + (". The config below is the final one (each stage sets max_position_embeddings to "
                              "its own length)") + (", with that jump." if target > window else ".")
    if ext.get("note"):
        note += " " + render(str(ext["note"]), facts)
    if target <= window:
        return _Built(req, flags, note)
    return _Built(req, flags, note, *plain_request(facts, window, new_theta, prf, model))


#: the GGUF an extension of a GGUF writes (``posenc scale ... --config MODEL.gguf -o NEW.gguf``)
NEW_GGUF = "NEW.gguf"


def inputs_config(source: Any) -> str:
    """How the "same numbers" command names the model: as the user gave it (a path, a Hub id), ``-`` for stdin."""
    if source.kind == "stdin":
        return "-"
    return str(source.hub_id) if source.kind == "hub" and source.hub_id else str(source.label)


def _hyper_value(value: Any, facts: dict[str, Any]) -> Any:
    """A lone ``{fact}`` keeps the fact's number (so JSON gets 1000000, not "1e+06"); other text is rendered."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", value)
    if match and isinstance(facts.get(match.group(1)), (int, float)) and not isinstance(facts[match.group(1)], bool):
        number = facts[match.group(1)]
        return int(number) if float(number).is_integer() else number
    return render(value, facts)


class PickResult(NamedTuple):
    answer: dict[str, Any]
    traces: list[Trace]
    rules: RuleSet
    facts: dict[str, Any]  # every fact the rules saw (inputs, plan, derived), for --explain and tests
    requests: PlanRequests | None = None  # the extension's requests (None without an extension)
    model: Any = None  # the existing model's facts (ModelFacts) and source (sources.Source), for renderings
    source: Any = None
    partial_rotary_factor: float | None = None


def pick(inp: PickInputs) -> PickResult:
    """Run the policy on ``inp`` and return the five-part answer (JSON-ready) with the rule trace."""
    rules = load_rules(inp.rules)
    facts, prf, (model, source) = gather_facts(inp)
    facts.update(plan(rules, facts))
    facts = rules.facts(facts)
    facts["alibi_slopes"] = ", ".join(f"{s:.6g}" for s in alibi_slope_list(int(facts["heads"])))
    facts["model"] = shlex.quote(inputs_config(source)) if source is not None else "MODEL"
    rule, traces = decide(rules, facts)
    hyper = {k: _hyper_value(v, facts) for k, v in (rule.body.get("hyperparameters") or {}).items()}
    targets = _targets(rule, facts)
    built = _extension(rule, facts, hyper, prf, model, source, targets) if targets else None
    extension, requests = built if built is not None else (None, None)
    reason = render(rule.body["reason"], facts)
    items: list[dict[str, Any]] = list(rule.body["test_plan"])
    deployed: int | None = None
    if targets is not None and targets[0] < targets[1]:
        # sized for --typical-ctx: the plan tests the length it deploys, and the full length is a later gate
        deployed, full = targets
        items.append({"text": f"Before longer requests get the config for {format_length(full)}: a needle test at "
                              f"{format_length(full)} ({full:,} tokens) with that config."})
        if extension is None:
            # nothing changes: a regression check of the model against itself could not fail
            items = [item for item in items if "regression" not in item]
            reason += (f" Sized for --typical-ctx {format_length(int(facts['typical_ctx']))}: those requests fit the "
                       f"trained {format_length(deployed)} window, so no scaling is applied.")
    caveats: list[str] = []
    served = extension["method"] if extension is not None else (
        facts["model_rope_type"] if facts["existing"] else "none")
    if served == "dynamic":
        caveats.append(DYNAMIC_CAVEAT)
        if extension is not None:
            extension["note"] = f"{extension['note']} {DYNAMIC_CAVEAT}" if extension["note"] else DYNAMIC_CAVEAT
        else:
            reason = f"{reason} {DYNAMIC_CAVEAT}"
    inputs = {k: facts[k] for k in ("ctx", "trained_ctx", "served_ctx", "original_ctx", "typical_ctx", "extrapolation",
                                    "budget",
                                    "existing", "model_encoding", "model_rope_type", "head_dim", "heads", "theta")}
    plan_facts = {k: facts[k] for k in ("theta_new", "theta_stage", "free_cap", "train_to", "stages", "stage_lengths",
                                        "stage_tokens", "plan_tokens_min", "plan_tokens_full", "plan_tokens",
                                        "missing_tokens", "final_jump", "stage_plan", "target_stages",
                                        "target_tokens_min", "target_plan")}
    # an assumption counts where the plan prints the value: head_dim for RoPE, heads for ALiBi's slopes
    inputs["assumed"] = {k: v for k, v in facts["assumed"].items() if k in hyper}
    answer = {
        "encoding": render(rule.body["encoding"], facts),
        "reason": reason,
        "caveats": caveats,
        "hyperparameters": hyper,
        "extension": extension,
        "test_plan": [_test_line(item, facts, deployed) for item in items],
        "tests": [_test_spec(item, facts, deployed) for item in items],
        "tasks": None,
        "fallback": render(rule.body["fallback"], facts),
        "rule": rule.id,
        "why": render(rule.body["why"], facts),
        "vetoed": [{"rule": t.rule, "guard": t.vetoed_by} for t in traces if t.vetoed_by],
        "inputs": inputs,
        "plan": plan_facts,
        "rules_file": rules.source,
    }
    _add_task_tests(answer, rules)
    return PickResult(answer, traces, rules, facts, requests, model, source, prf)


#: The task set the plan's effective-length tests run (``posenc eval run --template ruler``:
#: rules/templates/ruler.yaml).
TASK_SET = "ruler"


def _add_task_tests(answer: dict[str, Any], rules: RuleSet) -> None:
    """Beside the needle tests: RULER's tasks up to the longest needle length, judged by the effective length under
    RULER's threshold and NoLiMa's ratio (the rules file's constants ``ruler_threshold``, ``nolima_ratio``)."""
    lengths = [t["length"] for t in answer["tests"] if t["kind"] == "niah"]
    if not lengths:
        return
    n = max(lengths)
    threshold, ratio = rules.constants["ruler_threshold"].value, rules.constants["nolima_ratio"].value
    answer["tasks"] = TASK_SET
    answer["tests"].append({"kind": "ruler", "length": n, "threshold": round(threshold / 100, 6), "ratio": ratio})
    answer["test_plan"].append(
        f"RULER's 11 no-download tasks (posenc eval run --template {TASK_SET}) up to {format_length(n)}: effective "
        f"length >= {format_length(n)}, by RULER's definition (average score >= {threshold:g}, Hsieh et al. 2024) and "
        f"NoLiMa's (>= {ratio:.0%} of the short-context score, Modarressi et al. 2025)")
