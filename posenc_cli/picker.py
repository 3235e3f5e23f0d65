"""``posenc pick``: gather the facts, run the decision rules, and fill in the exact numbers (stdlib only).

Any config block in the answer comes from :mod:`posenc_cli.scaling`, the code behind ``posenc scale``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from posenc_cli import scaling
from posenc_cli.errors import PosencError
from posenc_cli.rules import Rule, RulesError, RuleSet, Trace, decide, extension_factor, load_rules, render
from posenc_cli.slopes import MAX_HEADS, alibi_slope_list
from posenc_cli.units import format_length

EXTRAPOLATION = ("none", "moderate", "strong")
DEFAULT_HEADS = 32


@dataclass
class PickInputs:
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
        raise PosencError(f"--extrapolation {inp.extrapolation!r} is not known; use one of: {', '.join(EXTRAPOLATION)}")
    if inp.budget < 0:
        raise PosencError(f"--budget must not be negative, got {inp.budget}")
    for name, value, limit in (("--head-dim", inp.head_dim, scaling.MAX_HEAD_DIM), ("--heads", inp.heads, MAX_HEADS)):
        if value is not None and not 1 <= value <= limit:
            raise PosencError(f"{name} must be a positive integer up to {limit}, got {value}")
    if inp.head_dim is not None and inp.head_dim % 2:
        raise PosencError(f"--head-dim must be even (RoPE rotates features in pairs), got {inp.head_dim}")
    if inp.theta is not None:
        scaling._finite(inp.theta, "--theta", minimum=1.0, strict=True, maximum=scaling.MAX_THETA)
    facts: dict[str, Any] = {"ctx": inp.ctx, "budget": inp.budget, "extrapolation": inp.extrapolation,
                             "existing": inp.config is not None, "model_encoding": "none",
                             "model_rope_type": "none", "original_ctx": 0, "model_scaled": False,
                             "typical_ctx": inp.typical_ctx or 0, "yarn_remapped": False, "model_keepable": True}
    if inp.typical_ctx is not None and not 1 <= inp.typical_ctx <= inp.ctx:
        raise PosencError(f"--typical-ctx must be between 1 and --ctx ({inp.ctx}), got {inp.typical_ctx}")
    theta, head_dim, heads, trained, prf = inp.theta, inp.head_dim, inp.heads, inp.trained_ctx, None
    model_facts: Any = None
    source: Any = None
    if inp.config is not None:
        from posenc_cli.models import REMAPS_YARN, windows
        from posenc_cli.sources import describe_source, read_source

        source = read_source(inp.config)
        model = describe_source(source)
        facts["model_encoding"] = model.family
        facts["yarn_remapped"] = (model.text_model_type or model.model_type) in REMAPS_YARN
        head_dim = head_dim or model.head_dim
        heads = heads or model.num_heads
        if model.family == "rope" and model.layers:
            from posenc_cli.models import model_facts as facts_of

            # per-layer rope (Gemma 3: sliding and full attention): the scaled group, else full attention, is the
            # one an extension changes; the others keep their settings (models.extended_group)
            model_facts = facts_of(model, source.label, cfg=source.config)
            params = model_facts.params
            for name, given, own in (("--theta", inp.theta, model_facts.theta),
                                     ("--head-dim", inp.head_dim, model_facts.head_dim)):
                if given is not None and own is not None and given != own:
                    raise PosencError(f"{name} {given:g} differs from the model's own {own:g}; pick extends the "
                                      f"model as it is (leave {name} out, or drop --config for a new model)")
            head_dim = model_facts.head_dim or head_dim
            facts["model_rope_type"] = params["rope_type"]
            facts["model_keepable"] = params["rope_type"] in KEEP
            facts["model_scaled"] = params["rope_type"] != "default"
            theta = model_facts.theta
            prf = params.get("partial_rotary_factor")
            if model.max_position_embeddings:
                _, original, _ = windows(params, model.max_position_embeddings)
                # an extended checkpoint was trained to serve its window: extensions start there
                if trained is None:
                    trained = model_facts.native or model.max_position_embeddings
                facts["original_ctx"] = original or 0
        elif trained is None:
            trained = model.max_position_embeddings
        if trained is None:
            raise PosencError(f"{inp.config} names no trained length (BLOOM-style configs omit it): pass --trained-ctx")
    facts["trained_ctx"] = trained if trained is not None else inp.ctx
    facts["head_dim"] = int(head_dim or scaling.DEFAULT_HEAD_DIM)
    facts["heads"] = heads or DEFAULT_HEADS
    facts["theta"] = float(theta or 0.0)
    return facts, (float(prf) if prf is not None else None), (model_facts, source)


def _test_spec(item: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """One test of the plan as data (for a harness): lengths in tokens, thresholds as fractions."""
    (kind, spec), = item.items()
    if kind == "text":
        return {"kind": "text", "text": render(str(spec), facts)}
    out: dict[str, Any] = {"kind": kind}
    for key, value in spec.items():
        out[key] = int(facts[value]) if key in ("length", "baseline") else float(value)
    return out


def _test_line(item: dict[str, Any], facts: dict[str, Any]) -> str:
    (kind, spec), = item.items()
    if kind == "niah":
        n = int(facts[spec["length"]])
        label = ", the full target length" if spec["length"] == "ctx" else ""
        return (f"needle-in-a-haystack at {format_length(n)} ({n:,} tokens{label}), needles at "
                f"every depth: pass rate >= {spec['pass_rate']:.0%}")
    if kind == "perplexity":
        n, base = int(facts[spec["length"]]), int(facts[spec["baseline"]])
        return (f"perplexity at {format_length(n)} within {spec['margin']:.0%} of the model's own perplexity at "
                f"{format_length(base)}")
    if kind == "regression":
        n = int(facts[spec["length"]])
        return (f"short-context regression: perplexity and task scores at {format_length(n)} with the change within "
                f"{spec['margin']:.0%} of the model without it")
    return render(str(spec), facts)


#: What "keep the model's own scaling" becomes, per rope type of the model; other types are not extended
#: (the rules see ``model_keepable``): a yarn dict would drop dynamic's growth or proportional's full-width
#: frequencies.
KEEP = {"none": "yarn", "default": "yarn", "yarn": "yarn", "llama3": "llama3", "linear": "linear"}


def _extension(rule: Rule, facts: dict[str, Any], hyper: dict[str, Any], prf: float | None,
               model: Any, source: Any) -> dict[str, Any] | None:
    ext = rule.body.get("extension")
    if ext is None:
        return None
    factor = extension_factor(rule, facts)
    assert factor is not None
    method = ext["method"]
    if method == "keep":
        # the model's own family, its factor multiplied by the jump (llama3 stays llama3, ...): extension.extend
        rope_type = facts["model_rope_type"]
        if rope_type not in KEEP:
            raise RulesError(f"rule {rule.id!r} extends with 'keep', which posenc cannot do for rope_type "
                             f"{rope_type!r}; add the condition model_keepable == true")
        method = KEEP[rope_type]
    theta = facts["theta"] or hyper.get("theta") or scaling.DEFAULT_THETA
    full = target = int(round(int(facts["trained_ctx"]) * factor))
    note = render(str(ext["note"]), facts) if ext.get("note") else None
    if facts["typical_ctx"] and not ext.get("fine_tune", False):
        # static scaling costs short prompts: size the factor for the typical request (the Qwen cards' advice)
        target = max(min(target, int(facts["typical_ctx"])), int(facts["trained_ctx"]))
        if target < full:
            note = (f"Sized for --typical-ctx {format_length(target)}: static scaling costs short prompts (the Qwen "
                    f"cards set the factor to the length needed), so this serves up to {format_length(target)}; "
                    f"longer requests need the config for {format_length(full)}. vLLM, SGLang and llama.cpp apply it "
                    "to every request alike.")
    if target <= int(facts["trained_ctx"]):
        return None
    from posenc_cli.engines import hf
    from posenc_cli.extension import extend

    fine_tune = bool(ext.get("fine_tune", False))
    if model is not None:
        # --trained-ctx other than the model's window: the user says the checkpoint was trained elsewhere
        trained = int(facts["trained_ctx"])
        req = extend(method, model, target=target, fine_tuned=fine_tune,
                     original_max=trained if trained != model.native else None)
    else:
        req = extend(method, None, original_max=int(facts["trained_ctx"]), target=target, theta=float(theta),
                     head_dim=int(facts["head_dim"]), partial_rotary_factor=prf, fine_tuned=fine_tune)
    v4, v5 = hf.format_hf(req), hf.format_hf_v5(req)
    config, config_format = v4, "hf"
    if model is not None:
        config_format = hf.own_format(model)
        config = hf.fragment(source.config, req, config_format, model.group)
        argv = ["posenc", "scale", req.method, "--config", inputs_config(source), "--target",
                format_length(req.target)]
    else:
        argv = ["posenc", "scale", req.method, "--original-max", format_length(req.original_max),
                "--target", format_length(req.target), "--theta", f"{req.theta:g}", "--head-dim", str(req.head_dim)]
        if prf is not None:
            argv += ["--partial-rotary-factor", f"{prf:g}"]
    if req.fine_tuned:
        argv.append("--fine-tuned")
    return {
        "method": req.method,
        "factor": req.factor,
        "from": req.original_max,
        "to": req.target,
        "fine_tune": fine_tune,
        "fine_tune_tokens": render(str(ext.get("tokens", "none")), facts),
        "note": note,
        "config": config,
        "config_format": config_format,
        "config_v4": v4,
        "config_v5": v5,
        "command": shlex.join(argv),
        "warnings": scaling.warnings_for(req),
    }


def inputs_config(source: Any) -> str:
    """How the "same numbers" command names the model: as the user gave it (a path, a Hub id), ``-`` for stdin."""
    return "-" if source.kind == "stdin" else str(source.label)


def _hyper_value(value: Any, facts: dict[str, Any]) -> Any:
    """A lone ``{fact}`` keeps the fact's number (so JSON gets 1000000, not "1e+06"); other text is rendered."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", value)
    if match and isinstance(facts.get(match.group(1)), (int, float)) and not isinstance(facts[match.group(1)], bool):
        number = facts[match.group(1)]
        return int(number) if float(number).is_integer() else number
    return render(value, facts)


@dataclass
class PickResult:
    answer: dict[str, Any]
    traces: list[Trace]
    rules: RuleSet


def pick(inp: PickInputs) -> PickResult:
    """Run the policy on ``inp`` and return the five-part answer (JSON-ready) with the rule trace."""
    from posenc_cli.planning import plan

    rules = load_rules(inp.rules)
    facts, prf, (model, source) = gather_facts(inp)
    facts.update(plan(rules, facts))
    facts = rules.facts(facts)
    facts["alibi_slopes"] = ", ".join(f"{s:.6g}" for s in alibi_slope_list(int(facts["heads"])))
    rule, traces = decide(rules, facts)
    hyper = {k: _hyper_value(v, facts) for k, v in (rule.body.get("hyperparameters") or {}).items()}
    extension = _extension(rule, facts, hyper, prf, model, source)
    inputs = {k: facts[k] for k in ("ctx", "trained_ctx", "original_ctx", "typical_ctx", "extrapolation", "budget",
                                    "existing", "model_encoding", "model_rope_type", "head_dim", "heads", "theta")}
    plan_facts = {k: facts[k] for k in ("theta_new", "free_cap", "train_to", "stages", "stage_tokens",
                                        "plan_tokens_min", "plan_tokens_full", "plan_tokens", "missing_tokens",
                                        "final_jump", "stage_plan")}
    answer = {
        "encoding": render(rule.body["encoding"], facts),
        "reason": render(rule.body["reason"], facts),
        "hyperparameters": hyper,
        "extension": extension,
        "test_plan": [_test_line(item, facts) for item in rule.body["test_plan"]],
        "tests": [_test_spec(item, facts) for item in rule.body["test_plan"]],
        "fallback": render(rule.body["fallback"], facts),
        "rule": rule.id,
        "why": render(rule.body["why"], facts),
        "vetoed": [{"rule": t.rule, "guard": t.vetoed_by} for t in traces if t.vetoed_by],
        "inputs": inputs,
        "plan": plan_facts,
        "rules_file": rules.source,
    }
    return PickResult(answer, traces, rules)
