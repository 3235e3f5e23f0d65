"""``posenc inspect`` from a source to its answer (:func:`inspect_source`): the source read, its report
(:mod:`.inspection`, numpy), its GGUF section, and with ``--lint`` the problems found (the lint rules load only
then)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.models.gguf.metadata import GgufFacts, llama_cpp_meaning
from posenc_cli.models.inspection import report
from posenc_cli.models.model_types import newer_transformers_notice
from posenc_cli.models.sources import describe_source, read_source
from posenc_cli.units import parse_length


class Inspected(NamedTuple):
    """``posenc inspect``'s answer: the report (with its source, GGUF and lint sections), and with ``--lint`` the
    problems found and the oldest transformers that reads the config (None without ``--lint``)."""

    result: dict[str, Any]
    problems: list[dict[str, str]] | None = None
    oldest: dict[str, str] | None = None

    @property
    def code(self) -> ExitCode:
        """A lint error fails the check; warnings alone do not."""
        errors = any(p.get("severity", "error") == "error" for p in self.problems or ())
        return ExitCode.CHECK_FAILED if errors else ExitCode.OK


def inspect_source(source: str, revision: str | None = None, seq_len: str | None = None, *, lint: bool = False,
                   note: Callable[[str], None]) -> Inspected:
    """Read ``source`` (a config.json or ``-``, a folder, a Hub id at ``revision``, a GGUF) and report it at
    ``seq_len`` (None: the model's window). With ``lint``, an unreadable config is a finding, not an error. The
    note on a transformers newer than posenc's model-type data goes to ``note``."""
    length = parse_length(seq_len, name="--seq-len") if seq_len is not None else None
    src = read_source(source, revision=revision)
    problems: list[dict[str, str]] = []
    if lint:  # the lint rules and transformers' version table load only for --lint
        from posenc_cli.models.lint import IMPOSSIBLE, lint_config, oldest_reader, unreadable
    notice = newer_transformers_notice()
    if notice:
        note(notice)
    try:
        model = describe_source(src)
        result = report(model, length)
        if model.family == "rope" and model.layers:
            _trained_length(result, model, src)
    except PosencError as exc:
        if not lint:
            raise
        # --lint asks what is wrong with the config: an unreadable one is a finding, not a usage error
        findings = lint_config(src.config, None)
        if not any(p.code == IMPOSSIBLE for p in findings):  # else the findings already name the value refused
            findings.append(unreadable(str(exc)))
        problems = [p.as_dict() for p in findings]
        result = {"model_type": src.config.get("model_type"), "family": "unreadable", "summary": str(exc)}
        model = None
    result["source"] = {"kind": src.kind, "label": src.label, "path": src.path}
    if src.gguf is not None:
        result["gguf"] = gguf_section(src.gguf)
    if not lint:
        return Inspected(result)
    if model is not None:
        problems = [p.as_dict() for p in lint_config(src.config, model)]
    result["lint"] = problems
    found = oldest_reader(src.config)
    oldest = {"version": found[0], "because": found[1]} if found else None
    result["oldest_transformers"] = oldest
    return Inspected(result, problems, oldest)


def _trained_length(result: dict[str, Any], model: Any, src: Any) -> None:
    """The length the model was trained at beside the window it serves (docs/conventions.md, "The trained length"):
    ``trained_length`` and, where the reach past it is training-free, ``serving`` and the note saying why."""
    from posenc_cli.models.facts import model_facts

    try:
        facts = model_facts(model, src.label, cfg=src.config)
    except PosencError:  # a family posenc does not extend: its window is all the file says
        facts = None
    result["trained_length"] = facts.trained if facts is not None else None
    result["serving"] = facts.serving if facts is not None and facts.serving else None
    result["trained_note"] = facts.window_note if facts is not None and facts.training_free else None


def gguf_section(facts: GgufFacts) -> dict[str, Any]:
    """A GGUF's part of the report: its architecture, metadata, rope tensors and what llama.cpp makes of them."""
    tensors = {name: values for name, values in (("rope_freqs.weight", facts.rope_freqs),
                                                 ("rope_factors_long.weight", facts.rope_factors_long),
                                                 ("rope_factors_short.weight", facts.rope_factors_short))
               if values is not None}
    return {"architecture": facts.architecture, "has_rope_freqs": facts.has_rope_freqs, "metadata": facts.keys,
            "rope_tensors": tensors, "llama_cpp": llama_cpp_meaning(facts)}
