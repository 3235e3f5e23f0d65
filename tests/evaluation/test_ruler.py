"""RULER's tasks (posenc_cli.evaluation.ruler): exact lengths for every task and tokenizer, values never repeated,
answers scorable, the text and metrics of lm-evaluation-harness 0.4.13."""

from __future__ import annotations

import ast
import importlib.util
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.ruler import TASKS, TaskError, string_match_all, string_match_part, words
from posenc_cli.evaluation.templates import TemplateError, load_any, load_task
from posenc_cli.evaluation.tokens import local_counter

RULER = load_any("ruler")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real byte-level BPE tokenizer.json (the ``tokenizers`` package, trained here on English text and the task
    words), read through posenc's local counter like a model's: multi-character tokens, merges across a cut."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    lists = words()
    corpus = [" ".join(lists["nouns"][i:i + 50]) for i in range(0, len(lists["nouns"]), 50)]
    corpus += [" ".join(lists["adjectives"]), " ".join(lists["verbs"]), "The grass is green. The sky is blue. " * 50,
               "One of the special magic numbers for pretty-cat is: 1234567. " * 20, "0123456789 abcdef-" * 30]
    trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def _counters(bpe: str) -> dict[str, object]:
    return {"bytes": bytevocab.count, "bpe": local_counter(bpe),
            "passkey tokenizer.json": local_counter("tests/fixtures/passkey/hf/tokenizer.json")}


@pytest.mark.parametrize("name", TASKS)
def test_exact_length_every_tokenizer(name: str, bpe: str) -> None:
    task = RULER.task(name)
    for label, count in _counters(bpe).items():
        for length in (4096, 6000):
            prompt = task.build(length=length, seed=7, count=count)  # type: ignore[arg-type]
            assert prompt.tokens == length == count(prompt.text), (label, length)  # type: ignore[operator]
            assert all(a in prompt.text for a in prompt.answers)
            assert task.score(prompt.answers, " ".join(prompt.answers)) == 1.0
            assert task.score(prompt.answers, "none") == 0.0


@pytest.mark.parametrize("name", TASKS)
def test_values_never_repeated_and_seeded(name: str) -> None:
    task = RULER.task(name)
    one = task.build(length=8192, seed=1, count=bytevocab.count)
    assert one == task.build(length=8192, seed=1, count=bytevocab.count)
    assert one.text != task.build(length=8192, seed=2, count=bytevocab.count).text
    assert len(set(one.answers)) == len(one.answers)
    if task.kind == "niah":
        values = re.findall(r"is: (\S+)\.", one.text)
        keys = re.findall(r"for (\S+) is: ", one.text)
        assert len(values) == len(set(values))
        assert len(set(keys)) == len(keys) // task.param("num_needle_v")  # multivalue: one key, several values
        assert all(one.text.count(f"is: {a}.") == 1 for a in one.answers)
    if task.kind == "vt":
        assigned = re.findall(r"VAR ([A-Z]+) = ", one.text)
        assert len(assigned) == len(set(assigned))
        numbers = re.findall(r"VAR [A-Z]+ = (\d+)", one.text)
        assert len(numbers) == len(set(numbers))
    if task.kind == "cwe":
        listed = Counter(re.split(r"(?:^| )\d+\. ", one.text.split("\n")[1])[1:])
        top = {w for w, _ in listed.most_common(10)}
        assert top == set(one.answers) and listed.most_common(11)[10][1] < min(listed[a] for a in one.answers)
    if task.kind == "fwe":
        counts = Counter(one.text.split("coded words. ")[1].split("\n")[0].split())
        ranked = [w for w, _ in counts.most_common() if w != "..."]
        assert ranked[:3] == list(one.answers)


def test_task_files_are_strict(tmp_path: Path) -> None:
    text = Path("rules/templates/niah_single_1.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "colour: red\n")
    with pytest.raises(TaskError, match="unknown key 'colour'"):
        load_task(str(bad))
    bad.write_text(text.replace("metric: string_match_all", "metric: judge"))
    with pytest.raises(TaskError, match="metric 'judge'"):
        load_task(str(bad))
    bad.write_text("version: 1\nname: mix\ntasks: [vt, vt]\n")
    with pytest.raises(TaskError, match="appears twice"):
        load_any(str(bad))
    bad.write_text("version: 1\nname: mix\ntasks: [vt]\nweights: [1]\n")
    with pytest.raises(TaskError, match="unknown key 'weights'"):
        load_any(str(bad))
    with pytest.raises(TemplateError, match="not a shipped template"):
        load_any("niah_single_9")
    assert [t.name for t in RULER.tasks] == list(TASKS)


def test_word_lists_are_wonderwords() -> None:
    wonderwords = pytest.importorskip("wonderwords")
    categories = wonderwords.RandomWord()._categories  # what RULER and lm-eval read
    assert words() == {k: list(categories[k]) for k in ("nouns", "adjectives", "verbs")}


# ----------------------------------------------------------------------------------- lm-evaluation-harness 0.4.13

@pytest.fixture(autouse=True)
def _seeded_generators() -> Any:
    """lm-eval's generators draw from the global ``random`` and ``numpy.random`` states: seeded here so that a
    comparison does not depend on what ran before it (lm-eval 0.4.13's ``generate_chains`` fails with an IndexError
    on the rare draw where two 3-letter variable names collide in an in-context example), restored after."""
    import random

    import numpy as np

    state, np_state = random.getstate(), np.random.get_state()
    random.seed(20261207)
    np.random.seed(20261207)
    yield
    random.setstate(state)
    np.random.set_state(np_state)


def _lm_eval_source(name: str) -> str:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or spec.origin is None:
        pytest.skip("lm_eval is not installed (pip install --no-deps lm_eval==0.4.13)")
    return (Path(spec.origin).parent / "tasks" / "ruler" / name).read_text()


def _constant(source: str, name: str) -> object:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found")


def test_text_is_lm_evals() -> None:
    """Template, needle, question and answer prefix as lm-eval's source has them (its generators import datasets,
    nltk and scipy, which this environment does not install: the constants are read from the source with ast)."""
    niah = _lm_eval_source("niah_utils.py")
    prepare = _lm_eval_source("prepare_niah.py")
    for name in TASKS[:8]:
        task = RULER.task(name)
        assert task.template == _constant(niah, "TEMPLATE")
        assert task.param("needle") == _constant(prepare, "NEEDLE")
        assert f'f"{task.answer_prefix}"' in prepare.replace("{type_needle_v}", "{type_needle_v}")
        assert task.max_tokens == 128
        assert f"custom_dataset: !function niah_utils.{name}" in _lm_eval_source(f"{name}.yaml")
    assert _constant(prepare, "NEEDLE") == "One of the special magic {type_needle_v} for {key} is: {value}."
    for name, file, tokens in (("vt", "vt_utils.py", 30), ("cwe", "cwe_utils.py", 120), ("fwe", "fwe_utils.py", 50)):
        config = _constant(_lm_eval_source(file), "CONFIG")
        assert isinstance(config, dict)
        config = config.get("variable_tracking", config)
        task = RULER.task(name)
        assert (task.template, task.answer_prefix, task.max_tokens) == (
            config["template"], config["answer_prefix"].strip(), config["tokens_to_generate"])
        assert task.max_tokens == tokens
    noise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
    assert noise in prepare and noise in RULER.task("niah_single_1").build(
        length=1024, seed=0, count=bytevocab.count).text


def test_niah_single_prompt_structure() -> None:
    """niah_single_1 reads as lm-eval's: singular wording, the needle on its own line, the gen_prefix after a space."""
    prompt = RULER.task("niah_single_1").build(length=2048, seed=3, count=bytevocab.count)
    (value,) = prompt.answers
    assert prompt.text.startswith("A special magic number is hidden within the following text. Make sure to "
                                  "memorize it. I will quiz you about the number afterwards.\n")
    key = re.search(rf"\nOne of the special magic numbers for (\S+) is: {value}\.\n", prompt.text)
    assert key is not None
    assert prompt.text.endswith(f"\nWhat is the special magic number for {key.group(1)} mentioned in the provided "
                                f"text? The special magic number for {key.group(1)} mentioned in the provided text is")


def _common_utils() -> Any:
    """lm-eval's common_utils.py loaded from its file: it imports only transformers, while importing it as
    lm_eval.tasks.ruler.common_utils runs lm_eval/tasks/__init__ (datasets, not installed here)."""
    _lm_eval_source("common_utils.py")
    spec = importlib.util.find_spec("lm_eval")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "tasks" / "ruler" / "common_utils.py"
    loaded = importlib.util.spec_from_file_location("lm_eval_ruler_common_utils", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


replies = st.text(alphabet=st.sampled_from("ab12 -\n\x01XYZ"), max_size=30)
answer_lists = st.lists(st.text(alphabet=st.sampled_from("ab12-XY"), min_size=1, max_size=4), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(reply=replies, answers=answer_lists)
def test_scores_are_lm_evals(reply: str, answers: list[str]) -> None:
    """string_match_all / _part on one reply equal lm-eval's on the same reply (postprocess_pred first)."""
    common = _common_utils()
    pred = common.postprocess_pred([reply])
    assert string_match_all(reply, answers) == common.string_match_all(pred, [answers])
    # RULER's string_match_part (NVIDIA/RULER scripts/eval/synthetic/constants.py) is, per reply, the max over the
    # answers: 1 when any is found. lm-eval 0.4.13's divides the max over replies by the replies: on one reply it is
    # the fraction found (string_match_all's); no task here uses it (lm-eval: only qa_squad / qa_hotpot)
    found = [1.0 if a.lower() in pred[0].lower() else 0.0 for a in answers]
    assert string_match_part(reply, answers) == max(found)
    assert common.string_match_part(pred, [answers]) == sum(found) / len(found)
    doc = {"max_length": 4096, "outputs": answers}
    assert common.process_results(doc, [reply])["4096"] == string_match_all(reply, answers)


# ------------------------------------------------------------- lm-eval's own generators, run on the byte tokenizer

class _ByteTokenizer:
    """What lm-eval's generators call: ``tokenizer(text).input_ids`` (posenc's byte vocabulary, BOS included, or
    a tokenizer.json's ids)."""

    class _Ids:
        def __init__(self, ids: list[int]) -> None:
            self.input_ids = ids

    def __init__(self, path: str | None = None) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(path) if path else None

    def __call__(self, text: str) -> _ByteTokenizer._Ids:
        if self.tokenizer is None:
            return self._Ids(bytevocab.encode(text))
        return self._Ids(self.tokenizer.encode(text, add_special_tokens=True).ids)


def _lm_eval_module(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """lm-eval's ``tasks/ruler/NAME`` executed from its source. Its imports that this environment lacks and that the
    generators compared here do not use are stand-ins: ``datasets`` (only wraps the samples), ``nltk`` (only
    the essay haystack, a download, splits sentences with it; its punkt download at import is skipped), scipy's
    ``zeta`` (fwe's Zipf normaliser: posenc's, checked against pi^2/6 below). The adjective-noun key pool is cut to
    the first 20 adjectives (lm-eval builds all 6.2 million pairs at import)."""
    import sys
    import types

    from posenc_cli.evaluation.ruler import zeta

    source = _lm_eval_source(name)
    source = source.replace("\ndownload_nltk_resources()\n", "\n")
    source = source.replace("for adj in adjs for noun in nouns]", "for adj in adjs[:20] for noun in nouns]")
    common = _common_utils()
    source = re.sub(r"from lm_eval\.tasks\.ruler\.common_utils import \([^)]*\)\n", "", source)
    stubs = {"datasets": types.ModuleType("datasets"), "nltk": types.ModuleType("nltk"),
             "scipy": types.ModuleType("scipy"), "scipy.special": types.ModuleType("scipy.special")}
    stubs["nltk"].sent_tokenize = lambda text: text.split(". ")  # type: ignore[attr-defined]
    stubs["scipy.special"].zeta = zeta  # type: ignore[attr-defined]
    for key, module in stubs.items():
        if key not in sys.modules:
            monkeypatch.setitem(sys.modules, key, module)
    namespace: dict[str, Any] = {"__name__": f"lm_eval_ruler_{name[:-3]}", "DEFAULT_SEQ_LENGTHS": [4096],
                                 "get_tokenizer": common.get_tokenizer,
                                 "resolve_tokenizer_name": common.resolve_tokenizer_name}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - lm-eval's own source, to run its generator
    return types.SimpleNamespace(**namespace)


def _shape(text: str) -> str:
    """A prompt with its random parts replaced: keys, values, variable names, numbers, list entries, haystack runs."""
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "U", text)
    # keys are adjective-noun pairs whose words may hold spaces, hyphens, capitals or accents ("x-rated-SUV"):
    # shaped by where they stand, between "for" and what follows a key in a needle or question
    text = re.sub(r"(?<=\bfor ).+?(?= mentioned in the provided text| is: )", "K", text)
    text = re.sub(r"\b[A-Z]{3,5}\b", "V", text)
    text = re.sub(r"\d+", "N", text)
    return text


def _ends(text: str, head: int, tail: int) -> tuple[str, str]:
    """The first line (at most ``head`` characters: the task's instruction) and the last line (the question and
    answer prefix), shaped."""
    return _shape(text[:min(head, text.index("\n"))]), _shape(text[text.rindex("\n"):])


def test_niah_prompts_have_lm_evals_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-eval's generate_samples (prepare_niah.py) at 4096 byte tokens against posenc's prompt: the same header,
    needle lines, question and gen_prefix, the same number of needles, answers in the prompt."""
    prepare = _lm_eval_module("prepare_niah.py", monkeypatch)
    niah = _lm_eval_source("niah_utils.py")
    template = _constant(niah, "TEMPLATE")
    for name, haystack, k_type, v_type, kwargs in (
            ("niah_single_1", "repeat", "words", "numbers", {}),
            ("niah_multikey_2", "needle", "words", "numbers", {}),
            ("niah_multikey_3", "needle", "uuids", "uuids", {})):
        sample = prepare.generate_samples(prepare.get_haystack(haystack), _ByteTokenizer(), max_seq_length=4096,
                                          type_haystack=haystack, type_needle_k=k_type, type_needle_v=v_type,
                                          template=template, num_samples=1, **kwargs)[0]
        theirs = sample["input"] + " " + sample["gen_prefix"]
        ours = RULER.task(name).build(length=4096 - 128, seed=5, count=bytevocab.count)
        assert _ends(ours.text, 200, 250) == _ends(theirs, 200, 250), name
        assert len(ours.answers) == len(sample["outputs"]) == 1
        needle = r"One of the special magic (?:numbers?|uuids?) for .+? is: \S+\."
        for text in (ours.text, theirs):
            lines = [line for line in text.split("\n") if line.startswith("One of the special magic")]
            assert lines and all(re.fullmatch(needle, line) for line in lines[:-1]), name  # the last may be cut
        assert ours.text.count("One of the special magic") == theirs.count("One of the special magic") or \
            haystack == "needle"  # a needle haystack's count follows the cut
        assert bytevocab.count(theirs) <= 4096 - 128 == bytevocab.count(ours.text)


def test_vt_cwe_fwe_prompts_have_lm_evals_structure(monkeypatch: pytest.MonkeyPatch, bpe: str) -> None:
    """lm-eval's vt, cwe and fwe generators against posenc's prompts: the same instruction, question and answer
    prefix, as many answers. vt runs on the trained BPE: with the byte vocabulary lm-eval's 500-token in-context
    example cannot fit even 5 noise lines and its retry loop never ends (it only shrinks while above 5)."""
    vt = _lm_eval_module("vt_utils.py", monkeypatch)
    cwe = _lm_eval_module("cwe_utils.py", monkeypatch)
    fwe = _lm_eval_module("fwe_utils.py", monkeypatch)
    tokenizer = _ByteTokenizer()
    example = vt.sys_vartrack_w_noise_random(tokenizer=_ByteTokenizer(bpe), num_samples=1, max_seq_length=500,
                                             incremental=5)[0]
    sample = vt.sys_vartrack_w_noise_random(tokenizer=_ByteTokenizer(bpe), num_samples=1, max_seq_length=8192,
                                            icl_example=example)[0]
    theirs = sample["input"] + " " + sample["gen_prefix"]
    ours = RULER.task("vt").build(length=8192 - 30, seed=5, count=local_counter(bpe))
    assert _ends(ours.text, 160, 300) == _ends(theirs, 160, 300)
    assert len(ours.answers) == len(sample["outputs"]) == 5
    assert len(re.findall(r"VAR [A-Z]{5} = ", ours.text)) == len(re.findall(r"VAR [A-Z]{5} = ", theirs)) == 5
    assert len(re.findall(r"VAR [A-Z]{3} = ", ours.text)) == len(re.findall(r"VAR [A-Z]{3} = ", theirs)) == 5
    sample = cwe.sys_word_pair_random(num_samples=1, max_seq_length=8192, tokenizer=tokenizer)[0]
    theirs = sample["input"] + " " + sample["gen_prefix"]
    ours = RULER.task("cwe").build(length=8192 - 120, seed=5, count=bytevocab.count)
    assert _ends(ours.text, 130, 160) == _ends(theirs, 130, 160)
    assert len(ours.answers) == len(sample["outputs"]) == 10
    sample = fwe.sys_kwext(tokenizer=tokenizer, max_seq_length=8192, num_samples=1)[0]
    theirs = sample["input"] + " " + sample["gen_prefix"]
    ours = RULER.task("fwe").build(length=8192 - 50, seed=5, count=bytevocab.count)
    assert _ends(ours.text, 125, 260) == _ends(theirs, 125, 260)
    assert len(ours.answers) == len(sample["outputs"]) == 3


def test_zeta_is_riemanns() -> None:
    import math

    from posenc_cli.evaluation.ruler import zeta

    assert zeta(2.0) == pytest.approx(math.pi ** 2 / 6, rel=1e-14)
    assert zeta(4.0) == pytest.approx(math.pi ** 4 / 90, rel=1e-14)
