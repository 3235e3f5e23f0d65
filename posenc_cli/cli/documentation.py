"""Where posenc's reference documentation is, for ``posenc docs`` (stdlib only; it points, it never builds).

The documentation is a mkdocs site whose sources are ``docs/`` of a checkout (``mkdocs.yml`` beside them);
``mkdocs build`` writes it to ``site/``. Looked for, in order:

1. the built site, ``site/index.html``, of the checkout posenc runs from (a source tree or an editable install) or
   was installed from (``pip install .`` records the folder in the distribution's ``direct_url.json``, PEP 610);
2. the URL the distribution's metadata names as ``Project-URL: Documentation``, where one is declared;
3. the Markdown sources, ``docs/`` of that checkout (readable as they are; the site is built from them).

A wheel from an index, with no URL declared, has none of these: :func:`locate` raises :class:`CouldNotRun`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from posenc_cli import __version__
from posenc_cli.errors import CouldNotRun

if TYPE_CHECKING:
    from importlib.metadata import Distribution

DISTRIBUTION = "posenc"
#: mkdocs.yml's site_dir (mkdocs' default), relative to the checkout
SITE_DIR = "site"
DOCS_DIR = "docs"


# a NamedTuple, not a dataclass, and json read only where a PEP 610 record is: every command imports this module
# (``posenc --version``), so it must cost next to nothing
class DocsLocation(NamedTuple):
    """``kind`` is ``site`` (a built site's index.html), ``url`` or ``sources`` (the docs/ folder); ``where`` is the
    path or URL; ``checkout`` the source tree it belongs to (None for a URL)."""

    kind: str
    where: str
    checkout: Path | None = None


def is_checkout(root: Path) -> bool:
    return (root / "mkdocs.yml").is_file() and (root / DOCS_DIR).is_dir()


def checkouts() -> list[Path]:
    """Source trees posenc runs from or was installed from, nearest first, each holding mkdocs.yml and docs/."""
    found = [Path(__file__).resolve().parents[2]]
    origin = _installed_from()
    if origin is not None:
        found.append(origin)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return [p for p in unique if is_checkout(p)]


def _metadata() -> Distribution | None:
    # importlib.metadata is imported here, not at start-up: only `posenc docs` and `posenc --version` read it
    from importlib import metadata

    try:
        return metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _installed_from() -> Path | None:
    dist = _metadata()
    text = dist.read_text("direct_url.json") if dist is not None else None
    if not text:
        return None
    import json

    try:
        url = json.loads(text).get("url", "")
    except (ValueError, AttributeError):
        return None
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(url).path))


def documentation_url() -> str | None:
    """``Project-URL: Documentation`` from the installed distribution's metadata, if declared."""
    dist = _metadata()
    if dist is None:
        return None
    entries: list[str] = dist.metadata.get_all("Project-URL") or []
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip()
    return None


def locate(roots: list[Path] | None = None, url: str | None = None) -> DocsLocation:
    """The best pointer to the documentation (see the module docstring for the order).

    ``roots`` and ``url`` default to :func:`checkouts` and :func:`documentation_url`.
    """
    roots = checkouts() if roots is None else roots
    for root in roots:
        index = root / SITE_DIR / "index.html"
        if index.is_file():
            return DocsLocation("site", str(index), root)
    url = documentation_url() if url is None else url
    if url:
        return DocsLocation("url", url)
    for root in roots:
        return DocsLocation("sources", str(root / DOCS_DIR), root)
    raise CouldNotRun("no documentation found: this install has no source checkout beside it and declares no "
                      "documentation URL; the docs/ folder of posenc's source holds the pages (README.md links them)")


def version() -> str:
    """The installed distribution's version (package metadata); ``posenc_cli.__version__`` when posenc runs from a
    source tree that is not installed."""
    dist = _metadata()
    if dist is not None:
        return str(dist.version)

    return __version__
