"""``posenc audit`` on config.json files LLaMA-Factory 0.9.5 itself wrote (tests/harness/llamafactory_export.py: its own
``configure_rope`` and transformers 4.57.6's ``save_pretrained``), against the training YAML that produced them.

The files are committed; where LLaMA-Factory and transformers 4 are installed, the last test writes them again and
requires the same bytes, so they stay LLaMA-Factory's output and not hand edits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clihelpers import ok, run

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures" / "audit"
TRAIN = (FIXTURES / "lf-train.yaml").read_text()  # the YAML the README's audit example uses


def audit(tmp_path: Path, name: str, *extra: str) -> tuple[int, dict[str, object]]:
    yaml = tmp_path / "train.yaml"
    yaml.write_text(TRAIN)
    result = run("audit", str(FIXTURES / name), "--trained-with", str(yaml), "--json", *extra)
    assert "Traceback" not in result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_training_save_has_a_float_window(tmp_path: Path) -> None:
    code, out = audit(tmp_path, "lf-yarn-train")
    assert code == 1
    assert [f["kind"] for f in out["findings"]] == ["float-window"]  # type: ignore[index]
    assert out["numbers"] is None  # the rope itself is what was trained


def test_export_with_rope_scaling_resets_the_factor(tmp_path: Path) -> None:
    dest = tmp_path / "fixed.json"
    code, out = audit(tmp_path, "lf-yarn-export", "--write", str(dest))
    assert code == 1
    assert [f["kind"] for f in out["findings"]] == ["float-window", "reset-factor", "window"]  # type: ignore[index]
    fixed = json.loads(dest.read_text())
    assert fixed["rope_scaling"] == {"factor": 4.0, "original_max_position_embeddings": 4096, "rope_type": "yarn"}
    assert fixed["max_position_embeddings"] == 16384
    again = tmp_path / "again"
    again.mkdir()
    (again / "config.json").write_text(dest.read_text())
    (tmp_path / "train.yaml").write_text(TRAIN)
    ok(run("audit", str(again), "--trained-with", str(tmp_path / "train.yaml")))


def test_fixtures_are_llamafactorys_output(tmp_path: Path) -> None:
    pytest.importorskip("llamafactory")
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) >= 5:
        pytest.skip("LLaMA-Factory 0.9.5's configure_rope fails under transformers 5 (a float max_position_embeddings)")

    from llamafactory_export import export

    for name, path in export(tmp_path).items():
        assert path.read_text() == (FIXTURES / name / "config.json").read_text(), name
