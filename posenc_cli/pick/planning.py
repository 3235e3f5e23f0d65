"""How far a model can go without training, and the staged plan a budget buys beyond that (stdlib; ``pick``).

Every number comes from the rules file's ``constants`` and ``tables`` (each with its published source), so the
policy stays data:

* the training-free jump is at most ``training_free_cap`` (x4: the Qwen2.5, Qwen3 and Qwen2.5-1M cards), or
  ``training_free_cap_asked`` when the user asks for more (x8: LongRoPE's searched factors, with a warning);
* within it, a budget of at least one stage's tokens is spent fine-tuning at the target (Code Llama, PI);
* beyond it the plan grows the length in stages of at most ``stage_ratio``. A budget that pays
  ``stage_tokens_min`` for every stage up to the target trains there, leaving ``funded_final_jump`` training-free
  (x1 by default: YaRN, Llama 3.1 and DeepSeek-V3 trained at the length they serve). A smaller budget trains as
  many stages as it pays for and leaves the rest training-free, at most ``training_free_cap`` (as DeepSeek-V2
  trained at 32k for 128k and Qwen2.5-1M at 256k for 1M); below that the answer is capped and says what is missing;
* each stage needs ``stage_tokens_min`` tokens at least and ``stage_tokens`` to match the published results
  (Fu et al. 2024: 0.5B tokens give 81% needle retrieval at 128k, 5B give 88%); the budget is spread over the
  stages it trains;
* a new model's ``rope_theta`` follows its trained length (``theta_by_length``: 5e5 for 8k, 1e6 for 32k, ...).
"""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.pick.rules_schema import RuleSet
from posenc_cli.units import format_length, format_tokens


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _lengths(trained: int, top: int, ratio: float, stages: int | None = None) -> list[int]:
    """The length after each stage, growing ``ratio``-fold from ``trained`` and stopping at ``top``; ``stages``
    caps how many (default: as many as reach ``top``)."""
    out: list[int] = []
    length = trained
    while length < top and (stages is None or len(out) < stages):
        length = min(top, int(length * ratio))
        out.append(length)
    return out


def _stage_text(trained: int, ends: list[int], per_stage: int = 0) -> str:
    starts = [trained, *ends[:-1]]
    return "; ".join(f"stage {i + 1}: fine-tune {format_length(a)} -> {format_length(b)}"
                     + (f" on {format_tokens(per_stage)} tokens" if per_stage else "")
                     for i, (a, b) in enumerate(zip(starts, ends, strict=True)))


def _ends_text(ends: list[int]) -> str:
    names = [format_length(n) for n in ends]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def plan(rules: RuleSet, facts: dict[str, Any]) -> dict[str, Any]:
    """The plan facts for ``facts`` (ctx, trained_ctx, budget, extrapolation, theta, existing); ``stage_lengths``
    lists the length each stage trains at (``stages`` of them, from ``trained_ctx`` up to ``train_to``)."""
    c = {name: const.value for name, const in rules.constants.items()}
    ctx, trained, budget = int(facts["ctx"]), int(facts["trained_ctx"]), int(facts["budget"])
    asked = facts["extrapolation"] in ("moderate", "strong")
    free_cap = c["training_free_cap_asked"] if asked else c["training_free_cap"]
    ratio, least = c["stage_ratio"], c["stage_tokens_min"]
    out: dict[str, Any] = {"free_cap": free_cap, "base_cap": c["training_free_cap"],
                           "abf_margin": budget / c["abf_budget"], "stage_margin": budget / least}
    # a new model's theta follows the length it is trained at (an explicit --theta is echoed)
    row = rules.lookup("theta_by_length", trained)
    given = not facts["existing"] and facts["theta"] > 0
    out["theta_new"] = float(facts["theta"]) if given else row.value
    out["theta_source"] = "--theta" if given else row.source
    out["theta_stage"] = out["theta_new"]
    # what training all the way to the target takes, whatever the budget (fallbacks quote it)
    to_target = [ctx] if trained < ctx <= trained * free_cap else _lengths(trained, ctx, ratio)
    out.update(target_stages=len(to_target), target_tokens_min=int(len(to_target) * least),
               target_plan=_stage_text(trained, to_target) if to_target else "no training")
    if ctx <= trained * free_cap:
        if ctx > trained and budget >= least:
            # a budget for one stage is spent at the target itself (Code Llama 4k -> 16k, PI, YaRN's 400 steps):
            # fine-tuned beats training-free at the same factor
            out.update(train_to=ctx, stages=1, stage_lengths=[ctx], stage_tokens=budget,
                       plan_tokens_min=int(least),
                       plan_tokens_full=int(c["stage_tokens"]), plan_tokens=budget, missing_tokens=0, final_jump=1.0,
                       stage_plan=_stage_text(trained, [ctx], budget), stage_ends=format_length(ctx))
            out["theta_stage"] = rules.lookup("theta_by_length", ctx).value
            return out
        out.update(train_to=trained, stages=0, stage_lengths=[], stage_tokens=0, plan_tokens_min=0, plan_tokens_full=0,
                   plan_tokens=0, missing_tokens=0, final_jump=max(ctx / trained, 1.0),
                   stage_plan="no training: one training-free jump", stage_ends=format_length(trained))
        return out
    # the furthest the plan trains when the budget pays for it: the target over funded_final_jump
    jump = c["funded_final_jump"]
    funded_to = ctx if jump <= 1 else min(ctx, max(trained * 2, _pow2_at_least(ctx / jump)))
    funded = _lengths(trained, funded_to, ratio)
    # the least that leaves a training-free jump within training_free_cap (the last stage may be short)
    least_to = min(ctx, max(trained * 2, _pow2_at_least(ctx / c["training_free_cap"])))
    minimum = _lengths(trained, least_to, ratio)
    affordable = int(budget // least)
    if affordable >= len(funded):
        ends = funded
    elif affordable >= len(minimum):
        ends = _lengths(trained, funded_to, ratio, stages=affordable)  # as far as the budget pays
    else:
        ends = minimum  # not paid for: the least plan, with what it misses
    stages, train_to = len(ends), ends[-1]
    need_min = int(stages * least)
    tokens = budget if budget >= need_min else 0  # a budget that suffices is spent, spread over the stages
    per_stage = tokens // stages if tokens else 0
    final = ctx / train_to
    text = _stage_text(trained, ends, per_stage)
    if final > 1:
        text += f"; then a training-free x{final:g} to {format_length(ctx)}"
    out["theta_stage"] = rules.lookup("theta_by_length", train_to).value
    out.update(train_to=train_to, stages=stages, stage_lengths=ends, stage_tokens=per_stage, plan_tokens_min=need_min,
               plan_tokens_full=int(stages * c["stage_tokens"]),
               plan_tokens=tokens, missing_tokens=max(0, need_min - budget), final_jump=final, stage_plan=text,
               stage_ends=_ends_text(ends))
    return out
