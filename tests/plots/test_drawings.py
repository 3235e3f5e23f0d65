"""Each plot kind from its options (posenc_cli.plots.drawings) without the CLI: the output target checked first,
a file drawn and written with its JSON, the terminal given a renderable; errors carry the field they are about."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc_cli.errors import PosencError
from posenc_cli.plots import drawings
from posenc_cli.scale.options import ScaleOptions

DRAW = {"dpi": 50, "cmap": "RdBu", "title": None, "width": None}


def test_a_file_is_written_and_described(tmp_path: Path) -> None:
    out = tmp_path / "s.svg"
    drawn = drawings.sinusoidal("16", 8, 500.0, str(out), terminal=False, as_json=True, **DRAW)
    assert drawn.renderable is None and drawn.shown == str(out) and out.read_bytes().lstrip().startswith(b"<")
    assert drawn.result is not None
    assert (drawn.result["kind"], drawn.result["format"], drawn.result["base"]) == ("sinusoidal", "svg", 500.0)
    assert drawn.result["bytes"] == out.stat().st_size


def test_the_terminal_gets_a_renderable_and_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    drawn = drawings.alibi(2, "4", None, dpi=50, cmap="viridis", title=None, terminal=True, width=40, as_json=False)
    assert drawn.renderable is not None and drawn.columns == 40 and drawn.shown is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("call", "fields"), [
    (lambda: drawings.target(None, "x.png", 5, False, False), ("dpi",)),
    (lambda: drawings.target(None, "x.png", 150, True, True), ("terminal", "json")),
    (lambda: drawings.target(None, "x.png", 150, False, False, width=80), ("width", "terminal")),
    (lambda: drawings.rope(None, 16, 1e4, None, ScaleOptions(original_max="4k"), None, terminal=False,
                           as_json=False, **DRAW), ("original_max", "method")),
    (lambda: drawings.decay(16, "10000,10000", "10", False, None, dpi=50, title=None, as_json=False,
                            terminal=False), ("theta",)),
])
def test_a_refusal_names_its_fields(call: object, fields: tuple[str, ...]) -> None:
    with pytest.raises(PosencError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.fields == fields
    assert caught.value.render(lambda f: "--" + f.replace("_", "-")).startswith("--" + fields[0].replace("_", "-"))
