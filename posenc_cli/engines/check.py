"""``posenc check``: every engine's run of a model next to transformers', per rope group.

The engine models are registered here (:func:`registry`), in report order; each lives in its own module and knows
nothing of the others or of the request layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posenc_cli import remote_code
from posenc_cli.engines import llamacpp, sglang, transformers, vllm
from posenc_cli.engines.runs import VERDICTS, EngineRun, EngineVerdict, compare
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.models import ModelPositions

Runner = Callable[[ModelPositions, dict[str, Any], int, "int | None"], EngineRun]


def registry() -> dict[str, Runner]:
    """Engine name -> runner ``(model, config, max_model_len, seq_len) -> EngineRun``, in report order: what the
    engine computes serving ``max_model_len`` for a sequence of ``seq_len`` tokens (None: ``max_model_len``)."""
    return {"hf": transformers.run, "vllm": vllm.run, "sglang": sglang.run, "llama.cpp": llamacpp.run}


ENGINE_NAMES = ("hf", "vllm", "sglang", "llama.cpp")


@dataclass
class CheckReport:
    """``posenc check``: transformers and each engine, per rope group.

    ``no_rope``: the model applies RoPE in no layer (ALiBi, learned, none): a result, not an error, with no engine
    runs. ``passed`` only when every engine asked for was compared and computes what transformers computes.
    """

    model_type: str | None
    max_model_len: int
    reference: EngineRun | None
    verdicts: list[EngineVerdict]
    short_len: int | None = None  # where length-dependent rope was compared too
    no_rope: str | None = None  # the model's position family when it has no RoPE
    no_reference: str | None = None  # why transformers' numbers are missing (remote code): nothing was compared

    @property
    def passed(self) -> bool:
        return self.no_reference is None and all(v.verdict == "same" for v in self.verdicts)

    def exit_code(self) -> ExitCode:
        """0 all same; 1 one differs or will not start (a check ran and failed); 3 otherwise when one was not
        compared (posenc has no model of that engine for this case: nothing was judged)."""
        groups = self.by_verdict()
        if groups["differs"] or groups["will not start"]:
            return ExitCode.CHECK_FAILED
        if groups["not modelled"] or self.no_reference:
            return ExitCode.COULD_NOT_RUN
        return ExitCode.OK

    def by_verdict(self) -> dict[str, list[str]]:
        """Engine names per verdict, in report order (same, differs, will not start, not modelled)."""
        out: dict[str, list[str]] = {k: [] for k in VERDICTS}
        for v in self.verdicts:
            out[v.verdict].append(v.run.engine)
        return out

    def summary(self) -> str:
        """One line that counts every engine, compared or not."""
        if self.no_rope is not None:
            return (f"no RoPE: the model's positions are {self.no_rope}; no engine has rope frequencies to compare "
                    "(nothing differs)")
        groups = self.by_verdict()
        n = len(self.verdicts)
        if self.no_reference:
            parts = [f"nothing compared: {self.no_reference}"]
            return "; ".join(parts + [f"{verdict}: {', '.join(names)}" for verdict, names in groups.items() if names])
        if self.passed:
            return f"all {n} engines compute what transformers computes" if n != 1 else \
                "the engine computes what transformers computes"
        parts = [f"{len(groups['same'])} of {n} compute what transformers computes"]
        parts += [f"{verdict}: {', '.join(names)}" for verdict, names in groups.items() if names and verdict != "same"]
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        ref = self.reference
        return {"passed": self.passed, "summary": self.summary(), "model_type": self.model_type,
                "max_model_len": self.max_model_len, "short_len": self.short_len, "no_rope": self.no_rope,
                "no_reference": self.no_reference,
                "verdicts": self.by_verdict(),
                "transformers": None if ref is None else {
                    "version": ref.version, "warnings": ref.warnings,
                    "groups": [{"group": g.name, "attention_factor": g.attention_factor,
                                "softmax_scale": g.softmax_scale,
                                "inv_freq": [float(x) for x in (g.inv_freq if g.inv_freq is not None else [])]}
                               for g in ref.groups]},
                "engines": [v.as_dict() for v in self.verdicts]}


def _length_dependent(model: ModelPositions) -> int | None:
    """The short length where dynamic NTK or LongRoPE behave differently from the serving length, if any."""
    for layer in model.layers:
        rope_type = layer.params.get("rope_type")
        if rope_type == "longrope":
            return int(layer.params["original_max_position_embeddings"])
        if rope_type == "dynamic" and model.max_position_embeddings:
            return model.max_position_embeddings
    return None


def check(model: ModelPositions, cfg: dict[str, Any], engines: list[str], max_model_len: int,
          model_name: str = "MODEL") -> CheckReport:
    """Run every engine in ``engines`` on ``model`` at ``max_model_len`` and compare each with transformers.

    Dynamic NTK and LongRoPE are also compared at the original length, where transformers changes its frequencies
    and a static engine does not. ``model_name``: what the engines' command lines call the model (the engine
    models write ``MODEL``).
    """
    known = registry()
    unknown = [e for e in engines if e not in known]
    if unknown:
        raise PosencError(f"engine {unknown[0]!r} is not known; use some of: {', '.join(ENGINE_NAMES)}")
    if model.family != "rope" or not model.layers:
        return CheckReport(model.model_type, max_model_len, None, [], no_rope=model.family)
    if model.engine is not None and model.engine.remote_code:
        return _without_reference(model, engines, max_model_len)
    reference = transformers.run(model, cfg, max_model_len)
    short = _length_dependent(model)
    short = short if short is not None and short < max_model_len else None
    verdicts = []
    for name in engines:
        if name == "hf":
            continue
        refusal = remote_code.check_refusal(model.engine, name) if model.engine is not None else None
        if refusal is not None:  # an engine-only mechanism the engine model does not cover, or will not serve
            verdicts.append(EngineVerdict(EngineRun(name, _VERSIONS[name], max_model_len, [], [], refusal=refusal), []))
            continue
        run = known[name](model, cfg, max_model_len, None)
        named = {"MODEL": model_name}
        if model_name.endswith(".gguf"):  # llama.cpp's command names the GGUF itself
            named["MODEL.gguf"] = model_name
        run.invocation = [named.get(arg, arg) for arg in run.invocation]
        verdict = compare(reference, run)
        if short is not None and not run.refusal:
            # the same server, a sequence of `short` tokens: static engines keep their tables, per-batch ones switch
            served_short = known[name](model, cfg, max_model_len, short)
            at_short = compare(transformers.short_run(model, cfg, short),
                               EngineRun(run.engine, run.version, short, served_short.groups, run.invocation))
            for long_v, short_v in zip(verdict.groups, at_short.groups, strict=True):
                long_v.short_diff = short_v.inv_freq_rel_diff
                long_v.short_worst_pair = short_v.worst_pair
                long_v.same = long_v.same and short_v.same
        verdicts.append(verdict)
    return CheckReport(model.model_type, max_model_len, reference, verdicts, short)


_VERSIONS = {"vllm": vllm.VERSION, "sglang": sglang.VERSION, "llama.cpp": llamacpp.VERSION}


def _without_reference(model: ModelPositions, engines: list[str], max_model_len: int) -> CheckReport:
    """A remote-code family: transformers runs the model's own code, which posenc does not, so there is no reference
    and no engine is compared (each says why; ``posenc inspect`` has the engine's own numbers)."""
    assert model.engine is not None
    verdicts = [EngineVerdict(EngineRun(name, _VERSIONS[name], max_model_len, [], [],
                                        refusal=remote_code.check_refusal(model.engine, name)), [])
                for name in engines if name != "hf"]
    why = (f"transformers needs trust_remote_code for {model.engine.family}; posenc does not run the model's own "
           "code, so it has no transformers numbers to compare with")
    return CheckReport(model.model_type, max_model_len, None, verdicts, no_reference=why)
