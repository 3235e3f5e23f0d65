"""The test tree mirrors the package (``tests/<package>/test_<module>.py``); what several tests share lives in
``tests/harness/`` (CLI helpers, the real packages' reference code, fake and real servers, generators), imported by
plain name: this puts that folder on ``sys.path`` before any test module is collected. Test files are not packages,
so their base names are unique across the tree."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HARNESS = str(Path(__file__).resolve().parent / "harness")
if HARNESS not in sys.path:
    sys.path.insert(0, HARNESS)

# posenc's parse cache (the rules files': posenc_cli.pick.rules) goes to a folder of this run, never the user's
os.environ["POSENC_CACHE_DIR"] = tempfile.mkdtemp(prefix="posenc-test-cache-")
