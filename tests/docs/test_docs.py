"""The documentation site: every command has its page, every option of every command is on it (an options section
generated from the click tree), docs/index.md is the README with the site's links, and the README's own set-up
block is the one CI runs.

``python tests/docs/test_docs.py`` rewrites the generated parts (each page's options section, docs/index.md).
The transcripts on every page are checked by tests/docs/test_readme.py; the built site's links by
tests/docs/test_site.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from posenc_cli.cli.app import COMMANDS, app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
INDEX = DOCS / "index.md"
#: Commands documented on a page other than docs/commands/NAME.md (a pointer with no options of its own).
PAGE_OF = {"docs": DOCS / "development.md"}
OPTIONS = ("<!-- options -->", "<!-- /options -->")
INDEX_NOTE = "<!-- docs/index.md is README.md with the site's links: python tests/docs/test_docs.py rewrites it -->"


def page_of(name: str) -> Path:
    return PAGE_OF.get(name, DOCS / "commands" / f"{name}.md")


def _root() -> tuple[Any, Any]:
    root = typer.main.get_command(app)
    return root, root.context_class(root, info_name="posenc")


def leaves(name: str) -> list[tuple[tuple[str, ...], Any, Any]]:
    """(path, command, context) of every runnable command under top-level command ``name``."""
    root, ctx = _root()

    def walk(command: Any, path: tuple[str, ...], cctx: Any) -> list[tuple[tuple[str, ...], Any, Any]]:
        if not hasattr(command, "list_commands"):
            return [(path, command, cctx)]
        out = []
        for sub_name in command.list_commands(cctx):
            sub = command.get_command(cctx, sub_name)
            out += walk(sub, (*path, sub_name), sub.context_class(sub, parent=cctx, info_name=sub_name))
        return out

    command = root.get_command(ctx, name)
    return walk(command, (name,), command.context_class(command, parent=ctx, info_name=name))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if isinstance(param.show_default, str):
        return param.show_default
    if param.show_default is False or param.default is None or param.is_flag and param.default is False:
        return ""
    if callable(param.default):
        return ""
    if isinstance(param.default, bool):
        return f"`{param.opts[0] if param.default else param.secondary_opts[0]}`" if param.secondary_opts else ""
    if isinstance(param.default, (list, tuple)):
        return ", ".join(str(v) for v in param.default)
    return f"`{param.default}`"


def options_section(name: str) -> str:
    """Every runnable command under ``name``: its usage line and a table of its options (names, default, help)."""
    out = [OPTIONS[0], "## Options", "",
           "Generated from the command line itself (`python tests/docs/test_docs.py` rewrites it; `--help` says the "
           "same).",
           ""]
    for path, command, ctx in leaves(name):
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), " ".join(command.collect_usage_pieces(ctx)))
        if len(path) > 1 or name in ("rules", "plot", "experiment", "eval"):
            out += [f"### `posenc {' '.join(path)}`", ""]
        out += [f"`posenc {' '.join(path)} {usage}`", ""]
        if command.help:
            out += [_cell(command.help.split("\n\n")[0]), ""]
        options = [p for p in command.params if p.param_type_name == "option" and "--help" not in p.opts]
        if not options:
            out += ["No options.", ""]
            continue
        out += ["| option | default | what it does |", "|---|---|---|"]
        for p in options:
            names = " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
            metavar = "" if p.is_flag else f" `{_cell(p.make_metavar(ctx)).strip('<>').upper()}`"
            out.append(f"| {names}{metavar} | {_cell(_default(p))} | {_cell(p.help or '')} |")
        out.append("")
    out.append(OPTIONS[1])
    return "\n".join(out)


def with_options(text: str, name: str) -> str:
    section = options_section(name)
    if OPTIONS[0] in text:
        start, end = text.index(OPTIONS[0]), text.index(OPTIONS[1]) + len(OPTIONS[1])
        return text[:start] + section + text[end:]
    return text.rstrip("\n") + "\n\n" + section + "\n"


def index_page() -> str:
    """docs/index.md: the README, its links made relative to docs/."""
    text = README.read_text(encoding="utf-8")
    return INDEX_NOTE + "\n" + re.sub(r"\]\(docs/", "](", text)


COMMAND_NAMES = [n for n in COMMANDS if n not in PAGE_OF]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_a_page_headed_by_it(name: str) -> None:
    page = page_of(name)
    assert page.is_file(), f"no page for `posenc {name}`: write {page.relative_to(ROOT)}"
    headings = [line for line in page.read_text(encoding="utf-8").splitlines() if re.match(r"#{1,6}\s", line)]
    pattern = re.compile(rf"posenc {re.escape(name)}(?![\w-])")
    assert any(pattern.search(h) for h in headings), f"{page.relative_to(ROOT)} has no heading for `posenc {name}`"


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_option_is_on_its_commands_page(name: str) -> None:
    """Walks the click tree: each option of each (sub)command is named on the command's page, in its generated
    options section (which must be current) and so with its help text."""
    text = page_of(name).read_text(encoding="utf-8")
    assert OPTIONS[0] in text, f"run python tests/docs/test_docs.py to add the options section of `posenc {name}`"
    assert text == with_options(text, name), (f"`posenc {name}`'s options section is stale: "
                                              "python tests/docs/test_docs.py")
    for path, command, _ in leaves(name):
        for param in command.params:
            names = [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--") and o != "--help"]
            if param.param_type_name == "option" and names:
                assert any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in names), \
                    (" ".join(path), names)


def test_the_site_home_is_the_readme() -> None:
    assert INDEX.read_text(encoding="utf-8") == index_page(), "docs/index.md is stale: python tests/docs/test_docs.py"


def test_readme_setup_block_is_what_ci_runs() -> None:
    """.ci/run runs the first two lines of the README's first ```bash block verbatim: they must stay the install
    commands (the first installs posenc and runs pick; the second the test extras and the tests)."""
    text = README.read_text(encoding="utf-8")
    first = text[text.index("```bash\n") + len("```bash\n"):].split("```", 1)[0].splitlines()
    assert first[0].endswith("pip install . && posenc pick --ctx 128k"), first[0]
    assert "pip install -e '.[test,parity]'" in first[1] and first[1].endswith("python -m pytest -q"), first[1]
    assert len(text.splitlines()) <= 250, "the README is the short way in: the reference goes to docs/"


def test_committed_example_config_is_what_scale_writes(tmp_path: Path) -> None:
    """The README's recipe 1 checks docs/examples/qwen2.5-7b-instruct-yarn.json, which it says scale writes."""
    from clihelpers import run

    out = tmp_path / "config.json"
    result = run("scale", "yarn", "--config", str(ROOT / "tests/corpus/qwen2.5-7b-instruct.json"), "--target", "128k",
                 "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() == (ROOT / "docs/examples/qwen2.5-7b-instruct-yarn.json").read_bytes()


def test_the_passkey_template_on_the_formats_page_is_the_shipped_file() -> None:
    text = (DOCS / "rules-format.md").read_text(encoding="utf-8")
    shipped = (ROOT / "rules/templates/passkey.yaml").read_text(encoding="utf-8")
    assert "```yaml\n" + shipped + "```" in text


def test_version_is_the_package_metadata_and_pyproject() -> None:
    from importlib import metadata

    import tomllib
    from clihelpers import run

    import posenc_cli

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert posenc_cli.__version__ == declared
    result = run("--version")
    assert result.exit_code == 0 and result.stdout == f"posenc {metadata.version('posenc')}\n"


def test_docs_points_at_this_checkout() -> None:
    from clihelpers import run

    result = run("docs")
    assert result.exit_code == 0, result.stderr
    where = Path(result.stdout.strip())
    built = (ROOT / "site" / "index.html").is_file()
    assert where == (ROOT / "site" / "index.html" if built else DOCS)
    assert ("not built" in result.stderr) is not built


def test_docs_prefers_the_built_site_then_the_url_then_the_sources(tmp_path: Path) -> None:
    from posenc_cli.cli.documentation import is_checkout, locate
    from posenc_cli.errors import CouldNotRun

    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    assert is_checkout(tmp_path) and not is_checkout(tmp_path / "docs")
    url = "https://example.org/posenc/"
    assert (locate([tmp_path], url="").kind, locate([tmp_path], url="").where) == ("sources", str(tmp_path / "docs"))
    assert (locate([tmp_path], url=url).kind, locate([tmp_path], url=url).where) == ("url", url)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<html></html>")
    assert locate([tmp_path], url=url).where == str(tmp_path / "site" / "index.html")
    with pytest.raises(CouldNotRun, match="no documentation found"):
        locate([], url="")


def test_docs_finds_the_checkout_pip_installed_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pip install .` leaves the package in site-packages; PEP 610's direct_url.json names the folder."""
    import json

    from posenc_cli.cli import documentation

    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")

    class Installed:
        def read_text(self, name: str) -> str | None:
            return json.dumps({"url": tmp_path.as_uri(), "dir_info": {}}) if name == "direct_url.json" else None

    monkeypatch.setattr(documentation, "_metadata", lambda: Installed())
    assert tmp_path.resolve() in documentation.checkouts()


def _rewrite() -> None:
    for name in COMMAND_NAMES:
        page = page_of(name)
        page.write_text(with_options(page.read_text(encoding="utf-8"), name), encoding="utf-8")
    INDEX.write_text(index_page(), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _rewrite()
