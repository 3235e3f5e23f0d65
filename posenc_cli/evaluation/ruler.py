"""RULER's synthetic tasks that need no downloaded data, as eval templates (stdlib + PyYAML; no numpy).

RULER (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language Models?", NVIDIA/RULER)
as lm-evaluation-harness 0.4.13 ships it (``lm_eval/tasks/ruler``): the same task names, template text, needle
format, question and answer prefix, values (7-digit numbers, UUIDs, adjective-noun words from the ``wonderwords``
lists shipped in ``rules/templates/ruler-words.yaml``) and string-match metrics. A task file is data::

    version: 1
    name: niah_single_1
    description: one line
    task: niah                  # niah | vt (variable tracking) | cwe (common words) | fwe (frequent words)
    template: "... {context} ... {query} ..."       # the task's text; {type_needle_v} in niah
    answer_prefix: "The special magic ... are"      # appended after one space, as lm-eval's gen_prefix
    metric: string_match_all    # the fraction of the answers found in the reply; string_match_part: any found
    max_tokens: 128             # lm-eval's max_gen_toks
    # niah: needle, haystack (noise | essay | needle), keys / values (numbers | words | uuids),
    #       num_needle_k, num_needle_v, num_needle_q
    # vt: num_chains, num_hops;  cwe: freq_cw, freq_ucw, num_cw;  fwe: alpha, coded_wordlen

Differences from lm-eval, all forced by "exact length, no download": the prompt is exactly ``length`` tokens by
the caller's counter (lm-eval stops at the last haystack unit that fits, so its prompts are up to a few hundred
tokens short), so the haystack (or word list) is cut at a character, and the last unit may be cut mid-sentence; the
``essay`` haystack is seeded pseudo-sentences of the wonderwords words (lm-eval downloads Paul Graham's essays);
one seeded ``random.Random`` drives everything (lm-eval mixes the global generator with fixed seeds), and no value
or key appears twice in one prompt (lm-eval does not check).
"""

from __future__ import annotations

import math
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import TASKS  # noqa: F401 - named in the package (for --help without yaml), kept here
from posenc_cli.files import read_text
from posenc_cli.pick.rules import SAFE_LOADER, shipped_path

KINDS = {"niah": {"needle", "haystack", "keys", "values", "num_needle_k", "num_needle_v", "num_needle_q"},
         "vt": {"num_chains", "num_hops"}, "cwe": {"freq_cw", "freq_ucw", "num_cw"}, "fwe": {"alpha", "coded_wordlen"}}
COMMON = {"version", "name", "description", "task", "template", "answer_prefix", "metric", "max_tokens"}
METRICS = ("string_match_all", "string_match_part")
HAYSTACKS = ("noise", "essay", "needle")
VALUES = ("numbers", "words", "uuids")
#: RULER's "repeat" haystack (lm-eval's get_haystack("repeat")), also variable tracking's noise.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_NONPRINTABLE = re.compile(r"[\x00-\x1f]")


class TaskError(PosencError):
    """A RULER task file is not valid, or no prompt of the asked length can be built."""


class _RanOut(TaskError):
    """The generated haystack holds fewer tokens than the length asked (generate a larger one)."""


@dataclass(frozen=True)
class RulerPrompt:
    text: str
    answers: tuple[str, ...]
    tokens: int


@cache
def words() -> dict[str, list[str]]:
    """wonderwords 3.0.1's nouns, adjectives and verbs (rules/templates/ruler-words.yaml)."""
    path = shipped_path("templates", "ruler-words.yaml")
    data = yaml.load(read_text(path, "ruler-words.yaml", kind="word list", error=TaskError), Loader=SAFE_LOADER)
    return {k: list(data[k]) for k in ("nouns", "adjectives", "verbs")}


@cache
def cwe_words() -> list[str]:
    """lm-eval's cwe word list: the sorted union of nouns, adjectives and verbs, shuffled by Random(42)."""
    lists = words()
    out = sorted({w for k in ("nouns", "adjectives", "verbs") for w in lists[k]})
    random.Random(42).shuffle(out)
    return out


def postprocess(reply: str) -> str:
    """lm-eval's postprocess_pred: strip, control characters to newlines, strip again."""
    return _NONPRINTABLE.sub("\n", reply.strip()).strip()


def string_match_all(reply: str, answers: Sequence[str]) -> float:
    """The fraction of ``answers`` found (case-insensitive substring) in the reply (RULER / lm-eval)."""
    text = postprocess(reply).lower()
    return sum(1.0 if a.lower() in text else 0.0 for a in answers) / len(answers)


def string_match_part(reply: str, answers: Sequence[str]) -> float:
    """1 when any of ``answers`` is found in the reply, else 0 (RULER's metric for one sample)."""
    text = postprocess(reply).lower()
    return 1.0 if any(a.lower() in text for a in answers) else 0.0


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    kind: str
    template: str
    answer_prefix: str
    metric: str
    max_tokens: int
    params: tuple[tuple[str, Any], ...]
    source: str

    def param(self, key: str) -> Any:
        return dict(self.params)[key]

    def score(self, answers: Sequence[str], reply: str) -> float:
        """The task's metric on one reply: a fraction from 0 to 1 (lm-eval reports it x100)."""
        return (string_match_all if self.metric == "string_match_all" else string_match_part)(reply, answers)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "task": self.kind, "template": self.template,
                "answer_prefix": self.answer_prefix, "metric": self.metric, "max_tokens": self.max_tokens,
                **dict(self.params)}

    def build(self, *, length: int, seed: int, count: Callable[[str], int]) -> RulerPrompt:
        """A prompt of exactly ``length`` tokens by ``count`` (or the longest shorter one when none is exact)."""
        maker = {"niah": _niah, "vt": _vt, "cwe": _cwe, "fwe": _fwe}[self.kind]
        for scale in (1, 2, 4, 8):  # a haystack that ran out is generated again, larger (same seed)
            try:
                return maker(self, random.Random(seed), length, count, scale)
            except _RanOut:
                continue
        raise TaskError(f"length {length}: {self.name}'s haystack ran out (characters per token estimate)")


def parse_task(data: dict[str, Any], label: str) -> Task:
    def fail(message: str) -> TaskError:
        return TaskError(f"{label}: {message}")

    kind = data.get("task")
    if kind not in KINDS:
        raise fail(f"task {kind!r} is not one of {', '.join(KINDS)}")
    allowed = COMMON | KINDS[kind]
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} for a {kind} task (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(k for k in allowed - {"description"} if k not in data)
    if missing:
        raise fail(f"missing key {missing[0]!r}")
    if data["version"] != 1:
        raise fail(f"version {data['version']!r} is not supported (allowed: 1)")
    for key in ("name", "description", "template", "answer_prefix", *(("needle",) if kind == "niah" else ())):
        if not isinstance(data.get(key, ""), str):
            raise fail(f"{key} must be a string")
    if "{context}" not in data["template"]:
        raise fail("template must contain {context}")
    if data["metric"] not in METRICS:
        raise fail(f"metric {data['metric']!r} is not one of {', '.join(METRICS)}")
    for key in sorted(allowed - {"version", "name", "description", "task", "template", "answer_prefix", "metric",
                                 "needle", "haystack", "keys", "values", "alpha"}):
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise fail(f"{key} {value!r} must be an integer from 1 to 4096")
    if kind == "niah":
        if data["haystack"] not in HAYSTACKS:
            raise fail(f"haystack {data['haystack']!r} is not one of {', '.join(HAYSTACKS)}")
        for key in ("keys", "values"):
            if data[key] not in VALUES:
                raise fail(f"{key} {data[key]!r} is not one of {', '.join(VALUES)}")
        if not all(f in data["needle"] for f in ("{key}", "{value}")):
            raise fail("needle must contain {key} and {value}")
    if kind == "fwe" and (isinstance(data["alpha"], bool) or not isinstance(data["alpha"], (int, float))
                          or not 1.0 < data["alpha"] <= 10.0):
        raise fail(f"alpha {data['alpha']!r} must be a number above 1 and at most 10")
    params = tuple(sorted((k, data[k]) for k in KINDS[kind]))
    return Task(name=data["name"], description=data.get("description", ""), kind=kind, template=data["template"],
                answer_prefix=data["answer_prefix"], metric=data["metric"], max_tokens=data["max_tokens"],
                params=params, source=label)


@dataclass(frozen=True)
class TaskSet:
    """Tasks an eval run sends together (a task set file, or one task): every task at every length and trial."""

    name: str
    description: str
    tasks: tuple[Task, ...]
    source: str

    @property
    def max_tokens(self) -> int:
        return max(t.max_tokens for t in self.tasks)

    def task(self, name: str) -> Task:
        return next(t for t in self.tasks if t.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "tasks": [t.as_dict() for t in self.tasks]}


def parse_task_set(data: dict[str, Any], label: str, load: Callable[[str], Task]) -> TaskSet:
    """A task set file: ``version: 1``, ``name``, ``description`` (optional), ``tasks`` (names or paths)."""
    unknown = sorted(set(data) - {"version", "name", "description", "tasks"})
    if unknown:
        raise TaskError(f"{label}: unknown key {unknown[0]!r} (allowed: description, name, tasks, version)")
    if data.get("version") != 1:
        raise TaskError(f"{label}: version {data.get('version')!r} is not supported (allowed: 1)")
    names = data.get("tasks")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise TaskError(f"{label}: tasks must be a non-empty list of task names or files")
    tasks = tuple(load(n) for n in names)
    twice = sorted({t.name for t in tasks if [u.name for u in tasks].count(t.name) > 1})
    if twice:
        raise TaskError(f"{label}: task {twice[0]!r} appears twice")
    name, description = data.get("name"), data.get("description", "")
    if not isinstance(name, str) or not name or not isinstance(description, str):
        raise TaskError(f"{label}: name must be a non-empty string, description a string")
    return TaskSet(name, description, tasks, label)


# ------------------------------------------------------------------------------------------------ exact length

def fit(make: Callable[[int], str], limit: int, length: int, count: Callable[[str], int], what: str) -> tuple[str,
                                                                                                              int]:
    """The text ``make(n)`` whose count is ``length`` (or the longest below it), ``n`` from 0 to ``limit``.

    ``make`` grows with ``n`` (a haystack of ``n`` characters); counts need not be strictly monotone (BPE merges
    across a cut): bisection keeps ``count(make(lo)) <= length < count(make(hi))``."""
    cache: dict[int, tuple[int, str]] = {}

    def measure(n: int) -> int:
        if n not in cache:
            text = make(n)
            cache[n] = (count(text), text)
        return cache[n][0]

    if measure(0) > length:
        raise TaskError(f"length {length}: {what}'s fixed text alone is {measure(0)} tokens")
    if measure(limit) <= length:
        raise _RanOut(f"length {length}: {what}'s haystack ran out")
    lo, hi = 0, limit
    n = min(max(round(limit * (length - measure(0)) / max(measure(limit) - measure(0), 1)), 1), limit - 1)
    for _ in range(8):  # secant steps toward the target, then bisection on the bracket
        got = measure(n)
        if got == length:
            return cache[n][1], got
        if got < length:
            lo = max(lo, n)
        else:
            hi = min(hi, n)
        per = n / max(got - measure(0), 1)
        step = round((length - got) * per) or (1 if got < length else -1)
        n = min(max(n + step, lo), hi)
        if n in cache:
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if measure(mid) <= length:
            lo = mid
        else:
            hi = mid
    return cache[lo][1], measure(lo)


def _chars_for(length: int, count: Callable[[str], int], sample: str) -> int:
    """Characters of ``sample``-like text that surely hold ``length`` tokens (the haystack to generate)."""
    per = len(sample) / max(count(sample + sample) - count(sample), 1)
    return int(max(per, 0.25) * length * 1.5) + 256


class _Unique:
    """Random keys and values, never one twice in a prompt."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set[str]()

    def draw(self, kind: str) -> str:
        while True:
            value = self._one(kind)
            if value not in self.used:
                self.used.add(value)
                return value

    def _one(self, kind: str) -> str:
        rng = self.rng
        if kind == "numbers":
            return str(rng.randint(10 ** 6, 10 ** 7 - 1))  # lm-eval's generate_random_number(7)
        if kind == "uuids":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        lists = words()  # lm-eval's WORDS: every adjective-noun pair
        return f"{rng.choice(lists['adjectives'])}-{rng.choice(lists['nouns'])}"


def _insert(units: list[str], sep: str, items: Sequence[str], fractions: Sequence[float]) -> Callable[[int], str]:
    """``make(n)``: the first ``n`` characters of ``units`` joined by ``sep``, each of ``items`` inserted (as a unit
    of its own, in order) at the unit start nearest its fraction of ``n``."""
    import bisect

    text = sep.join(units)
    starts = [0]
    for unit in units[:-1]:
        starts.append(starts[-1] + len(unit) + len(sep))

    def make(n: int) -> str:
        cuts = []
        for f in fractions:
            i = bisect.bisect_right(starts, f * n) - 1
            options = [s for s in starts[max(i, 0):i + 2] if s < n] or [0]
            cuts.append(min(options, key=lambda s: (abs(s - f * n), s)))
        out, at = [], 0
        for cut, item in zip(cuts, items, strict=True):
            out += [text[at:cut], item, sep]
            at = cut
        out.append(text[at:n])
        return "".join(out)

    return make


def _niah(task: Task, rng: random.Random, length: int, count: Callable[[str], int], scale: int) -> RulerPrompt:
    p = dict(task.params)
    num_q, num_v = p["num_needle_q"], p["num_needle_v"]
    num_k = max(p["num_needle_k"], num_q)
    draw = _Unique(rng)
    keys, values, needles = [], [], []
    type_v = p["values"]
    for _ in range(num_k):
        keys.append(draw.draw(p["keys"]))
        values.append([draw.draw(type_v) for _ in range(num_v)])
        needles += [p["needle"].format(type_needle_v=type_v, key=keys[-1], value=v) for v in values[-1]]
    rng.shuffle(needles)
    picked = rng.sample(range(num_k), num_q)
    queries = [keys[i] for i in picked]
    answers = tuple(a for i in picked for a in values[i])
    query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    template, prefix = task.template, task.answer_prefix
    if num_q * num_v == 1:  # lm-eval's singular wording
        for a, b in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            template, prefix = template.replace(a, b), prefix.replace(a, b)
        type_v = type_v[:-1]
    head, tail = template.format(type_needle_v=type_v, context="\0", query=query).split("\0")
    tail += " " + prefix.format(type_needle_v=type_v, query=query)
    sep = " " if p["haystack"] == "essay" else "\n"
    sample = NOISE if p["haystack"] == "noise" else p["needle"].format(type_needle_v=type_v, key=keys[0], value="1")
    chars = _chars_for(length, count, sample + sep) * scale
    units = _haystack(p, rng, draw, chars)
    make = _insert(units, sep, needles, sorted(rng.random() for _ in needles))
    limit = len(sep.join(units))
    text, tokens = fit(lambda n: head + make(n) + tail, limit, length, count, task.name)
    return RulerPrompt(text, answers, tokens)


def _haystack(p: dict[str, Any], rng: random.Random, draw: _Unique, chars: int) -> list[str]:
    units: list[str] = []
    total = 0
    while total < chars:
        if p["haystack"] == "noise":
            unit = NOISE
        elif p["haystack"] == "needle":  # distractors: the needle with other keys and values (lm-eval's "needle")
            unit = p["needle"].format(type_needle_v=p["values"], key=draw.draw(p["keys"]),
                                      value=draw.draw(p["values"]))
        else:  # pseudo-essay: seeded sentences of wonderwords words (lm-eval downloads Paul Graham's essays)
            lists = words()
            pool = lists["adjectives"], lists["nouns"], lists["verbs"], lists["nouns"]
            unit = " ".join(rng.choice(pool[i % 4]) for i in range(rng.randint(6, 14))).capitalize() + "."
        units.append(unit)
        total += len(unit) + 1
    return units


def _vt_text(task: Task, rng: random.Random, used: set[str], noises: int, letters: int,
             hops: int) -> tuple[Callable[[int], str], int, tuple[str, ...], str]:
    """Variable tracking's ``make(n)``, its limit, the answer (the chain's variables) and its value."""
    chains: list[list[str]] = []
    names: list[list[str]] = []
    for _ in range(task.param("num_chains")):
        these: list[str] = []
        while len(these) < hops + 1:
            name = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(letters))
            if name not in used:
                used.add(name)
                these.append(name)
        value = str(rng.randint(10000, 99998))
        while value in used:
            value = str(rng.randint(10000, 99998))
        used.add(value)
        names.append(these)
        chains.append([f"VAR {these[0]} = {value}"] + [f"VAR {these[j + 1]} = VAR {these[j]} " for j in range(hops)])
    units = [NOISE + "\n"] * noises
    items: list[str] = []
    spots: list[float] = []
    for chain in chains:  # each chain in order, at sorted random places (lm-eval inserts the same way)
        items += chain
        spots += sorted(rng.random() for _ in chain)
    order = sorted(range(len(items)), key=lambda i: spots[i])
    make = _insert(units, " ", [items[i] for i in order], [spots[i] for i in order])
    return make, len(" ".join(units)), tuple(names[0]), chains[0][0].split("=")[-1].strip()


def _vt(task: Task, rng: random.Random, length: int, count: Callable[[str], int], scale: int) -> RulerPrompt:
    hops = task.param("num_hops")
    used: set[str] = set()
    # the in-context example lm-eval prepends: 3-letter names, at most 10 hops, the most noise (in steps of 5
    # lines) that keeps it and the answer's tokens within 500, followed by its answer
    example, noises = "", 5
    while noises <= 400:
        make_e, limit_e, names_e, value_e = _vt_text(task, random.Random(rng.random()), set(), noises, 3,
                                                      min(10, hops))
        candidate = _vt_fill(task, make_e(limit_e), value_e, min(10, hops)) + " " + " ".join(names_e) + "\n\n"
        if example and count(candidate) + task.max_tokens > 500:
            break
        example, noises = candidate, noises + 5
    used |= set(re.findall(r"VAR ([A-Z]{3}) ", example)) | set(re.findall(r"\b\d{5}\b", example))
    noises = max(_chars_for(length, count, NOISE) * scale // len(NOISE), 2)
    make, limit, names, value = _vt_text(task, rng, used, noises, 5, hops)

    def text(n: int) -> str:
        return example + "\n\n" + _vt_fill(task, make(n), value, hops)

    prompt, tokens = fit(text, limit, length, count, task.name)
    return RulerPrompt(prompt, names, tokens)


def _vt_fill(task: Task, context: str, value: str, hops: int) -> str:
    body = task.template.format(context=context.replace(". \n", ".\n"), query=value, num_v=hops + 1)
    return body + " " + task.answer_prefix.format(query=value, num_v=hops + 1)


def _cwe(task: Task, rng: random.Random, length: int, count: Callable[[str], int], scale: int) -> RulerPrompt:
    num_cw = task.param("num_cw")
    freq_cw, freq_ucw = (task.param("freq_cw"), task.param("freq_ucw")) if length >= 4096 else (6, 1)
    head, tail = task.template.format(context="\0", query="").split("\0")
    head, tail = head.lstrip(), tail.rstrip() + " " + task.answer_prefix
    pool = cwe_words()
    seed = rng.random()

    def listing(num_words: int) -> tuple[list[str], str]:
        draw = random.Random(seed)  # the same words and order for any size: only the size is searched
        chosen = draw.sample(pool, min(max(num_words, num_cw + 1), len(pool)))
        common, uncommon = chosen[:num_cw], chosen[num_cw:]
        listed = common * freq_cw + uncommon * freq_ucw
        draw.shuffle(listed)
        return common, " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed))

    # size the list so that it holds about 5% more tokens than the prompt has room for (RULER sizes it to fit;
    # the cut below then drops a few entries, not a fraction of every word's repeats)
    room = length - count(head + tail)
    common, context = listing(num_cw + 200)
    per_word = max(count(context) - count(""), 1) / (num_cw + 200)
    factor = 1.05 * scale
    while True:  # grow by 10% until the list is longer than the room (the estimate can be short)
        num_words = num_cw + int((room * factor / per_word - num_cw) * (num_cw + 200) /
                                 (num_cw * freq_cw + 200 * freq_ucw)) + 1
        common, context = listing(num_words)
        if count(head + context + tail) > length or num_words >= len(pool):
            break
        factor *= 1.1
    prompt, tokens = fit(lambda n: head + context[:n] + tail, len(context), length, count, task.name)
    # entries are "N. word" joined by spaces; some wonderwords entries hold a space ("ice cream")
    seen = Counter(re.split(r"(?:^| )\d+\. ", prompt[len(head):len(prompt) - len(tail)])[1:])
    rest = max((c for w, c in seen.items() if w not in common), default=0)
    if min(seen[w] for w in common) <= rest:
        raise TaskError(f"length {length}: too short for cwe (its common words are not the most common once cut)")
    return RulerPrompt(prompt, tuple(common), tokens)


def zeta(s: float) -> float:
    """Riemann zeta for s > 1 (scipy.special.zeta, which lm-eval uses): sum to N plus Euler-Maclaurin tail."""
    n = 1000.0
    head = math.fsum(float(k) ** -s for k in range(1, 1000))
    tail: float = n ** (1 - s) / (s - 1) + n ** -s / 2 + s * n ** (-s - 1) / 12 - \
        s * (s + 1) * (s + 2) * n ** (-s - 3) / 720
    return head + tail


def _fwe(task: Task, rng: random.Random, length: int, count: Callable[[str], int], scale: int) -> RulerPrompt:
    alpha, wordlen = float(task.param("alpha")), task.param("coded_wordlen")
    vocab_size = max(length // 50, 8)  # lm-eval's default: max_seq_length // 50
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(wordlen)) for _ in range(vocab_size * 2)})
    rng.shuffle(vocab)
    vocab = vocab[:vocab_size]
    vocab[0] = "..."  # the top rank is noise (lm-eval)
    head, tail = task.template.format(context="\0", query="").split("\0")
    tail = tail + " " + task.answer_prefix
    per_word = max(count(" abcdef" * 40) - count(" abcdef"), 1) / 39
    num_words = int(length / per_word * 1.3 * scale) + 64
    total = zeta(alpha)
    sampled = [w for k, w in enumerate(vocab, start=1) for _ in range(int(num_words * k ** -alpha / total))]
    rng.shuffle(sampled)
    context = " ".join(sampled)
    prompt, tokens = fit(lambda n: head + context[:n] + tail, len(context), length, count, task.name)
    return RulerPrompt(prompt, tuple(vocab[1:4]), tokens)
