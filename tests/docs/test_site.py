"""The built documentation site has no broken internal link: every ``href`` and ``src`` of every HTML page that
points inside the site names a file that exists, and an anchor (``page.html#part``) names an ``id`` on that page.

``python tests/docs/test_site.py site`` checks a site built by ``mkdocs build`` (``.ci/run`` does); the tests check the
checker on a small site of their own, and build the real one when mkdocs is installed (the ``docs`` extra).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK_ATTRS = {"href", "src"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in LINK_ATTRS:
                self.links.append(value)
            elif name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """``page: link (why)`` for every internal link of the site at ``site`` that leads nowhere."""
    site = site.resolve()
    pages = {p: _parse(p) for p in sorted(site.rglob("*.html"))}
    broken: list[str] = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # external: not this check's business
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # site-absolute (mkdocs' 404 page): the site is served from its root
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {link}"
            if not target.is_file():
                broken.append(f"{where} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no id {parts.fragment!r})")
    return broken


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_checker_finds_missing_files_and_anchors(tmp_path: Path) -> None:
    _write(tmp_path / "index.html", '<a href="a/page.html#x">ok</a> <a href="missing.html">no</a>'
                                     '<img src="img/pic.png"> <a href="a/page.html#nope">no anchor</a>'
                                     '<a href="https://example.org/x.html">external</a> <a href="#top">self</a>'
                                     '<h1 id="top">t</h1>')
    _write(tmp_path / "a" / "page.html", '<h2 id="x">x</h2><a href="../index.html">up</a><a href="../a/">dir</a>'
                                          '<a href="/index.html#top">root</a>')
    assert sorted(broken_links(tmp_path)) == ["a/page.html: ../a/ (no such file)",
                                              "index.html: a/page.html#nope (no id 'nope')",
                                              "index.html: img/pic.png (no such file)",
                                              "index.html: missing.html (no such file)"]
    _write(tmp_path / "img" / "pic.png", "png")
    _write(tmp_path / "a" / "index.html", "<p>dir index</p>")
    assert sorted(broken_links(tmp_path)) == ["index.html: a/page.html#nope (no id 'nope')",
                                              "index.html: missing.html (no such file)"]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is the docs extra")
def test_the_real_site_builds_strictly_with_no_broken_link(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "commands" / "pick.html").is_file()
    assert broken_links(tmp_path / "site") == []


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "site"
    if not (site / "index.html").is_file():
        sys.exit(f"error: {site} holds no built site (mkdocs build writes one)")
    found = broken_links(site)
    for line in found:
        print(line)
    print(f"{len(list(site.rglob('*.html')))} pages, {len(found)} broken internal links", file=sys.stderr)
    sys.exit(1 if found else 0)
