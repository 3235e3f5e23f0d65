"""``posenc docs``: print where the reference documentation is (a path or a URL); it never builds the site."""

from __future__ import annotations

import sys

from posenc_cli.cli.documentation import locate
from posenc_cli.cli.output import note


def docs() -> None:
    """Print where the documentation is: the built site, the documentation URL, or the docs/ sources."""
    found = locate()
    sys.stdout.write(found.where + "\n")
    if found.kind == "sources":
        note("the site is not built: pip install -e '.[docs]' && mkdocs build (in "
             f"{found.checkout}) writes it to site/; these are its Markdown sources")
