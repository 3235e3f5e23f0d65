"""posenc tells a user when their transformers is newer than the one its model-type data was generated from.

The installed version is read from the name of the first ``transformers-VERSION.dist-info`` on ``sys.path`` (what
``importlib.metadata`` finds, checked against it for every installed distribution), never by importing transformers
nor ``importlib.metadata`` (10 ms of ``posenc inspect``'s 130). The tests put a ``transformers-X.dist-info`` ahead of
the real one on ``sys.path`` in a fresh interpreter, so the real CLI reads a newer, an older and the same version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from posenc_cli.models import model_types as models
from posenc_cli.models.model_types import generated, newer_transformers_notice

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json"
DATA_VERSION = str(generated()["transformers"])


def fake_transformers(tmp_path: Path, version: str) -> Path:
    """A directory holding only the metadata of a transformers ``version`` (no code: importing it would fail)."""
    site = tmp_path / f"site-{version}"
    info = site / f"transformers-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n")
    return site


def run(argv: list[str], site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "posenc_cli", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=ROOT)


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "model-type data" in line]


@pytest.mark.parametrize("argv", [["inspect", str(CONFIG)], ["inspect", str(CONFIG), "--json"],
                                  ["check", str(CONFIG), "--engines", "hf"]], ids=["inspect", "json", "check"])
def test_a_newer_transformers_gets_one_line_saying_how_to_regenerate(tmp_path: Path, argv: list[str]) -> None:
    newer = run(argv, fake_transformers(tmp_path, "99.1.0"))
    same = run(argv, fake_transformers(tmp_path, DATA_VERSION))
    assert newer.returncode == same.returncode == 0, (newer.stderr, same.stderr)
    lines = notes(newer.stderr)
    assert len(lines) == 1, newer.stderr
    assert "99.1.0" in lines[0] and DATA_VERSION in lines[0]
    assert "python tests/harness/generate_model_types.py" in lines[0]
    assert notes(same.stderr) == []
    assert newer.stdout == same.stdout  # results on stdout are untouched
    if "--json" in argv:
        json.loads(newer.stdout)


@pytest.mark.parametrize("version", ["4.57.1", DATA_VERSION, "5.0.0.dev0"])
def test_no_line_for_an_older_or_the_same_transformers(tmp_path: Path, version: str) -> None:
    proc = run(["inspect", str(CONFIG)], fake_transformers(tmp_path, version))
    assert proc.returncode == 0 and notes(proc.stderr) == [], proc.stderr


def test_a_development_build_past_the_data_counts_as_newer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    major, minor = (int(p) for p in DATA_VERSION.split(".")[:2])
    monkeypatch.syspath_prepend(str(fake_transformers(tmp_path, f"{major}.{minor + 1}.0.dev0")))
    assert newer_transformers_notice() is not None
    monkeypatch.syspath_prepend(str(fake_transformers(tmp_path, f"{major}.{minor}.0rc1")))
    assert newer_transformers_notice() is None  # a release candidate of the data's own release is not newer


def test_no_line_when_transformers_is_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert models.installed_version("transformers") is None
    assert newer_transformers_notice() is None


def test_the_installed_version_is_what_importlib_metadata_finds() -> None:
    """The directory scan against importlib.metadata, for every distribution on this interpreter's path."""
    names = sorted({d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]})
    assert "transformers" in names and len(names) > 20
    for name in names:
        assert models.installed_version(name) == metadata.version(name), name


def test_release_parsing() -> None:
    assert models._release("5.26.0.dev0") == (5, 26, 0)
    assert models._release("5.25.0") == (5, 25, 0)
    assert models._release("5.25.1rc2") == (5, 25, 1)


def test_reading_the_version_imports_nothing_heavy(tmp_path: Path) -> None:
    """The check costs one directory scan of sys.path: transformers (whose metadata says 99.1.0 here, and whose code
    is absent) is not imported, nor importlib.metadata, torch or numpy."""
    code = ("import sys\nfrom posenc_cli.models.model_types import newer_transformers_notice\n"
            "assert newer_transformers_notice() is not None\n"
            "print(sorted(m for m in ('transformers', 'torch', 'numpy', 'typer', 'importlib.metadata') "
            "if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_transformers(tmp_path, "99.1.0")), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
