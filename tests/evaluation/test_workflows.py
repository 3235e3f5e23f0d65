"""eval's workflows (posenc_cli.evaluation.workflows) without the CLI: a run against the scripted server reported
with the exit status it earns and its stderr lines in order, the limits checked with the field they are about."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_server import FakeServer, Script

from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.evaluation.workflows import (
    MAX_RETRIES,
    Server,
    compare_runs,
    connect,
    probe_server,
    report_run,
    run_plan,
)


@contextlib.contextmanager
def counting(seen: list[int], total: int) -> Iterator[Callable[[Any], None]]:
    seen.append(total)
    yield lambda state: seen.append(state.done)


@pytest.mark.parametrize(("server", "field"), [
    (Server("http://127.0.0.1:9/v1", timeout=0.0), "timeout"),
    (Server("http://127.0.0.1:9/v1", timeout=float("nan")), "timeout"),
    (Server("http://127.0.0.1:9/v1", retries=MAX_RETRIES + 1), "retries"),
])
def test_the_limits_name_their_field(server: Server, field: str) -> None:
    with pytest.raises(PosencError) as caught:
        connect(server)
    assert caught.value.fields == (field,) and str(caught.value).startswith(f"{field} ")
    assert caught.value.render(lambda f: "--" + f).startswith(f"--{field} ")


def test_a_run_reports_in_order_and_earns_its_status(tmp_path: Path) -> None:
    notes: list[str] = []
    seen: list[int] = []
    with FakeServer(Script()) as fake:
        server = Server(fake.url, retries=0)
        probed = probe_server(server, note=notes.append)
        judged = run_plan(server, tmp_path / "run", lengths="64", trials=1, pass_rate=0.0, template="passkey",
                          note=notes.append, progress=lambda total: counting(seen, total))
    assert probed.code == ExitCode.OK and probed.result["loss"] == probed.loss.as_dict()
    assert seen[0] == len(seen) - 1 > 0 and seen[-1] == seen[0]  # opened with the cells to run, each reported
    assert judged.result["result"] == "pass" and judged.code == ExitCode.OK
    assert judged.result["api"] == {"name": "completions", "endpoint": "/v1/completions"}
    assert judged == report_run(tmp_path / "run", note=notes.append)
    assert all(line.startswith("note: ") for line in notes), notes
    with pytest.raises(PosencError, match="two or more"):
        compare_runs([tmp_path / "run"], note=notes.append)
    result = compare_runs([tmp_path / "run", tmp_path / "run"], note=notes.append)
    assert json.loads(json.dumps(result))["runs"][0]["label"]


def test_a_png_on_stdout_is_refused_before_anything_is_drawn(tmp_path: Path) -> None:
    with FakeServer(Script()) as fake:
        run_plan(Server(fake.url, retries=0), tmp_path / "run", lengths="64", trials=1, pass_rate=0.0,
                 template="passkey", note=lambda _: None, progress=lambda total: counting([], total))
    with pytest.raises(PosencError) as caught:
        report_run(tmp_path / "run", png=Path("-"), note=lambda _: None)
    assert caught.value.fields == ("png",)
