"""How far a model can go without training, and the staged plan a budget buys beyond that (stdlib; ``pick``).

Every number comes from the rules file's ``constants`` and ``tables`` (each with its published source), so the
policy stays data:

* the training-free jump is at most ``training_free_cap`` (x4: the Qwen2.5, Qwen3 and Qwen2.5-1M cards), or
  ``training_free_cap_asked`` when the user asks for more (x8: LongRoPE's searched factors, with a warning);
* within it, a budget of at least one stage's tokens is spent fine-tuning at the target (Code Llama, PI);
* beyond it the plan trains up to ``train_to``, a quarter of the target (the last jump stays training-free, as
  DeepSeek-V2 trained at 32k for 128k and Qwen2.5-1M at 256k for 1M), in stages of at most ``stage_ratio``;
* each stage needs ``stage_tokens_min`` tokens at least and ``stage_tokens`` to match the published results
  (Fu et al. 2024: 0.5B tokens give 81% needle retrieval at 128k, 5B give 88%); a bigger budget is spread over
  the stages, a smaller one caps the answer and says how much is missing;
* a new model's ``rope_theta`` follows its trained length (``theta_by_length``: 5e5 for 8k, 1e6 for 32k, ...).
"""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.rules import RuleSet
from posenc_cli.units import format_length, format_tokens


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def plan(rules: RuleSet, facts: dict[str, Any]) -> dict[str, Any]:
    """The plan facts for ``facts`` (ctx, trained_ctx, budget, extrapolation, theta, existing)."""
    c = {name: const.value for name, const in rules.constants.items()}
    ctx, trained, budget = int(facts["ctx"]), int(facts["trained_ctx"]), int(facts["budget"])
    asked = facts["extrapolation"] in ("moderate", "strong")
    free_cap = c["training_free_cap_asked"] if asked else c["training_free_cap"]
    out: dict[str, Any] = {"free_cap": free_cap, "abf_margin": budget / c["abf_budget"],
                           "stage_margin": budget / c["stage_tokens_min"]}
    # a new model's theta follows the length it is trained at (an explicit --theta is echoed)
    row = rules.lookup("theta_by_length", trained)
    given = not facts["existing"] and facts["theta"] > 0
    out["theta_new"] = float(facts["theta"]) if given else row.value
    out["theta_source"] = "--theta" if given else row.source
    out["theta_stage"] = out["theta_new"]
    if ctx <= trained * free_cap:
        if ctx > trained and budget >= c["stage_tokens_min"]:
            # a budget for one stage is spent at the target itself (Code Llama 4k -> 16k, PI, YaRN's 400 steps):
            # fine-tuned beats training-free at the same factor
            out.update(train_to=ctx, stages=1, stage_tokens=budget, plan_tokens_min=int(c["stage_tokens_min"]),
                       plan_tokens_full=int(c["stage_tokens"]), plan_tokens=budget, missing_tokens=0, final_jump=1.0,
                       stage_plan=f"stage 1: fine-tune {format_length(trained)} -> {format_length(ctx)} on "
                                  f"{format_tokens(budget)} tokens")
            out["theta_stage"] = rules.lookup("theta_by_length", ctx).value
            return out
        out.update(train_to=trained, stages=0, stage_tokens=0, plan_tokens_min=0, plan_tokens_full=0, plan_tokens=0,
                   missing_tokens=0,
                   final_jump=max(ctx / trained, 1.0), stage_plan="no training: one training-free jump")
        return out
    # train up to a quarter of the target (the last jump training-free), in stages of at most stage_ratio
    train_to = max(trained * 2, _pow2_at_least(ctx / c["training_free_cap"]))
    train_to = min(train_to, ctx)
    stages = max(1, math.ceil(math.log(train_to / trained) / math.log(c["stage_ratio"]) - 1e-9))
    need_min = int(stages * c["stage_tokens_min"])
    tokens = budget if budget >= need_min else 0  # a budget that suffices is spent, spread over the stages
    steps, length = [], trained
    for _ in range(stages):
        nxt = min(train_to, int(length * c["stage_ratio"]))
        steps.append(f"{format_length(length)} -> {format_length(nxt)}")
        length = nxt
    per_stage = tokens // stages if tokens else 0
    final = ctx / train_to
    text = "; ".join(f"stage {i + 1}: fine-tune {s}" + (f" on {format_tokens(per_stage)} tokens" if per_stage else "")
                     for i, s in enumerate(steps))
    if final > 1:
        text += f"; then a training-free x{final:g} to {format_length(ctx)}"
    out["theta_stage"] = rules.lookup("theta_by_length", train_to).value
    out.update(train_to=train_to, stages=stages, stage_tokens=per_stage, plan_tokens_min=need_min,
               plan_tokens_full=int(stages * c["stage_tokens"]),
               plan_tokens=tokens, missing_tokens=max(0, need_min - budget), final_jump=final, stage_plan=text)
    return out
