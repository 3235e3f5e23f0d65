"""The toy memory model registered for the memory stage's tests (tests/harness/toy_memory.py)."""

from __future__ import annotations

import pytest

from posenc_cli.frameworks import registry
from posenc_cli.frameworks.registry import Entry


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(registry, "ENTRIES", (*registry.ENTRIES, Entry("toy", "toy_engine", ("toy",),
                                                                       memory="toy_memory")))
    return "toy"
