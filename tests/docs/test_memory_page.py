"""docs/memory.md holds the tables ``tests/harness/memory_page.py`` computes now (the memory core, every engine):
a memory model that changes shows here. ``python tests/docs/test_memory_page.py`` rewrites them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from memory_page import MARKS, PUBLISHED_MARKS, published, tables

PAGE = Path(__file__).resolve().parents[2] / "docs" / "memory.md"

pytestmark = pytest.mark.numeric


def _between(text: str, marks: tuple[str, str]) -> str:
    start, end = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return text[start:end]


def _with(text: str, marks: tuple[str, str], body: str) -> str:
    start, end = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return text[:start] + "\n" + body + text[end:]


def test_the_tables_are_what_posenc_computes() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert _between(text, MARKS) == "\n" + tables()
    assert _between(text, PUBLISHED_MARKS) == "\n" + published()


def test_posenc_reproduces_the_published_figures_it_shares_settings_with() -> None:
    """Where the published figure and posenc's settings are the same (not a different build's padding), the
    numbers agree to the figure's own rounding."""
    rows = published()
    assert "1952 blocks serve 1.56x" in rows  # vLLM's concurrency line, vllm#10517
    assert "| 512.00 MiB |" in rows  # llama.cpp at -c 4096, llama.cpp#10136
    assert "K 8.23 GiB (367,404 cells" in rows  # SGLang's K size, vllm#21348
    assert "| 1,166.62 MiB |" in rows  # the MLA latent in q8_0, ik_llama.cpp#259
    assert "transformers 10.41 GiB" in rows  # unsloth#4757's sliding-aware figure


if __name__ == "__main__":
    page = PAGE.read_text(encoding="utf-8")
    page = _with(_with(page, MARKS, tables()), PUBLISHED_MARKS, published())
    PAGE.write_text(page, encoding="utf-8")
    sys.stdout.write(f"rewrote {PAGE}\n")
