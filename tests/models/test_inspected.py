"""posenc inspect's core (posenc_cli.models.inspected): a source read, reported and linted, without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.models.inspected import inspect_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DAMAGED = str(FIXTURES / "damaged" / "window-negative.json")


def test_a_readable_config_is_reported_with_its_source_and_no_lint() -> None:
    found = inspect_source(str(FIXTURES / "llama-3.1-8b.json"), seq_len="4k", note=lambda _: None)
    assert found.result["rope_type"] == "llama3" and found.result["source"]["kind"] == "file"
    assert found.problems is None and found.oldest is None and "lint" not in found.result
    assert found.code == ExitCode.OK


def test_an_unreadable_config_is_an_error_unless_linted() -> None:
    with pytest.raises(PosencError, match="max_position_embeddings"):
        inspect_source(DAMAGED, note=lambda _: None)
    found = inspect_source(DAMAGED, lint=True, note=lambda _: None)
    assert found.result["family"] == "unreadable" and found.result["lint"] == found.problems
    assert found.problems and any(p.get("severity", "error") == "error" for p in found.problems)
    assert found.code == ExitCode.CHECK_FAILED
