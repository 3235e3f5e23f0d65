"""``posenc check --installed``: the engines' and transformers' installed packages run by their own code
(posenc_cli/engines/installed/), equal to posenc's models on the corpus, and the rows marked as run or modelled.

Tolerances: the same as ``check``'s (inverse frequencies within SAME_RTOL = 1e-6 relative, float32 computed in a
different operation order; attention factor and softmax scale rel 1e-9): an installed run equal to the model gets
the verdict "same" against it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run

from posenc_cli.engines import hf
from posenc_cli.engines import vllm as vllm_model
from posenc_cli.engines.installed import hf as installed_hf
from posenc_cli.engines.runs import EngineRun, compare
from posenc_cli.engines.target import Target
from posenc_cli.frameworks import check as check_module
from posenc_cli.frameworks import registry
from posenc_cli.models.model_positions import describe

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "corpus").glob("*.json")) + [ROOT / "tests" / "fixtures" / "phi-3-mini-128k.json"]
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def ran(result: Any) -> Any:
    """A ``check --installed`` run: exit 0 when some row ran from an installed package, 3 when none could (the
    summary then says so and what to install); no traceback either way."""
    assert "Traceback" not in result.stderr, result.stderr
    text = result.stdout.strip()
    summary = json.loads(text)["summary"] if text.startswith("{") else text.splitlines()[-1]
    nothing = summary.startswith("no row ran from an installed package")
    assert result.exit_code == (3 if nothing else 0), (result.exit_code, result.stdout, result.stderr)
    return result


def rope_configs() -> list[tuple[str, dict[str, Any]]]:
    """The corpus configs with RoPE that transformers itself builds (no remote code)."""
    out = []
    for path in CORPUS:
        cfg = json.loads(path.read_text())
        try:
            model = describe(cfg)
        except Exception:  # noqa: BLE001 - configs posenc refuses (vision encoders) have nothing to run
            continue
        if model.family == "rope" and model.layers and not (model.engine is not None and model.engine.remote_code):
            out.append((path.name, cfg))
    return out


def same(modelled: EngineRun, installed: EngineRun) -> None:
    verdict = compare(modelled, installed)
    assert verdict.verdict == "same", [g.as_dict() for g in verdict.groups]


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")
def test_installed_transformers_is_posencs_reference_on_the_corpus() -> None:
    ran, not_run = 0, []
    for name, cfg in rope_configs():
        model = describe(cfg)
        window = model.max_position_embeddings or 4096
        for length in (window, 4096, 2 * window):  # past the window too: dynamic NTK and LongRoPE switch
            try:
                installed = installed_hf.run(model, cfg, length)
            except installed_hf.NotRun as exc:  # a model type this transformers does not have, or M-RoPE's layout
                not_run.append(f"{name}: {exc}")
                break
            same(hf.run(model, cfg, length), installed)
            ran += 1
    assert ran >= 150, (ran, not_run)
    assert installed_hf.version() is not None


def vllm_importable() -> bool:
    from posenc_cli.engines.installed import vllm as installed_vllm

    return installed_vllm.version() is not None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not vllm_importable(),
                    reason="vLLM is not installed (or does not import on this CPU)")
def test_installed_vllm_is_posencs_model_on_the_corpus() -> None:
    """The configs test_vllm proves the model on (its CASES at their serving lengths, and the corpus configs of its
    length check at their windows): the installed run (vLLM's ModelConfig and get_rope) equals the model, the
    longest admitted length and the variable needed included. (Not the whole corpus in-process: vLLM's config
    registry re-registers transformers' classes, e.g. Kimi K2's on DeepseekV3Config, which later tests read.)"""
    import test_vllm

    from posenc_cli.engines.installed import vllm as installed_vllm

    cases = [(name, cfg, length) for name, cfg, length in test_vllm.CASES]
    cases += [(name, cfg, describe(cfg).max_position_embeddings or 4096) for name, cfg in test_vllm.ADMITS.items()]
    for name, cfg, length in cases:
        model = describe(cfg)
        installed = installed_vllm.run(model, cfg, length)
        modelled = vllm_model.run(model, cfg, length)
        same(modelled, installed)
        assert (installed.accepts, installed.needs, installed.invocation) == (
            modelled.accepts, modelled.needs, modelled.invocation), name
        assert installed.version == installed_vllm.version()


def test_check_installed_marks_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    result = ran(run("check", qwen, "--installed", "--json"))
    report = json.loads(result.stdout)
    assert report["installed"] is True
    sources = {e["engine"]: e["source"] for e in report["engines"]}
    assert sources["llama.cpp"].startswith("modelled (proven against llama-cpp-python 0.3.36): llama.cpp runs a GGUF")
    assert sources["sglang"].startswith("modelled (proven against sglang")
    if HAS_TRANSFORMERS:
        assert report["transformers"]["source"] == f"run (installed transformers {installed_hf.version()})"
    text = ran(run("check", qwen, "--installed")).stdout
    assert "  engine     source    verdict" in text and "llama.cpp  modelled" in text
    # without --installed every row is modelled and the table has no source column
    plain = json.loads(ok(run("check", qwen, "--json")).stdout)
    assert plain["installed"] is False and all(e["source"].startswith("modelled (proven against ")
                                               for e in plain["engines"])
    assert "source" not in ok(run("check", qwen)).stdout.splitlines()[3]


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")
def test_a_version_other_than_the_proven_one_is_said_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    monkeypatch.setattr(installed_hf, "version", lambda: "5.99.0")
    result = ran(run("check", qwen, "--installed", "--engines", "hf,llama.cpp"))
    assert (f"note: hf: the installed transformers is 5.99.0; posenc's model is proven against {hf.VERSION}: this "
            "row is the installed one's") in result.stderr
    monkeypatch.setattr(installed_hf, "version", lambda: hf.VERSION + ".0")
    assert "note:" not in ran(run("check", qwen, "--installed", "--engines", "hf,llama.cpp")).stderr


def test_an_installed_run_that_fails_falls_back_to_the_model_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        @staticmethod
        def version() -> str:
            return "9.9.9"

        @staticmethod
        def run(*args: Any) -> EngineRun:
            raise RuntimeError("no such model class")

    real = registry.load_installed
    monkeypatch.setattr(registry, "load_installed", lambda name: Broken if name == "vllm" else real(name))
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    report = json.loads(ran(run("check", qwen, "--installed", "--json", "--engines", "vllm")).stdout)
    (row,) = report["engines"]
    assert row["verdict"] == "same"
    assert row["source"] == (f"modelled (proven against vllm {vllm_model.VERSION}): the installed vllm 9.9.9 could "
                             "not run it (no such model class)")


def test_engines_without_an_installed_module_stay_modelled() -> None:
    """The contract: an entry names its installed runner (a module of engines/installed/ with ``version`` and
    ``run``), or says why its row stays modelled; none for llama.cpp (a GGUF's logits, not frequencies) or SGLang
    (triton); every module of engines/installed/ is some entry's."""
    assert registry.load_installed("llama.cpp") is None and "logits" in registry.entry("llama.cpp").not_run
    assert registry.load_installed("sglang") is None and "triton" in registry.entry("sglang").not_run
    assert registry.load_installed("vllm") is not None and registry.load_installed("hf") is not None
    for entry in registry.ENTRIES:
        module = registry.load_installed(entry.name)
        if module is not None:
            assert callable(module.version) and callable(module.run)
    folder = ROOT / "posenc_cli" / "engines" / "installed"
    runners = {f"posenc_cli.engines.installed.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    assert runners == {e.installed for e in registry.ENTRIES if e.installed is not None}


def test_a_row_without_an_installed_runner_says_its_entrys_reason() -> None:
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    report = json.loads(ran(run("check", qwen, "--installed", "--json", "--engine", "sglang,ollama")).stdout)
    sources = {row["engine"]: row["source"] for row in report["engines"]}
    assert sources["sglang"].endswith(": " + registry.entry("sglang").not_run)
    assert sources["ollama"].endswith(": " + registry.NO_INSTALLED_RUN)


def test_each_engine_gets_the_config_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose config path writes into the nested rope dict (transformers' AutoConfig under LMDeploy's parser
    did) must not change what the engines after it read: found when ``check --installed`` on the Qwen card's YaRN
    file gave ExLlamaV3 (run after LMDeploy) an original length of 8,192 and the verdict "differs" (0.879)."""
    cfg = json.loads((ROOT / "docs" / "examples" / "qwen2.5-7b-instruct-yarn.json").read_text())
    given = json.loads(json.dumps(cfg))
    seen: list[dict[str, Any]] = []

    def meddling(model: Any, config: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
        seen.append(json.loads(json.dumps(config)))
        config["rope_scaling"]["original_max_position_embeddings"] = 8192  # what the merge did
        return vllm_model.run(model, config, max_model_len, seq_len)

    target = registry.load("vllm")
    real_load = registry.load
    monkeypatch.setattr(registry, "load", lambda name: Target(
        name, target.title, target.package, target.version, target.render, meddling) if name in ("vllm", "sglang")
        else real_load(name))
    check_module.check(describe(cfg), cfg, ["hf", "vllm", "sglang"], 131072)
    assert seen == [given, given] and cfg == given


def test_installed_with_nothing_runnable_is_could_not_run_and_names_the_packages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every installed runner reporting its package absent: no row ran, so no verdict is the installed packages'
    (exit 3), and the summary names the pip requirements posenc could run; transformers itself counts as a row only
    when asked as an engine."""
    real = registry.load_installed

    class Absent:
        @staticmethod
        def version() -> None:
            return None

    monkeypatch.setattr(registry, "load_installed", lambda name: Absent if real(name) is not None else None)
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    result = run("check", qwen, "--installed", "--engine", "vllm,sglang,mlx-lm")
    assert result.exit_code == 3, result.stdout
    assert result.stdout.splitlines()[-1] == (
        "no row ran from an installed package, every verdict is posenc's model (all 3 engines compute what "
        f"transformers computes); to run them, install what posenc can run here: pip install "
        f"transformers=={hf.VERSION} vllm=={vllm_model.VERSION} mlx-lm=={registry.load('mlx-lm').version}")
    report = json.loads(run("check", qwen, "--installed", "--json", "--engine", "vllm").stdout)
    assert (report["ran_installed"], report["to_install"]) == (0, [f"transformers=={hf.VERSION}",
                                                                  f"vllm=={vllm_model.VERSION}"])
    # without --installed nothing is asked of the installed packages: exit 0, no such keys
    plain = run("check", qwen, "--json", "--engine", "vllm")
    assert plain.exit_code == 0 and "ran_installed" not in json.loads(plain.stdout)


def test_installed_rows_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    class Runs:
        @staticmethod
        def version() -> str:
            return vllm_model.VERSION

        @staticmethod
        def run(*args: Any) -> EngineRun:
            out: EngineRun = vllm_model.TARGET.run(*args)
            return out

    real = registry.load_installed
    monkeypatch.setattr(registry, "load_installed", lambda name: Runs if name == "vllm" else real(name))
    qwen = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
    result = run("check", qwen, "--installed", "--engine", "vllm,sglang")
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[-1].endswith("; 1 of 2 rows ran from installed packages")
