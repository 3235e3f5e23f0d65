"""What a fresh interpreter has loaded after running a piece of posenc: the start-up guards' probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("numpy", "matplotlib", "torch", "transformers")
#: Loaded only by the source or dtype that needs them.
OPTIONAL = ("huggingface_hub", "gguf", "ml_dtypes")

PROBE = """
import json, sys
{body}
loaded = {{name: name in sys.modules for name in {heavy!r} + {optional!r}}}
sys.__stderr__.write("MODULES " + json.dumps(loaded) + "\\n")
"""


def loaded_modules(body: str, cwd: Path | None = None) -> dict[str, bool]:
    code = PROBE.format(body=body, heavy=HEAVY, optional=OPTIONAL)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)
    marker = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert marker, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(marker[-1][len("MODULES "):])


def run_cli_body(argv: list[str]) -> str:
    return (
        "from posenc_cli.cli import app\n"
        f"code = app({argv!r}, standalone_mode=False)\n"
        "assert code == 0, code\n"
    )


def posenc_modules(argv: list[str]) -> set[str]:
    """The posenc modules a fresh interpreter has loaded after ``posenc ARGV`` (run in-process there)."""
    body = ("from posenc_cli.cli import app\n"
            "try:\n    app(" + repr(list(argv)) + ", standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "posenc = sorted(m for m in sys.modules if m.startswith('posenc_cli'))\n"
            "sys.__stderr__.write('POSENC ' + json.dumps(posenc) + '\\n')\n")
    code = PROBE.format(body=body, heavy=HEAVY, optional=OPTIONAL)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    line = [x for x in proc.stderr.splitlines() if x.startswith("POSENC ")]
    assert line, (proc.returncode, proc.stderr)
    return set(json.loads(line[-1][len("POSENC "):]))
