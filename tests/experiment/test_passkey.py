"""`posenc experiment passkey`: the byte vocabulary against llama.cpp's and Hugging Face's tokenizers, the training
data, reproducible --quick runs, the exports (GGUF and a transformers folder) against posenc's torch model, and the
committed fixture (tests/fixtures/passkey) run by llama.cpp and transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, ok, run

from posenc_cli.evaluation import bytevocab
from posenc_cli.evaluation.templates import build_prompt, load_template

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "passkey"
TEXTS = ["the key is 12345. what is the key? the key is ", "hello, world! (x=1; y=[2])", "café é", "  two  spaces ",
         "tab\tnew\nline", ""]

# Logit tolerance between posenc's torch model, transformers' LlamaForCausalLM and llama.cpp (all float32, one
# thread, float32 KV cache in llama.cpp). Measured on the committed fixture (prompt seeds 5 and 6, logits of
# magnitude up to about 23): torch vs transformers at most 1.3e-5 (256 tokens) and 2.2e-5 (512); llama.cpp vs either
# at most 2.5e-5 (256) and 1.2e-4 (512): float32 summation order in the matmuls and softmax, llama.cpp's own RoPE
# (sin/cos of its own angles) and RMSNorm kernels, growing with length. 1e-3 is 8x the worst of those and still
# far below what a wrong q/k permutation, theta, eps or tensor mapping gives (logits move by O(1)).
LOGIT_ATOL = 1e-3


# ---------------------------------------------------------------- the vocabulary

def test_bytevocab_round_trip_and_ids() -> None:
    assert len(bytevocab.pieces()) == len(bytevocab.token_types()) == bytevocab.VOCAB_SIZE == 260
    assert bytevocab.encode("a b") == [1, ord("a") + 3, 259, ord("b") + 3]
    assert bytevocab.encode("é") == [1, 0xC3 + 3, 0xA9 + 3]
    for text in TEXTS:
        ids = bytevocab.encode(text)
        assert bytevocab.count(text) == len(ids)
        assert bytevocab.decode(ids) == text
        assert bytevocab.decode(ids + [bytevocab.EOS]) == text
    with pytest.raises(ValueError):
        bytevocab.decode([260])


def test_bytevocab_matches_hf_tokenizers(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(bytevocab.hf_tokenizer_json()), encoding="utf-8")
    tok = tokenizers.Tokenizer.from_file(str(path))
    for text in TEXTS:
        ids = tok.encode(text).ids
        assert ids == bytevocab.encode(text), text
        assert tok.decode(ids) == text


def test_bytevocab_matches_llamacpp() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(FIXTURE / "passkey.gguf"), vocab_only=True, verbose=False)
    try:
        for text in TEXTS:
            ids = llm.tokenize(text.encode(), add_bos=True, special=False)
            assert ids == bytevocab.encode(text), text
            assert llm.detokenize(ids[1:]).decode() == text
    finally:
        llm.close()


def test_fixture_hf_tokenizer_loads_in_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(FIXTURE / "hf"))
    for text in TEXTS:
        assert tok(text).input_ids == bytevocab.encode(text), text
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (1, 2, 0)


# ---------------------------------------------------------------- training data

def test_training_sequences_have_their_intended_lengths() -> None:
    pytest.importorskip("torch")
    from posenc_cli.experiment.passkey import ANSWER_EXTRA, batches, settings_for

    settings = settings_for(steps=None, seed=3, quick=False)
    template = load_template("passkey")
    data = batches(template, settings)
    seen_lengths = set()
    for _ in range(12):
        batch = next(data)
        assert len(batch) == settings.batch
        length = batch[0].length
        seen_lengths.add(length)
        assert settings.min_len <= length <= settings.max_len
        for ex in batch:
            assert ex.length == length and ex.prompt_tokens == length  # exactly the asked-for token count
            assert len(ex.ids) == length + template.key_digits + ANSWER_EXTRA <= settings.shape.max_position_embeddings
            prompt = bytevocab.decode(ex.ids[:ex.prompt_tokens])
            assert ex.ids[0] == bytevocab.BOS and prompt.endswith(template.question)
            assert template.needle.replace("{key}", ex.key) in prompt
            assert bytevocab.decode(ex.ids[ex.prompt_tokens:]) == ex.key
            assert ex.ids[-1] == bytevocab.EOS
    assert len(seen_lengths) > 1
    # the same seed gives the same data
    again = next(batches(template, settings_for(steps=None, seed=3, quick=False)))
    assert [e.ids for e in again] == [e.ids for e in next(batches(template, settings))]


def test_eval_prompts_are_built_like_training_prompts() -> None:
    template = load_template("passkey")
    for length in (48, 64, 256, 512):
        p = build_prompt(template, length=length, depth=0.5, seed=1, count=bytevocab.count)
        assert p.tokens == length == len(bytevocab.encode(p.text))


# ---------------------------------------------------------------- --quick runs, reproducibility

@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    pytest.importorskip("torch")
    runs = {}
    for label, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        out = tmp_path_factory.mktemp(f"passkey-{label}")
        result = ok(run("experiment", "passkey", "--quick", "--seed", seed, "--json", "--out", str(out)))
        runs[label] = (out, json.loads(result.stdout))
    return runs


def test_quick_run_writes_everything(quick_runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    out, result = quick_runs["a"]
    for name in ("passkey.gguf", "train.json", "hf/config.json", "hf/model.safetensors", "hf/tokenizer.json",
                 "hf/tokenizer_config.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "train.json").read_text()) == result
    assert result["steps"] == 30 and result["seed"] == 0
    assert set(result["pass_rate"]) == {"64", "128", "256"}
    assert result["command"][:3] == ["posenc", "experiment", "passkey"]
    config = json.loads((out / "hf" / "config.json").read_text())
    assert config["max_position_embeddings"] == 256 and config["rope_theta"] == 10000.0
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert not list(out.rglob(".*.tmp"))


def test_quick_runs_are_reproducible(quick_runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    (a, ra), (b, rb), (c, _) = quick_runs["a"], quick_runs["b"], quick_runs["c"]
    for name in ("passkey.gguf", "hf/model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
        assert (a / name).read_bytes() != (c / name).read_bytes(), name
    timing = ("train_seconds", "wall_seconds", "command")  # the clock and the --out folder differ
    assert {k: v for k, v in ra.items() if k not in timing} == {k: v for k, v in rb.items() if k not in timing}


# ---------------------------------------------------------------- the exports against the torch model

def _prompt_ids(length: int, depth: float = 0.3, seed: int = 5) -> list[int]:
    p = build_prompt(load_template("passkey"), length=length, depth=depth, seed=seed, count=bytevocab.count)
    return bytevocab.encode(p.text)


def _three_logits(folder: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Logits of posenc's torch model, transformers (from_pretrained) and llama.cpp (None without llama_cpp)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from posenc_cli.experiment.export import read_safetensors
    from posenc_cli.experiment.passkey import LlamaShape, TinyLlama

    config = json.loads((folder / "hf" / "config.json").read_text())
    model = TinyLlama(LlamaShape(hidden_size=config["hidden_size"], intermediate_size=config["intermediate_size"],
                                 num_hidden_layers=config["num_hidden_layers"],
                                 num_attention_heads=config["num_attention_heads"],
                                 num_key_value_heads=config["num_key_value_heads"]))
    state = {k: torch.from_numpy(v) for k, v in read_safetensors(folder / "hf" / "model.safetensors").items()}
    model.load_state_dict(state)
    model.eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder / "hf"), dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    with torch.no_grad():
        ours = model(torch.tensor([ids]))[0].numpy()
        theirs = hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0].numpy()
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return ours, theirs, None
    from llamacpp_harness import llamacpp_logits

    return ours, theirs, llamacpp_logits(folder / "passkey.gguf", ids, n_ctx=max(256, len(ids)))


@pytest.mark.numeric
def test_quick_export_same_logits_everywhere(quick_runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    ours, hf, cpp = _three_logits(quick_runs["a"][0], _prompt_ids(200))
    np.testing.assert_allclose(hf, ours, rtol=0, atol=LOGIT_ATOL)
    if cpp is not None:
        np.testing.assert_allclose(cpp, ours, rtol=0, atol=LOGIT_ATOL)


# ---------------------------------------------------------------- the committed fixture

@pytest.mark.numeric
@pytest.mark.parametrize("length", [256, 512])
def test_fixture_same_logits_everywhere(length: int) -> None:
    ours, hf, cpp = _three_logits(FIXTURE, _prompt_ids(length))
    np.testing.assert_allclose(hf, ours, rtol=0, atol=LOGIT_ATOL)
    if cpp is not None:
        np.testing.assert_allclose(cpp, ours, rtol=0, atol=LOGIT_ATOL)
        np.testing.assert_allclose(cpp, hf, rtol=0, atol=LOGIT_ATOL)


def test_fixture_train_json() -> None:
    info = json.loads((FIXTURE / "train.json").read_text())
    assert info["command"] == ["posenc", "experiment", "passkey", "--out", "tests/fixtures/passkey", "--seed", "0"]
    assert info["wall_seconds"] < 600 and info["settings"]["threads"] == 1
    rates = info["pass_rate"]
    assert set(rates) == {"64", "128", "192", "256", "384", "512"}
    assert min(rates[k] for k in ("64", "128", "192", "256")) >= 0.9  # retrieves at the trained length
    assert rates["512"] < 0.5  # and plain RoPE does not extrapolate to 2x


def test_fixture_served_by_llamacpp_answers() -> None:
    """Text in, text out through llama.cpp's own tokenizer and greedy sampling: the key at a trained length."""
    llama_cpp = pytest.importorskip("llama_cpp")
    template = load_template("passkey")
    llm = llama_cpp.Llama(model_path=str(FIXTURE / "passkey.gguf"), n_ctx=256, n_threads=1, seed=0, verbose=False)
    try:
        hits = 0
        for i, depth in enumerate((0.0, 0.5, 1.0)):
            p = build_prompt(template, length=128, depth=depth, seed=4242 + i, count=bytevocab.count)
            reply = llm.create_completion(p.text, max_tokens=template.max_tokens, temperature=0.0)
            hits += template.score(p.key, reply["choices"][0]["text"])
        assert hits >= 2
    finally:
        llm.close()


# ---------------------------------------------------------------- the CLI's input checks

@pytest.mark.parametrize(("args", "needle"), [
    (["--steps", "0"], "--steps 0"),
    (["--steps", "x"], "--steps"),
    (["--seed", "-1"], "--seed -1"),
])
def test_bad_options_are_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    pytest.importorskip("torch")
    assert_usage_error(run("experiment", "passkey", "--out", str(tmp_path / "o"), *args), needle)


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    f = tmp_path / "file"
    f.write_text("x")
    assert_usage_error(run("experiment", "passkey", "--quick", "--out", str(f)), "not a folder")
    assert_usage_error(run("experiment", "passkey", "--quick"), "--out")
