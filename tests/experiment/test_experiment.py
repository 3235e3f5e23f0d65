"""`posenc experiment`: --quick runs of both tasks through the CLI, reproducibility, the files --out writes, input
checks, the install hint without torch, and the torch encodings against posenc's numpy core and `scale`'s numbers.

The ordering of methods the papers report is not asserted: runs this small are noisy (the README reports it).
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, ok, run

torch = pytest.importorskip("torch")

from posenc_cli.experiment.model import (  # noqa: E402
    ModelConfig,
    TinyLM,
    alibi_bias_torch,
    apply_rope_half,
    rope_cos_sin,
    rotary_for,
    sinusoidal_table,
)
from posenc_cli.rope.encodings import alibi_bias, apply_rope, rope_inv_freq, sinusoidal  # noqa: E402
from posenc_cli.rope.frequencies import RopeSpec, compute  # noqa: E402

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-6


def numbers(results: dict[str, Any]) -> dict[str, Any]:
    """Everything but the wall-clock timings (which vary run to run)."""
    return {k: v for k, v in results.items() if k != "timing"}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("lm")
    result = ok(run("experiment", "lm", "--quick", "--json", "--out", str(out)))
    return json.loads(result.stdout), out


@pytest.fixture(scope="module")
def copy_run() -> dict[str, Any]:
    return json.loads(ok(run("experiment", "copy", "--quick", "--json")).stdout)


# ---------------------------------------------------------------- the quick runs


def test_lm_quick_learns_and_beats_the_unigram_baseline(lm_run: tuple[dict[str, Any], Path]) -> None:
    results, _ = lm_run
    s = results["settings"]
    assert results["metric"] == "bits_per_byte" and s["quick"] is True
    assert list(results["results"]) == ["nope", "sinusoidal", "learned", "rope", "rope+linear", "rope+ntk",
                                        "rope+yarn", "alibi"]
    assert set(results["training"]) == {"nope", "sinusoidal", "learned", "rope", "alibi"}
    for kind, tr in results["training"].items():
        assert tr["loss_last"] < tr["loss_first"] - 0.5, (kind, tr)
    baseline = results["baseline"]["value"]
    assert 3.0 < baseline < 8.0
    train_len = str(s["train_len"])
    for method, series in results["results"].items():
        assert list(series) == [str(n) for n in s["eval_lens"]]
        assert series[train_len] < baseline, (method, series[train_len], baseline)
        for length, value in series.items():
            if method == "learned" and int(length) > s["train_len"]:
                assert value is None  # past the learned table: not applicable
            else:
                assert value is not None and math.isfinite(value) and value > 0, (method, length, value)
    assert any("learned" in note and "not applicable" in note for note in results["notes"])
    # at the training length the scalings are the identity: the same numbers as plain RoPE
    for method in ("rope+linear", "rope+ntk", "rope+yarn"):
        assert results["results"][method][train_len] == results["results"]["rope"][train_len]


def test_lm_out_writes_results_chart_and_command(lm_run: tuple[dict[str, Any], Path]) -> None:
    results, out = lm_run
    # .posenc.lock stays (holding the last run's pid): see posenc_cli.folderlock for why it is never removed
    assert sorted(p.name for p in out.iterdir()) == [".posenc.lock", "chart.png", "command.txt", "results.json"]
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == results
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = (out / "command.txt").read_text(encoding="utf-8").splitlines()
    argv = shlex.split(lines[0])
    assert argv[:3] == ["posenc", "experiment", "lm"]
    assert argv[argv.index("--seed") + 1] == "0" and argv[argv.index("--out") + 1] == str(out)
    assert argv[argv.index("--steps") + 1] == str(results["settings"]["steps"])
    assert "seed: 0" in lines


def test_copy_quick_learns(copy_run: dict[str, Any]) -> None:
    results = copy_run
    s = results["settings"]
    assert results["metric"] == "copy_accuracy"
    assert results["baseline"]["value"] == pytest.approx(1 / s["vocab"])
    for kind, tr in results["training"].items():
        assert tr["loss_last"] < tr["loss_first"], (kind, tr)
    for method, series in results["results"].items():
        for length, value in series.items():
            if method == "learned" and int(length) > s["train_len"]:
                assert value is None
            else:
                assert value is not None and 0.0 <= value <= 1.0, (method, length, value)


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    args = ["experiment", "lm", "--quick", "--json", "--methods", "nope,rope+yarn,alibi", "--steps", "15"]
    first = json.loads(ok(run(*args)).stdout)
    again = json.loads(ok(run(*args)).stdout)
    other = json.loads(ok(run(*args, "--seed", "1")).stdout)
    assert numbers(first) == numbers(again)
    assert first["results"] != other["results"]
    args = ["experiment", "copy", "--quick", "--json", "--methods", "alibi", "--steps", "10"]
    assert numbers(json.loads(ok(run(*args)).stdout)) == numbers(json.loads(ok(run(*args)).stdout))


def test_table_output_and_text_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400, encoding="utf-8")
    result = ok(run("experiment", "lm", "--quick", "--text", str(corpus), "--methods", "rope,rope+ntk",
                    "--train-len", "32", "--eval-lens", "1x,2x", "--steps", "20"))
    out = result.stdout
    assert "bits per byte" in out and "32 (train)" in out and "rope+ntk" in out and "unigram" in out
    assert "rope " in out and "alibi" not in out


# ---------------------------------------------------------------- bad input: one line, exit 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["lm", "--methods", "rope,xpos"], "'xpos' is not known"),
        (["lm", "--methods", ","], "--methods is empty"),
        (["lm", "--train-len", "0"], "--train-len"),
        (["lm", "--train-len", "-5"], "--train-len"),
        (["lm", "--steps", "0"], "--steps"),
        (["lm", "--steps", "-3"], "--steps"),
        (["lm", "--eval-lens", "0"], "--eval-lens"),
        (["lm", "--train-len", "5", "--eval-lens", "1.5x"], "not a whole number"),
        (["lm", "--eval-lens", "2y"], "--eval-lens"),
        (["lm", "--eval-lens", "64k"], "longer than"),
        (["copy", "--train-len", "33"], "even length"),
        (["copy", "--eval-lens", "1x,75"], "even length"),
        (["lm", "--device", "tpu"], "--device"),
        (["lm", "--text", "/no/such/corpus.txt"], "no such file"),
        (["lm", "--seed", "-1"], "--seed"),
    ],
)
def test_bad_input_is_one_error_line(args: list[str], needle: str) -> None:
    assert_usage_error(run("experiment", *args), needle)


def test_cuda_without_cuda_is_one_error_line() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_usage_error(run("experiment", "lm", "--quick", "--device", "cuda"), "--device cuda")


def test_too_short_text_and_out_on_a_file(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("x" * 200, encoding="utf-8")
    assert_usage_error(run("experiment", "lm", "--quick", "--text", str(short), "--steps", "1"), "too little")
    enough = tmp_path / "enough.txt"
    enough.write_text("abcdefgh" * 200, encoding="utf-8")
    assert_usage_error(run("experiment", "lm", "--quick", "--text", str(enough), "--train-len", "16",
                           "--eval-lens", "512", "--steps", "1"), "held-out part")
    a_file = tmp_path / "taken"
    a_file.write_text("", encoding="utf-8")
    assert_usage_error(run("experiment", "lm", "--quick", "--out", str(a_file)), "not a folder")


BLOCK_TORCH = textwrap.dedent("""
    import sys
    from importlib.abc import MetaPathFinder

    class BlockTorch(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError("No module named " + repr(name), name=name)
            return None

    sys.meta_path.insert(0, BlockTorch())
    {extra}
    sys.argv = ["posenc", "experiment", "lm", "--quick"]
    from posenc_cli.cli import main
    main()
""")


@pytest.mark.parametrize("argv", [["lm", "--quick", "--methods", "rope"], ["copy", "--quick"], ["passkey", "--quick"]],
                         ids=["lm", "copy", "passkey"])
def test_a_folder_another_process_holds_is_refused_before_training(tmp_path: Path, argv: list[str]) -> None:
    """flock locks are per open file: this test's own hold() conflicts with the command's as another process's."""
    from posenc_cli.folderlock import hold

    out = tmp_path / "out"
    with hold(out):
        result = run("experiment", *argv, "--out", str(out))
    assert_usage_error(result, f"--out {out}", "is using this folder")
    assert [p.name for p in out.iterdir()] == [".posenc.lock"]  # nothing trained, nothing written


@pytest.mark.parametrize("extra", ["", "sys.modules['torch'] = None"], ids=["finder", "sys.modules"])
def test_without_torch_the_command_prints_the_install_hint(extra: str) -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH.replace("{extra}", extra)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr == "error: posenc experiment needs torch: pip install 'posenc[experiment]'\n"


# ---------------------------------------------------------------- torch encodings == posenc's numpy core


HEAD_DIM = 32
TRAIN = 128


def scale_config(method: str, target: int) -> dict[str, Any]:
    """What `posenc scale METHOD --engine hf-v5` prints for the experiment's model."""
    result = ok(run("scale", method, "--original-max", str(TRAIN), "--target", str(target),
                    "--head-dim", str(HEAD_DIM), "--theta", "10000", "--engine", "hf-v5"))
    return dict(json.loads(result.stdout))


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn"])
@pytest.mark.parametrize("eval_len", [256, 1024])
def test_scaled_rope_frequencies_equal_scale_and_frequencies(method: str, eval_len: int) -> None:
    rot = rotary_for(method, TRAIN, eval_len, HEAD_DIM)
    cfg = scale_config(method, eval_len)
    expected = compute(RopeSpec(cfg["rope_parameters"], HEAD_DIM, cfg["max_position_embeddings"]))
    assert rot.inv_freq.dtype == torch.float32
    np.testing.assert_allclose(rot.inv_freq.numpy(), expected.inv_freq, rtol=RTOL, atol=0)
    assert rot.attention_factor == pytest.approx(expected.attention_factor, rel=RTOL)
    factor = eval_len / TRAIN
    base = rope_inv_freq(HEAD_DIM, 10000.0, dtype=np.float32)
    if method == "linear":
        np.testing.assert_allclose(rot.inv_freq.numpy(), base / np.float32(factor), rtol=RTOL)
    elif method == "ntk":
        theta = 10000.0 * factor ** (HEAD_DIM / (HEAD_DIM - 2))
        np.testing.assert_allclose(rot.inv_freq.numpy(), rope_inv_freq(HEAD_DIM, theta, dtype=np.float32),
                                   rtol=RTOL)
    else:
        assert rot.attention_factor == pytest.approx(0.1 * math.log(factor) + 1.0, rel=RTOL)


def test_plain_rope_and_factor_one_are_the_trained_frequencies() -> None:
    base = rope_inv_freq(HEAD_DIM, 10000.0, dtype=np.float32)
    np.testing.assert_allclose(rotary_for(None, TRAIN, 1024, HEAD_DIM).inv_freq.numpy(), base, rtol=RTOL)
    for method in ("linear", "ntk", "yarn"):
        for length in (64, TRAIN):  # shorter than or equal to the training length: factor 1
            rot = rotary_for(method, TRAIN, length, HEAD_DIM)
            np.testing.assert_allclose(rot.inv_freq.numpy(), base, rtol=RTOL)
            assert rot.attention_factor == 1.0


@pytest.mark.parametrize("method", [None, "linear", "ntk", "yarn"])
def test_torch_rope_rotation_equals_numpy_apply_rope_half(method: str | None) -> None:
    length = 300
    rot = rotary_for(method, TRAIN, 512, HEAD_DIM)
    x = np.random.default_rng(0).standard_normal((2, 4, length, HEAD_DIM)).astype(np.float32)
    got = apply_rope_half(torch.from_numpy(x), *rope_cos_sin(rot, length)).numpy()
    want = apply_rope(x, np.arange(length), inv_freq=rot.inv_freq.numpy(), layout="rotate-half",
                      attention_factor=rot.attention_factor)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)


def test_rope_model_rotates_queries_and_keys_with_the_given_frequencies() -> None:
    """The RoPE model's attention equals a hand-rolled attention on numpy-rotated q and k."""
    torch.manual_seed(0)
    model = TinyLM(ModelConfig(vocab_size=50, d_model=64, n_layers=1, n_heads=2, kind="rope", max_len=16)).eval()
    tokens = torch.randint(0, 50, (1, 40))
    rot = rotary_for("yarn", 16, 40, 32)
    captured: dict[str, Any] = {}
    block = model.blocks[0]

    def grab(_module: Any, args: tuple[Any, ...], _output: Any) -> None:
        captured["y"] = args[0]  # the attention output, heads merged, before the projection

    block.proj.register_forward_hook(grab)
    with torch.no_grad():
        model(tokens, rot)
        h = block.ln1(model.embed(tokens))
        q, k, v = block.qkv(h).view(1, 40, 3, 2, 32).permute(2, 0, 3, 1, 4).numpy()
    pos = np.arange(40)
    qr = apply_rope(q, pos, inv_freq=rot.inv_freq.numpy(), layout="rotate-half", attention_factor=rot.attention_factor)
    kr = apply_rope(k, pos, inv_freq=rot.inv_freq.numpy(), layout="rotate-half", attention_factor=rot.attention_factor)
    scores = qr @ kr.swapaxes(-1, -2) / math.sqrt(32) + np.triu(np.full((40, 40), -np.inf), 1)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    want = (weights @ v).transpose(0, 2, 1, 3).reshape(1, 40, 64)
    np.testing.assert_allclose(captured["y"].numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads", [1, 4, 6, 8])
def test_torch_alibi_bias_equals_numpy_alibi_bias(heads: int) -> None:
    got = alibi_bias_torch(heads, 70).numpy()
    want = alibi_bias(heads, 70, causal=True, dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=0)


@pytest.mark.parametrize(("length", "d"), [(1, 8), (100, 64), (513, 128)])
def test_torch_sinusoidal_equals_numpy_sinusoidal(length: int, d: int) -> None:
    np.testing.assert_array_equal(sinusoidal_table(length, d).numpy(), sinusoidal(length, d, dtype=np.float32))


def test_sinusoidal_model_adds_posencs_table_to_the_embeddings() -> None:
    torch.manual_seed(0)
    model = TinyLM(ModelConfig(vocab_size=30, d_model=32, n_layers=1, n_heads=2, kind="sinusoidal",
                               max_len=8)).eval()
    tokens = torch.randint(0, 30, (2, 20))
    seen: dict[str, Any] = {}

    def grab(_module: Any, args: tuple[Any, ...]) -> None:
        seen["x"] = args[0]  # what the first block receives: embeddings plus positions

    model.blocks[0].register_forward_pre_hook(grab)
    with torch.no_grad():
        model(tokens)
        want = model.embed(tokens).numpy() + sinusoidal(20, 32, dtype=np.float32)
    np.testing.assert_allclose(seen["x"].numpy(), want, rtol=RTOL, atol=1e-6)


def test_learned_model_refuses_lengths_past_its_table() -> None:
    model = TinyLM(ModelConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, kind="learned", max_len=8))
    model(torch.zeros((1, 8), dtype=torch.long))
    with pytest.raises(ValueError, match="8 positions"):
        model(torch.zeros((1, 9), dtype=torch.long))
