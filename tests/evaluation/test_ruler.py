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
