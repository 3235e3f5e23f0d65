"""experiment's launches (posenc_cli.experiment.launch) without the CLI: torch is looked for before anything
loads it, and a missing torch is one error with the install hint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from posenc_cli.errors import PosencError
from posenc_cli.experiment import launch


def test_a_missing_torch_is_the_install_hint_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(PosencError, match=r"^posenc experiment needs torch: pip install 'posenc\[experiment\]'$"):
        launch.passkey(tmp_path / "out", steps=1, seed=0, quick=True, as_json=False, note=lambda _: None)
    assert not (tmp_path / "out").exists()  # refused before the folder was locked (and so created)
