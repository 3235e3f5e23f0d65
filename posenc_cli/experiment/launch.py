"""Each ``posenc experiment`` command launched, from what it was asked to what it renders: :func:`extrapolation` (``lm``
and ``copy``) and :func:`passkey`.

The standard library only at import: torch (an optional extra) is looked for first (:func:`require_torch`: one error
with the install hint when it is missing), then the modules that load it are imported. Nothing is printed here:
lines for stderr go to ``note``, training progress to the ``reporter``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shlex
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.experiment.settings import resolve
from posenc_cli.files import atomic_write_bytes, atomic_write_text, dumps_config
from posenc_cli.folderlock import hold

if TYPE_CHECKING:
    from posenc_cli.experiment.passkey import PasskeySettings
    from posenc_cli.experiment.run import Reporter
    from posenc_cli.experiment.settings import Settings

INSTALL_HINT = "posenc experiment needs torch: pip install 'posenc[experiment]'"

Note = Callable[[str], None]


def require_torch() -> None:
    """One :class:`PosencError` with the install hint when torch cannot be imported (never a traceback)."""
    try:
        missing = importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):  # a blocked or broken torch entry in sys.modules / sys.meta_path
        missing = True
    if missing:
        raise PosencError(INSTALL_HINT)
    try:
        import torch  # noqa: F401, TID253 - only this command loads it
    except ImportError as exc:
        raise PosencError(f"{INSTALL_HINT} (importing it failed: {exc})") from None


def extrapolation(task: str, *, methods: str | None, train_len: str | None, eval_lens: str | None,
                  steps: int | None, seed: int, device: str | None, quick: bool, text: str | None, out: Path | None,
                  progress: Callable[[], AbstractContextManager[Reporter]], note: Note) -> dict[str, Any]:
    """``posenc experiment lm|copy``: train each method at the training length, evaluate at every length; with
    ``out``, write results.json, chart.png and command.txt there. ``progress()`` opens the display the training
    reports to. Returns the results (the ``--json`` answer)."""
    require_torch()
    if device is None:
        import torch  # noqa: TID253 - checked above; only this command loads it

        device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = resolve(task, methods=methods, train_len=train_len, eval_lens=eval_lens, steps=steps, seed=seed,
                       device=device, quick=quick, text=text)
    from posenc_cli.experiment.run import check_device, run

    check_device(settings.device)
    # held from before training to the last file written: a second run into the folder would mix its files in
    with hold(out) if out is not None else contextlib.nullcontext():
        with progress() as reporter:
            results = run(settings, reporter)
        if out is not None:
            _write_out(out, settings, results, note)
    for line in results["notes"]:
        note(f"note: {line}")
    return results


def _write_out(out: Path, settings: Settings, results: dict[str, Any], note: Note) -> None:
    from posenc_cli.experiment.chart import render_png

    versions = results["versions"]
    command = shlex.join(settings.command(out=str(out)))
    lines = [
        command,
        f"seed: {settings.seed}",
        f"device: {settings.device}, torch threads: {settings.threads}",
        f"versions: posenc {versions['posenc']}, torch {versions['torch']}, python {versions['python']}",
        f"wall time: {results['timing']['wall_seconds']:.1f} s",
    ]
    atomic_write_text(out / "results.json", dumps_config(results) + "\n")
    atomic_write_bytes(out / "chart.png", render_png(results))
    atomic_write_text(out / "command.txt", "\n".join(lines) + "\n")
    note(f"wrote {out / 'results.json'}, {out / 'chart.png'} and {out / 'command.txt'}")


def passkey(out: Path, *, steps: int | None, seed: int, quick: bool, as_json: bool,
            note: Note) -> tuple[PasskeySettings, dict[str, Any]]:
    """``posenc experiment passkey``: train the tiny Llama and export it into ``out`` (passkey.gguf, hf/,
    train.json, which records the command: ``as_json`` is part of it). Returns the settings and train.json's
    contents."""
    require_torch()
    from posenc_cli.experiment.passkey import run, settings_for, stderr_progress

    settings = settings_for(steps=steps, seed=seed, quick=quick)
    command = ["posenc", "experiment", "passkey", "--out", str(out)]
    if steps is not None:
        command += ["--steps", str(steps)]
    command += ["--seed", str(seed)] + (["--quick"] if quick else []) + (["--json"] if as_json else [])
    with hold(out):  # creates the folder; two trainings into one folder would interleave their files
        result = run(settings, out, command, stderr_progress(every=10 if quick else 100))
    note(f"wrote {out / 'passkey.gguf'}, {out / 'hf'} and {out / 'train.json'} ({result['wall_seconds']:.0f} s)")
    return settings, result
