"""The registry of engines and trainers: every entry's module exports its record, the docs' tables are the
registry's, and an engine registered by one entry (a module in tests/harness/) shows up in ``scale --engine``,
``check`` and the docs without touching another file."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from clihelpers import assert_usage_error, ok, run

from posenc_cli.engines.target import Target
from posenc_cli.frameworks import registry
from posenc_cli.frameworks.registry import ENGINE, TRAINER, Entry

ROOT = Path(__file__).resolve().parents[2]
QWEN = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
SCALE = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128"]


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_every_entry_names_a_module_exporting_its_record(entry: Entry) -> None:
    target = importlib.import_module(entry.module).TARGET
    assert isinstance(target, Target) and target.name == entry.name
    assert registry.load(entry.name) is target
    assert all(registry.for_format(f) is target for f in entry.formats)


def test_names_and_formats_are_unique_and_in_report_order() -> None:
    assert registry.names(ENGINE)[0] == "hf"  # transformers, the reference, first
    assert len(set(registry.formats())) == len(registry.formats())
    assert len({e.name for e in registry.ENTRIES}) == len(registry.ENTRIES)
    assert set(registry.training_formats()) == {"hf", "hf-v5", *registry.formats(TRAINER)}


@pytest.mark.parametrize(("kind", "doc"), [(ENGINE, "docs/engines.md"), (TRAINER, "docs/trainers.md")])
def test_the_docs_tables_are_the_registrys(kind: str, doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    for table in registry.docs_tables(kind):
        assert table in text, f"{doc}: paste posenc_cli.frameworks.registry.docs_tables({kind!r})"


def test_every_framework_audit_reads_is_a_trainer_record() -> None:
    from posenc_cli.frameworks.audit import frameworks

    assert frameworks() == ["megatron", "torchtitan", "llamafactory", "axolotl", "posenc-plan", "hf-config"]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy engine registered: one entry, pointing at tests/harness/toy_engine.py. The command modules load
    first, as they would in a real run (check's --engines default is every engine registered when it loads)."""
    importlib.import_module("posenc_cli.cli.check")
    importlib.import_module("posenc_cli.cli.scale")
    monkeypatch.setattr(registry, "ENTRIES", (*registry.ENTRIES, Entry("toy", "toy_engine", ("toy", "toy-server"))))


@pytest.mark.usefixtures("toy")
def test_a_registered_engine_is_a_scale_format() -> None:
    assert_usage_error(run(*SCALE, "--engine", "nope"), "use one of:", "toy, toy-server")
    result = ok(run(*SCALE, "--engine", "toy", "--model", "m"))
    assert result.stdout.startswith("toy-serve m --rope '{\"rope_type\": \"yarn\"")
    assert "a toy caveat" in result.stderr


@pytest.mark.usefixtures("toy")
def test_a_registered_engine_is_in_checks_table() -> None:
    report = json.loads(run("check", QWEN, "--engines", "hf,vllm,toy", "--json").stdout)
    assert [e["engine"] for e in report["engines"]] == ["vllm", "toy"]
    assert report["verdicts"]["same"] == ["vllm", "toy"]
    table = ok(run("check", QWEN, "--engines", "hf,toy")).stdout
    assert "  toy     same" in table and "toy 0.1: same" in table
    assert_usage_error(run("check", QWEN, "--engines", "tgi"), f"use some of: {', '.join(registry.names(ENGINE))}")


@pytest.mark.usefixtures("toy")
def test_a_registered_engine_is_in_the_docs_tables() -> None:
    targets, cannot = registry.docs_tables(ENGINE)
    assert "| Toy | 0.1 | `toy`, `toy-server` | nothing (a test's engine) |" in targets
    assert "| Toy | anything but transformers' own numbers |" in cannot


def test_each_engine_version_is_written_once() -> None:
    """A version bump is one line in the engine's module: pyproject's engines extra pins the llama-cpp-python
    llamacpp.PACKAGE_VERSION names, .ci/run installs the vLLM engines/vllm.py names, and the vLLM harness reads both
    engine modules."""
    import re

    import vllm_harness

    from posenc_cli.engines import llamacpp, sglang, vllm

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.findall(r'"llama-cpp-python\[server\]==([^"]+)"', pyproject) == [llamacpp.PACKAGE_VERSION]
    assert llamacpp.VERSION == f"llama-cpp-python {llamacpp.PACKAGE_VERSION}"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "vllm==" + vllm.VERSION not in ci and "from posenc_cli.engines.vllm import VERSION" in ci
    assert (vllm_harness.VLLM_VERSION, vllm_harness.SGLANG_VERSION) == (vllm.VERSION, sglang.VERSION)
