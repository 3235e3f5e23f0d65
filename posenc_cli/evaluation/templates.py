"""Needle / passkey prompts of an exact token length, from a small YAML template (stdlib + PyYAML; no numpy).

A template is data, read with ``yaml.safe_load`` semantics and checked strictly (unknown keys are errors)::

    version: 1
    name: passkey
    description: one line
    prefix: "text before the haystack"        # may be ""
    filler: ["sentence one. ", "sentence two. "]   # the haystack: these sentences in a seeded random order
    needle: "the pass key is {key}. "         # must contain {key}
    question: "what is the pass key? the pass key is "
    key: {digits: 5}                          # the secret: that many random decimal digits (first one not 0)
    match: digits                             # digits: the first run of digits in the reply equals the key
                                              # exact: the reply, stripped, equals the key
    max_tokens: 6                             # tokens the server may generate for the answer

A prompt is ``prefix + before + needle + after + question`` where ``before + after`` is one stretch of filler cut
into two at a sentence boundary: ``depth`` is the fraction of the filler's characters before the needle (0: right
after the prefix, 1: right before the question). The filler is cut short, mid-sentence if need be, just before the
question, so that the whole prompt is exactly ``length`` tokens as counted by the caller's ``count`` (the server's
tokenizer, or a local one, including any BOS token the server adds). The same function builds the tiny model's
training sequences (``posenc experiment passkey``), so training and evaluation see one format.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import TASKS
from posenc_cli.evaluation.ruler import Task, TaskSet, parse_task, parse_task_set
from posenc_cli.files import read_text
from posenc_cli.pick.rules import SAFE_LOADER, shipped_path

#: Templates shipped in the wheel (``rules/templates/NAME.yaml``).
SHIPPED = ("passkey", "needle")
#: Task sets shipped (``rules/templates/NAME.yaml``): RULER's no-download tasks.
TASK_SETS = ("ruler",)
MATCHES = ("digits", "exact")
_KEYS = {"version", "name", "description", "prefix", "filler", "needle", "question", "key", "match", "max_tokens"}
_DIGITS = re.compile(r"\d+")


class TemplateError(PosencError):
    """A template file is missing, not YAML, or not a valid template."""


class LengthError(PosencError):
    """No prompt of the requested length can be built (too short for the fixed text, or past the filler)."""


@dataclass(frozen=True)
class Template:
    name: str
    description: str
    prefix: str
    filler: tuple[str, ...]
    needle: str
    question: str
    key_digits: int
    match: str
    max_tokens: int
    source: str  # the file's path, or "NAME (shipped)"

    def make_key(self, rng: random.Random) -> str:
        first = str(rng.randint(1, 9))
        return first + "".join(str(rng.randint(0, 9)) for _ in range(self.key_digits - 1))

    def score(self, key: str, reply: str) -> bool:
        """Deterministic answer matching: no judge, no model."""
        if self.match == "exact":
            return reply.strip() == key
        found = _DIGITS.search(reply)
        return found is not None and found.group(0) == key

    def fixed_tokens(self, count: Callable[[str], int]) -> int:
        """Tokens of the prompt with no filler (the shortest prompt) plus the answer's."""
        return count(self.prefix + self.needle.replace("{key}", "9" * self.key_digits) + self.question) + \
            self.max_tokens

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "prefix": self.prefix,
                "filler": list(self.filler), "needle": self.needle, "question": self.question,
                "key": {"digits": self.key_digits}, "match": self.match, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class Prompt:
    text: str
    key: str
    tokens: int  # the prompt's length by the counter used to build it
    depth: float  # the depth actually reached: filler characters before the needle / all filler characters
    needle_char: int  # where the needle starts in ``text``


def _read(spec: str | Path | None) -> tuple[Any, str]:
    text_spec = str(spec) if spec is not None else "passkey"
    if text_spec in (*SHIPPED, *TASK_SETS, *TASKS):
        path, label = shipped_path("templates", f"{text_spec}.yaml"), f"{text_spec} (shipped)"
    else:
        path, label = Path(text_spec), text_spec
        if not path.exists() and "/" not in text_spec and not text_spec.endswith((".yaml", ".yml")):
            raise TemplateError(f"--template {text_spec!r}: not a file and not a shipped template "
                                f"(shipped: {', '.join((*SHIPPED, *TASK_SETS, *TASKS))})")
    try:
        data = yaml.load(read_text(path, label, kind="template file", error=TemplateError), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{label}: YAML error: {str(exc).splitlines()[0]}") from None
    return data, label


def load_template(spec: str | Path | None = None) -> Template:
    """A shipped template by name (default ``passkey``) or a template file by path. Raises :class:`TemplateError`."""
    data, label = _read(spec)
    if isinstance(data, dict) and ("task" in data or "tasks" in data):
        raise TemplateError(f"{label}: a RULER task or task set, not a needle template (give passkey, needle or a "
                            "template file)")
    return parse_template(data, label)


def load_task(spec: str) -> Task:
    """One RULER task: a shipped name (:data:`posenc_cli.evaluation.ruler.TASKS`) or a task file."""
    data, label = _read(spec)
    if not isinstance(data, dict) or "task" not in data:
        raise TemplateError(f"{label}: not a RULER task file (no `task` key)")
    return parse_task(data, label)


def load_any(spec: str | Path | None = None) -> Template | TaskSet:
    """What ``eval run --template`` takes: a needle template, a RULER task (run as a set of one) or a task set."""
    data, label = _read(spec)
    if isinstance(data, dict) and "tasks" in data:
        return parse_task_set(data, label, load_task)
    if isinstance(data, dict) and "task" in data:
        task = parse_task(data, label)
        return TaskSet(task.name, task.description, (task,), label)
    return parse_template(data, label)


def parse_template(data: Any, label: str = "<template>") -> Template:
    def fail(message: str) -> TemplateError:
        return TemplateError(f"{label}: {message}")

    if not isinstance(data, dict):
        raise fail("a template is a mapping of " + ", ".join(sorted(_KEYS)))
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_KEYS))})")
    missing = sorted(k for k in ("version", "name", "filler", "needle", "question", "key", "match") if k not in data)
    if missing:
        raise fail(f"missing key {missing[0]!r}")
    if data["version"] != 1:
        raise fail(f"version {data['version']!r} is not supported (allowed: 1)")
    strings = {k: data.get(k, "") for k in ("name", "description", "prefix", "needle", "question")}
    for key, value in strings.items():
        if not isinstance(value, str):
            raise fail(f"{key} must be a string, not {type(value).__name__}")
    if not strings["name"]:
        raise fail("name must not be empty")
    if strings["needle"].count("{key}") < 1 or re.search(r"\{(?!key\})", strings["needle"]):
        raise fail(f"needle {strings['needle']!r} must contain {{key}} and no other {{...}} field")
    filler = data["filler"]
    if not isinstance(filler, list) or not filler or not all(isinstance(s, str) and s for s in filler):
        raise fail("filler must be a non-empty list of non-empty strings")
    key = data["key"]
    if not isinstance(key, dict) or set(key) != {"digits"}:
        raise fail(f"key must be {{digits: N}}, not {key!r}")
    digits = key["digits"]
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 64:
        raise fail(f"key digits {digits!r} must be an integer from 1 to 64")
    if data["match"] not in MATCHES:
        raise fail(f"match {data['match']!r} is not one of {', '.join(MATCHES)}")
    max_tokens = data.get("max_tokens", 16)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 4096:
        raise fail(f"max_tokens {max_tokens!r} must be an integer from 1 to 4096")
    if any(ch.isdigit() for ch in strings["prefix"] + strings["question"] + "".join(filler)) and \
            data["match"] == "digits":
        raise fail("match: digits needs prefix, filler and question free of digits (the key must be the only one)")
    return Template(name=strings["name"], description=strings["description"], prefix=strings["prefix"],
                    filler=tuple(filler), needle=strings["needle"], question=strings["question"],
                    key_digits=digits, match=data["match"], max_tokens=max_tokens, source=label)


def _filler_text(template: Template, rng: random.Random, chars: int) -> tuple[str, list[int]]:
    """At least ``chars`` characters of filler in a seeded order, and the offsets where its sentences start."""
    parts: list[str] = []
    starts: list[int] = []
    total = 0
    while total < chars:
        sentence = template.filler[rng.randrange(len(template.filler))]
        starts.append(total)
        parts.append(sentence)
        total += len(sentence)
    starts.append(total)
    return "".join(parts), starts


def assemble(template: Template, key: str, filler: str, starts: list[int], n: int, depth: float) -> tuple[str, int,
                                                                                                          float]:
    """The prompt with ``n`` filler characters, the needle at the sentence boundary nearest ``depth``."""
    import bisect

    want = depth * n
    i = bisect.bisect_left(starts, want)
    candidates = [s for s in (starts[max(i - 1, 0)], starts[min(i, len(starts) - 1)]) if s <= n]
    cut = min(candidates or [0], key=lambda s: (abs(s - want), s))
    needle = template.needle.replace("{key}", key)
    head = template.prefix + filler[:cut]
    text = head + needle + filler[cut:n] + template.question
    return text, len(head), (cut / n if n else depth)


def build_prompt(template: Template, *, length: int, depth: float, seed: int,
                 count: Callable[[str], int]) -> Prompt:
    """A prompt of exactly ``length`` tokens by ``count`` (or the longest shorter one when none is exact).

    ``seed`` fixes the key and the filler order. ``count`` is called a handful of times: once on the fixed text,
    once on a filler sample for the characters-per-token estimate, then on candidates (secant steps, then
    bisection).
    """
    if not 0.0 <= depth <= 1.0:
        raise LengthError(f"depth {depth} is outside 0..1")
    rng = random.Random(seed)
    key = template.make_key(rng)
    fixed_text = template.prefix + template.needle.replace("{key}", key) + template.question
    fixed = count(fixed_text)
    if fixed > length:
        raise LengthError(f"length {length}: the template's fixed text alone is {fixed} tokens")
    sample, _ = _filler_text(template, random.Random(seed), 400)
    # the sample's marginal count (beside the fixed text, so a BOS is not counted twice)
    per_token = max(len(sample) / max(count(fixed_text + sample) - fixed, 1), 0.25)
    filler, starts = _filler_text(template, rng, int((length - fixed + 8) * per_token * 1.5) + 64)

    cache: dict[int, tuple[int, str, int, float]] = {}

    def measure(n: int) -> tuple[int, str, int, float]:
        if n not in cache:
            text, at, reached = assemble(template, key, filler, starts, n, depth)
            cache[n] = (count(text), text, at, reached)
        return cache[n]

    lo, hi = 0, len(filler)  # invariant once known: tokens(lo) <= length < tokens(hi) (hi may be unmeasured)
    n = min(int((length - fixed) * per_token), hi)
    for _ in range(12):  # secant steps: converge in one or two for a character-level tokenizer
        got = measure(n)[0]
        if got == length:
            break
        if got < length:
            lo = max(lo, n)
        else:
            hi = min(hi, n)
        step = round((length - got) * per_token) or (1 if got < length else -1)
        n = min(max(n + step, lo), hi)
        if n in cache:
            break
    else:
        got = measure(n)[0]
    if measure(n)[0] != length:
        if measure(hi)[0] <= length and hi == len(filler):
            raise LengthError(f"length {length}: filler ran out (internal estimate of characters per token)")
        while hi - lo > 1:  # bisection on the bracket the secant steps left
            mid = (lo + hi) // 2
            if measure(mid)[0] <= length:
                lo = mid
            else:
                hi = mid
        n = lo
    tokens, text, at, reached = measure(n)
    return Prompt(text=text, key=key, tokens=tokens, depth=reached, needle_char=at)
