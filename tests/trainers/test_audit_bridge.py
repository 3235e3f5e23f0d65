"""``posenc audit`` on the config.json Megatron-Bridge's default export writes under transformers 5
(tests/harness/bridge_export.py: its own ``conform_config_to_reference`` and ``_drop_readonly_config_properties``, run
on
transformers 5.25's Qwen2Config), against the Megatron-LM arguments of the run.

The export keeps the reference's ``rope_parameters`` (plain RoPE, the source theta) and sets the window to the
trained seq_length: the YaRN and the raised theta are gone. Where a Megatron-Bridge checkout is at hand
(``MEGATRON_BRIDGE_GIT``, default the snapshot this was made from) and transformers 5 is installed, the last test
builds it again and requires the same rope keys and window.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clihelpers import ok, run

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures" / "audit"
EXPORT = FIXTURES / "bridge-auto-config-v5"
ARGS = FIXTURES / "megatron-qwen-yarn.sh"
GIT = os.environ.get("MEGATRON_BRIDGE_GIT", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings")


def test_bridge_v5_export_drops_yarn_and_theta(tmp_path: Path) -> None:
    dest = tmp_path / "config.json"
    result = run("audit", str(EXPORT), "--trained-with", str(ARGS), "--json", "--write", str(dest))
    assert result.exit_code == 1, result.stderr
    out = json.loads(result.stdout)
    assert [(f["kind"], f["key"]) for f in out["findings"]] == [("theta-lost-v5", "rope_theta"),
                                                               ("dropped-keys", "rope_parameters")]
    assert out["numbers"]["attention_factor_exported"] == 1.0
    fixed = json.loads(dest.read_text())
    assert fixed["rope_parameters"]["rope_type"] == "yarn" and fixed["rope_parameters"]["rope_theta"] == 5e6
    assert "rope_scaling" not in fixed  # the file's own transformers 5 form
    assert "transformers 4 reader" in result.stderr and "--to v4" in result.stderr
    ok(run("audit", str(dest), "--trained-with", str(ARGS)))
    # the legacy keys transformers 4 and 5 both read: the same numbers, no note
    legacy = json.loads(run("audit", str(EXPORT), "--trained-with", str(ARGS), "--json", "--to", "v4").stdout)
    assert legacy["config"]["rope_theta"] == 5e6 and legacy["config"]["rope_scaling"]["rope_type"] == "yarn"
    assert "rope_parameters" not in legacy["config"]
    again = tmp_path / "v4"
    again.mkdir()
    (again / "config.json").write_text(json.dumps(legacy["config"]))
    assert "transformers 4 reader" not in ok(run("audit", str(again), "--trained-with", str(ARGS))).stderr


def test_fixture_is_bridges_output(tmp_path: Path) -> None:
    if not Path(GIT).exists():
        pytest.skip(f"no Megatron-Bridge checkout at {GIT} (set MEGATRON_BRIDGE_GIT)")
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("the drop happens under transformers 5 (its to_dict has no rope_scaling or rope_theta)")
    from bridge_export import export

    fresh = json.loads(export(GIT, tmp_path).read_text())
    committed = json.loads((EXPORT / "config.json").read_text())
    assert {k: fresh.get(k) for k in ROPE_KEYS} == {k: committed.get(k) for k in ROPE_KEYS}
