"""``posenc check``: every engine's run of a model next to transformers', per rope group, and with ``--trainer``
every training framework's, and each trained-with/served-with pair.

The engines and trainers are the registry's (:mod:`posenc_cli.frameworks.registry`), in report order; each lives in
its own module and knows nothing of the others or of the request layer. With ``--installed`` a row runs the module its
entry names (``installed``) or says why it stays modelled (the entry's ``not_run``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from posenc_cli.engines import hf
from posenc_cli.engines.runs import (
    SAME_RTOL,
    SERVES_LESS,
    TRAINER_VERDICTS,
    VERDICTS,
    EngineRun,
    EngineVerdict,
    GroupVerdict,
    compare,
    group_verdict,
)
from posenc_cli.engines.target import Runner
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.frameworks import registry
from posenc_cli.frameworks.registry import ENGINE, TRAINER
from posenc_cli.models import remote_code
from posenc_cli.models.facts import window_of
from posenc_cli.models.model_positions import ModelPositions


@dataclass
class PairVerdict:
    """A model trained with one framework and served with one engine: their numbers, group by group, at the last
    position of the window (and at the short length where the rope depends on the length)."""

    trainer: str
    engine: str
    groups: list[GroupVerdict]

    @property
    def same(self) -> bool:
        return all(g.same for g in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {"trainer": self.trainer, "engine": self.engine, "verdict": "same" if self.same else "differs",
                "groups": [g.as_dict() for g in self.groups]}


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
    trainers: list[EngineVerdict] | None = None  # None: no trainer asked for
    pairs: list[PairVerdict] = field(default_factory=list)  # every trainer that ran x every engine that ran
    installed: bool = False  # rows run by the installed packages where posenc can (check --installed)
    notes: list[str] = field(default_factory=list)  # for stderr: an installed version other than the proven one
    # check --installed: the pip requirement of each asked package posenc could run but that is not importable here
    to_install: list[str] = field(default_factory=list)

    @property
    def ran_installed(self) -> int:
        """How many engine and trainer rows ran from their installed package's own code (``--installed``)."""
        return sum((v.run.source or "").startswith("run ") for v in self.verdicts + (self.trainers or []))

    @property
    def nothing_installed_ran(self) -> bool:
        """``--installed`` was asked and no engine or trainer row could run from an installed package."""
        return self.installed and self.no_rope is None and not self.ran_installed and bool(
            self.verdicts or self.trainers)

    @property
    def passed(self) -> bool:
        return (self.no_reference is None and all(v.verdict == "same" for v in self.verdicts + (self.trainers or []))
                and all(p.same for p in self.pairs))

    def exit_code(self) -> ExitCode:
        """0 all same; 1 an engine or trainer differs from transformers, will not start, serves less than asked
        (Ollama past the GGUF's window) or (a trainer) cannot express the model's rope, or a trained-with/served-with
        pair differs (a check ran and failed); 3 otherwise
        when one was not compared (posenc has no model of that engine or trainer for this case: nothing was
        judged)."""
        groups = self.by_verdict()
        trained = self.by_trainer_verdict()
        if (groups["differs"] or groups["will not start"] or groups[SERVES_LESS] or trained["differs"]
                or trained["will not start"] or trained["cannot express"] or not all(p.same for p in self.pairs)):
            return ExitCode.CHECK_FAILED
        if groups["not modelled"] or trained["not modelled"] or self.no_reference or self.nothing_installed_ran:
            return ExitCode.COULD_NOT_RUN
        return ExitCode.OK

    def by_verdict(self) -> dict[str, list[str]]:
        """Engine names per verdict, in report order (same, differs, will not start, not modelled)."""
        out: dict[str, list[str]] = {k: [] for k in VERDICTS}
        for v in self.verdicts:
            out[v.verdict].append(v.run.engine)
        return out

    def by_trainer_verdict(self) -> dict[str, list[str]]:
        """Trainer names per verdict (same, differs, will not start, cannot express, not modelled)."""
        out: dict[str, list[str]] = {k: [] for k in TRAINER_VERDICTS}
        for v in self.trainers or []:
            out[v.verdict].append(v.run.engine)
        return out

    def summary(self) -> str:
        """One line that counts every engine, compared or not (with ``--installed``, and how many rows ran from
        installed packages)."""
        text = self._verdicts_summary()
        if not self.installed or self.no_rope is not None:
            return text
        rows = len(self.verdicts) + len(self.trainers or [])
        if not self.nothing_installed_ran:
            return f"{text}; {self.ran_installed} of {rows} rows ran from installed packages"
        fix = f": pip install {' '.join(self.to_install)}" if self.to_install else ""
        return (f"no row ran from an installed package, every verdict is posenc's model ({text}); to run them, "
                f"install what posenc can run here{fix}")

    def _verdicts_summary(self) -> str:
        if self.no_rope is not None:
            return (f"no RoPE: the model's positions are {self.no_rope}; no engine has rope frequencies to compare "
                    "(nothing differs)")
        groups = self.by_verdict()
        n = len(self.verdicts)
        if self.no_reference:
            parts = [f"nothing compared: {self.no_reference}"]
            return "; ".join(parts + [f"{verdict}: {', '.join(names)}" for verdict, names in groups.items() if names])
        if self.trainers is None:
            if self.passed:
                return f"all {n} engines compute what transformers computes" if n != 1 else \
                    "the engine computes what transformers computes"
            parts = [f"{len(groups['same'])} of {n} compute what transformers computes"]
            parts += [f"{verdict}: {', '.join(names)}" for verdict, names in groups.items()
                      if names and verdict != "same"]
            return "; ".join(parts)
        trained = self.by_trainer_verdict()
        t = len(self.trainers)
        parts = [f"engines: {len(groups['same'])} of {n} compute what transformers computes"] if n else []
        parts += [f"{verdict}: {', '.join(names)}" for verdict, names in groups.items() if names and verdict != "same"]
        parts.append(f"trainers: {len(trained['same'])} of {t} train what transformers computes")
        parts += [f"{verdict}: {', '.join(names)}" for verdict, names in trained.items() if names and verdict != "same"]
        if self.pairs:
            same = sum(p.same for p in self.pairs)
            parts.append(f"trained with X, served with Y: {same} of {len(self.pairs)} pairs the same")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        ref = self.reference
        return {"passed": self.passed, "summary": self.summary(), "model_type": self.model_type,
                "max_model_len": self.max_model_len, "short_len": self.short_len, "no_rope": self.no_rope,
                "no_reference": self.no_reference,
                "verdicts": self.by_verdict(),
                "installed": self.installed, "notes": self.notes,
                **({"ran_installed": self.ran_installed, "to_install": self.to_install} if self.installed else {}),
                "transformers": None if ref is None else {
                    "version": ref.version, "warnings": ref.warnings, "source": ref.source,
                    "groups": [{"group": g.name, "attention_factor": g.attention_factor,
                                "softmax_scale": g.softmax_scale,
                                "inv_freq": [float(x) for x in (g.inv_freq if g.inv_freq is not None else [])]}
                               for g in ref.groups]},
                "engines": [v.as_dict() for v in self.verdicts],
                **({} if self.trainers is None else {
                    "trainer_verdicts": self.by_trainer_verdict(),
                    "trainers": [v.as_dict() for v in self.trainers],
                    "pairs": [p.as_dict() for p in self.pairs]})}


@dataclass
class Judgement:
    """One engine's (or trainer's) verdict on one model at one length (:func:`judge`), or why there is none
    (``no_rope``: the model has no RoPE; ``no_reference``: transformers' numbers are missing, remote code)."""

    verdict: EngineVerdict | None
    max_model_len: int
    short_len: int | None
    no_rope: str | None = None
    no_reference: str | None = None

    def line(self) -> str:
        """The verdict in one line (:func:`verdict_line`), or why nothing was compared."""
        if self.no_rope is not None:
            return f"no RoPE ({self.no_rope}): nothing to compare"
        assert self.verdict is not None
        return verdict_line(self.verdict, (self.max_model_len, self.short_len))


def _off(value: float, pair: int | None) -> str:
    """How far one inverse frequency is from transformers' (relative to it) at its worst pair, or 'the same'
    (within float32 rounding, :data:`SAME_RTOL`)."""
    if value <= SAME_RTOL:
        return "the same"
    return f"off by {value:.3g} relative (pair {pair})"


def _group_words(g: GroupVerdict, lengths: tuple[int, int | None]) -> str:
    """What differs in one rope group: the inverse frequencies at the serving length (and at the short length), the
    cos/sin magnitude and the softmax scale, each against transformers'."""
    long, short = lengths
    what = [f"inv_freq {_off(g.inv_freq_rel_diff, g.worst_pair)} at {long:,}"]
    if g.short_diff is not None and short is not None:
        what[0] += f", {_off(g.short_diff, g.short_worst_pair)} at {short:,}"
    (a_ref, a), (s_ref, s) = g.attention_factor, g.softmax_scale
    if not math.isclose(a_ref, a, rel_tol=1e-9):
        what.append(f"attention factor {a:.6g} (transformers {a_ref:.6g})")
    if not math.isclose(s_ref, s, rel_tol=1e-9):
        what.append(f"softmax scale x{s:.6g} (transformers x{s_ref:.6g})")
    return ", ".join(what)


def verdict_line(v: EngineVerdict, lengths: tuple[int, int | None]) -> str:
    """One engine's (or trainer's) verdict in one line, as ``posenc check`` lists it and ``posenc scale --engine``
    prints it: same (at which lengths) / differs (per rope group: the largest relative inverse-frequency difference,
    at which pair, at the serving length and the short length of length-dependent rope; the attention factor and
    softmax scale where they differ) / will not start, cannot express or not modelled, and why."""
    r = v.run
    head = f"{r.engine} {r.version}: {v.verdict}"
    if r.refusal:
        return f"{head}: {r.refusal.removeprefix(v.verdict).lstrip(': ')}"
    long, short = lengths
    at = f"{long:,}" + (f" and {short:,}" if short is not None else "")
    if v.verdict == "same":
        return f"{head} as transformers at {at} tokens"
    several = len(v.groups) > 1
    parts = [(f"[{g.name}] " if several else "") + ("the same" if g.same else _group_words(g, lengths))
             for g in v.groups]
    return f"{head} from transformers: " + "; ".join(parts)


def _length_dependent(model: ModelPositions) -> int | None:
    """The short length where dynamic NTK or LongRoPE behave differently from the serving length, if any."""
    for layer in model.layers:
        rope_type = layer.params.get("rope_type")
        if rope_type == "longrope":
            return int(layer.params["original_max_position_embeddings"])
        if rope_type == "dynamic" and model.max_position_embeddings:
            return model.max_position_embeddings
    return None


def _known(names: list[str], kind: str) -> None:
    """Refuse a name the registry does not list for ``kind``."""
    known = registry.names(kind)
    unknown = [n for n in names if n not in known]
    if unknown and kind == ENGINE:
        raise PosencError(f"engine {unknown[0]!r} is not known; use some of: {', '.join(known)}")
    if unknown:
        raise PosencError(f"trainer {unknown[0]!r} is not known; use all or some of: {', '.join(known)}")


def _proven(name: str) -> tuple[str, str]:
    """(package, version) a target's numbers are proven against."""
    target = registry.load(name)
    return target.package, target.version.removeprefix(target.package).strip()


def _guarded(name: str, run: Runner) -> Runner:
    """``run``, with a config its engine's own reader would fail on (a null where it calls ``float``, as a file from
    the wild may have) reported as that engine's row that will not start, not as posenc's traceback: the engine
    models read a config as their engine's code does."""

    def guarded(model: ModelPositions, cfg: dict[str, Any], length: int, seq: int | None) -> EngineRun:
        try:
            return run(model, cfg, length, seq)
        except PosencError:
            raise
        except (TypeError, ValueError, ArithmeticError, KeyError) as exc:
            return _refused(name, length, f"its config reader, as modelled, fails on this file ({exc})")
    return guarded


def source_of(name: str, installed: bool) -> tuple[Runner, list[str]]:
    """The runner for ``name``'s row, which marks each run with its source, and the notes for stderr: with
    ``installed``, the installed package's own code when posenc has a module for it and the package is importable
    (a version other than the proven one is noted), else (or when the installed package cannot run the model) the
    model, saying why."""
    package, proven_version = _proven(name)
    modelled = f"modelled (proven against {package} {proven_version})"
    target_run = _guarded(name, registry.load(name).run)
    module = registry.load_installed(name) if installed else None
    version = module.version() if module is not None else None
    if not installed or version is None:
        why = "" if not installed else (
            f": {package} is not installed here" if module is not None else
            f": {registry.entry(name).not_run}")

        def modelled_run(model: ModelPositions, cfg: dict[str, Any], length: int, seq: int | None) -> EngineRun:
            out = target_run(model, cfg, length, seq)
            out.source = modelled + why
            return out
        return modelled_run, []
    notes = [] if version == proven_version or version.startswith(proven_version + ".") else [
        f"{name}: the installed {package} is {version}; posenc's model is proven against {proven_version}: this "
        "row is the installed one's"]

    assert module is not None
    run_installed = module.run

    def installed_run(model: ModelPositions, cfg: dict[str, Any], length: int, seq: int | None) -> EngineRun:
        try:
            out: EngineRun = run_installed(model, cfg, length, seq)
        except Exception as exc:  # noqa: BLE001 - the user's package may not build this model: the model stands in
            out = target_run(model, cfg, length, seq)
            out.source = f"{modelled}: the installed {package} {version} could not run it ({exc})"
            return out
        out.source = f"run (installed {package} {version})"
        return out
    return installed_run, notes


@dataclass
class _Judge:
    """Runs one engine or trainer on the model and compares it with transformers (at the short length too, where
    the rope depends on the length)."""

    model: ModelPositions
    cfg: dict[str, Any]
    max_model_len: int
    model_name: str
    reference: EngineRun
    short_reference: EngineRun | None

    def __call__(self, runner: Runner) -> tuple[EngineVerdict, EngineRun | None]:
        """The verdict against transformers, and the run at the short length (None: none)."""
        model, cfg, max_model_len = self.model, self.cfg, self.max_model_len
        # each run gets its own copy: an engine's config path (transformers' AutoConfig under LMDeploy's) may write
        # into nested dicts, which the next engine would then read
        run = runner(model, copy.deepcopy(cfg), max_model_len, None)
        named = {"MODEL": self.model_name}
        if self.model_name.endswith(".gguf"):  # llama.cpp's command names the GGUF itself
            named["MODEL.gguf"] = self.model_name
        run.invocation = [named.get(arg, arg) for arg in run.invocation]
        if run.modelfile is not None and self.model_name.endswith(".gguf"):  # FROM the checked GGUF
            from posenc_cli.engines.ollama import modelfile

            run.modelfile = modelfile(self.model_name, run.max_model_len, gguf=True)
        verdict = compare(self.reference, run)
        if self.short_reference is None or run.refusal:
            return verdict, None
        # the same server, a sequence of `short` tokens: static engines keep their tables, per-batch ones switch
        at = runner(model, copy.deepcopy(cfg), max_model_len, self.short_reference.max_model_len)
        served_short = EngineRun(run.engine, run.version, self.short_reference.max_model_len, at.groups,
                                 run.invocation)
        at_short = compare(self.short_reference, served_short)
        for long_v, short_v in zip(verdict.groups, at_short.groups, strict=True):
            long_v.short_diff = short_v.inv_freq_rel_diff
            long_v.short_worst_pair = short_v.worst_pair
            long_v.same = long_v.same and short_v.same
        return verdict, served_short


def check(model: ModelPositions, cfg: dict[str, Any], engines: list[str], max_model_len: int,
          model_name: str = "MODEL", trainers: list[str] | None = None, *, installed: bool = False) -> CheckReport:
    """Run every engine in ``engines`` on ``model`` at ``max_model_len`` and compare each with transformers.

    Dynamic NTK and LongRoPE are also compared at the original length, where transformers changes its frequencies
    and a static engine does not. ``model_name``: what the engines' command lines call the model (the engine
    models write ``MODEL``). ``trainers`` (None: none): training frameworks (the registry's), each compared with
    transformers and with every engine that ran (trained at ``max_model_len``). ``installed``: each row (the
    reference's too) from the installed package's own code where posenc has a module for it and the package is
    importable (:func:`source_of`); every row then says its source.
    """
    _known(engines, ENGINE)
    _known(trainers or [], TRAINER)
    if model.family != "rope" or not model.layers:
        return CheckReport(model.model_type, max_model_len, None, [], no_rope=model.family,
                           trainers=None if trainers is None else [])
    if model.engine is not None and model.engine.remote_code:
        return _without_reference(model, engines, max_model_len, trainers)
    names = [registry.names(ENGINE)[0], *engines, *(trainers or [])]
    sources = {name: source_of(name, installed) for name in dict.fromkeys(names)}
    notes = [note for _, found in sources.values() for note in found]
    judged, short = _judge_for(model, cfg, max_model_len, model_name, sources[names[0]][0])
    reference, short_reference = judged.reference, judged.short_reference
    verdicts = []
    # the reference is the first engine (transformers): served as it is, not compared with itself
    reference_name = registry.names(ENGINE)[0]
    served: list[tuple[EngineRun, EngineRun | None]] = []
    if reference_name in engines:
        served.append((reference, short_reference))
    for name in engines:
        if name == reference_name:
            continue
        verdict, at_short = _engine_verdict(model, name, judged, sources[name][0])
        verdicts.append(verdict)
        if not verdict.run.refusal:
            served.append((verdict.run, at_short))
    trained: list[EngineVerdict] | None = None
    pairs: list[PairVerdict] = []
    if trainers is not None:
        trained = []
        for name in trainers:
            verdict, at_short = judged(sources[name][0])
            trained.append(verdict)
            if not verdict.run.refusal:
                pairs += [_pair(verdict.run, at_short, engine, engine_short) for engine, engine_short in served]
    to_install = [hint for name in dict.fromkeys(names) if installed and (hint := _install_hint(name))]
    return CheckReport(model.model_type, max_model_len, reference, verdicts, short, trainers=trained, pairs=pairs,
                       installed=installed, notes=notes, to_install=to_install)


def _install_hint(name: str) -> str | None:
    """``package==version`` (the version posenc is proven against) when posenc can run ``name``'s installed package
    but it is not importable here; None otherwise."""
    module = registry.load_installed(name)
    if module is None or module.version() is not None:
        return None
    package, version = _proven(name)
    return f"{package}=={version}"


def _engine_verdict(model: ModelPositions, name: str, judged: _Judge,
                    runner: Runner | None = None) -> tuple[EngineVerdict, EngineRun | None]:
    """One engine's (or trainer's) verdict against transformers, and its run at the short length (None: none):
    what ``posenc check`` reports for it and what ``posenc scale --engine`` prints (:func:`judge`). ``runner``:
    the row's runner (:func:`source_of`), else the modelled one."""
    engine = registry.entry(name).kind == ENGINE
    refusal = remote_code.check_refusal(model.engine, name) if engine and model.engine is not None else None
    if refusal is not None:  # an engine-only mechanism the engine model does not cover, or will not serve
        return EngineVerdict(_refused(name, judged.max_model_len, refusal), []), None
    return judged(runner or registry.load(name).run)


def judge(model: ModelPositions, cfg: dict[str, Any], name: str, max_model_len: int,
          model_name: str = "MODEL") -> Judgement:
    """``name``'s verdict (an engine or a trainer of the registry) on ``model`` served (or trained) at
    ``max_model_len``, against transformers': the same function, and the same numbers, as that engine's row of
    :func:`check` (which calls it once per engine). ``name`` must not be transformers itself (the reference)."""
    if name == registry.names(ENGINE)[0]:
        raise PosencError("transformers is the reference: it has no verdict against itself")
    registry.entry(name)
    if model.family != "rope" or not model.layers:
        return Judgement(None, max_model_len, None, no_rope=model.family)
    if model.engine is not None and model.engine.remote_code:
        report = _without_reference(model, [name] if registry.entry(name).kind == ENGINE else [], max_model_len,
                                    None if registry.entry(name).kind == ENGINE else [name])
        return Judgement((report.verdicts + (report.trainers or []))[0], max_model_len, None,
                         no_reference=report.no_reference)
    judged, short = _judge_for(model, cfg, max_model_len, model_name)
    return Judgement(_engine_verdict(model, name, judged, source_of(name, False)[0])[0], max_model_len, short)


def _judge_for(model: ModelPositions, cfg: dict[str, Any], max_model_len: int,
               model_name: str, reference_run: Runner | None = None) -> tuple[_Judge, int | None]:
    """transformers' runs (at the serving length and, for length-dependent rope, at the short length) bound to a
    judge of any engine, and that short length (None: none). ``reference_run``: transformers' runner (the
    installed one's, :func:`source_of`), else posenc's."""
    short = _length_dependent(model)
    short = short if short is not None and short < max_model_len else None
    if reference_run is None:
        reference = hf.run(model, cfg, max_model_len)
        short_reference = hf.short_run(model, cfg, short) if short is not None else None
    else:
        reference = reference_run(model, cfg, max_model_len, None)
        short_reference = reference_run(model, cfg, short, short) if short is not None else None
    return _Judge(model, cfg, max_model_len, model_name, reference, short_reference), short


def _refused(name: str, max_model_len: int, refusal: str) -> EngineRun:
    """``name``'s run that did not happen, and why."""
    return EngineRun(name, registry.load(name).version, max_model_len, [], [], refusal=refusal)


def _pair(trainer: EngineRun, trainer_short: EngineRun | None, engine: EngineRun,
          engine_short: EngineRun | None) -> PairVerdict:
    """The trainer's numbers against the engine's, group by group (the engine in the reference's place)."""
    position = max(trainer.max_model_len - 1, 0)
    by_name = {g.name: g for g in engine.groups}
    groups = [group_verdict(by_name[g.name], g, position) for g in trainer.groups]
    if trainer_short is not None and engine_short is not None:
        short_by_name = {g.name: g for g in engine_short.groups}
        for v, g in zip(groups, trainer_short.groups, strict=True):
            at = group_verdict(short_by_name[g.name], g, max(trainer_short.max_model_len - 1, 0))
            v.short_diff, v.short_worst_pair = at.inv_freq_rel_diff, at.worst_pair
            v.same = v.same and at.same
    return PairVerdict(trainer.engine, engine.engine, groups)


def _without_reference(model: ModelPositions, engines: list[str], max_model_len: int,
                       trainers: list[str] | None = None) -> CheckReport:
    """A remote-code family: transformers runs the model's own code, which posenc does not, so there is no reference
    and no engine is compared (each says why; ``posenc inspect`` has the engine's own numbers)."""
    assert model.engine is not None
    reference_name = registry.names(ENGINE)[0]
    verdicts = [EngineVerdict(_refused(name, max_model_len, remote_code.check_refusal(model.engine, name) or ""), [])
                for name in engines if name != reference_name]
    why = (f"transformers needs trust_remote_code for {model.engine.family}; posenc does not run the model's own "
           "code, so it has no transformers numbers to compare with")
    trained = None if trainers is None else [
        EngineVerdict(_refused(name, max_model_len, f"not modelled: {why}"), []) for name in trainers]
    return CheckReport(model.model_type, max_model_len, None, verdicts, no_reference=why, trainers=trained)


def check_source(source: str, engines: list[str], ctx: int | None = None, trainers: list[str] | None = None, *,
                 revision: str | None = None, installed: bool = False) -> tuple[CheckReport, str]:
    """``posenc check``: the model of ``source`` (any source posenc reads, at ``revision``) checked by :func:`check`
    at ``ctx`` tokens (None: the model's native window, the longest of its layer groups'), and the source's label.
    """
    # the source reader loads here, not with the module: `posenc scale --engine ENGINE` judges a request without it
    from posenc_cli.models.sources import describe_source, read_source, served_name

    src = read_source(source, revision=revision)
    model = describe_source(src)
    if ctx is not None:
        length = ctx
    elif model.family != "rope" or not model.layers:
        length = model.max_position_embeddings or 0
    elif model.max_position_embeddings:
        length = max(served.native for layer in model.layers if (served := window_of(model, layer)))
    else:
        raise PosencError(f"{src.label} names no max_position_embeddings: pass {{ctx}}", "ctx")
    report = check(model, src.config, engines, length, served_name(src), trainers, installed=installed)
    return report, src.label
