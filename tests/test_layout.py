"""The layout: a package per stage, every import running down the stages, and the size targets.

Imports inside functions count as edges too: one there to load numpy late is fine, one that only dodges a circle
is the circle. ``python tests/test_layout.py`` prints the figures the targets are about.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

from startup import posenc_modules

PACKAGE = Path(__file__).resolve().parent.parent / "posenc_cli"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """posenc module -> the posenc modules it imports anywhere in its body (relative imports resolved)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    # vllm imports render's helpers at module level; frequencies reads scaling inside for_request
    assert "posenc_cli.engines.render" in graph["posenc_cli.engines.vllm"]
    assert "posenc_cli.rope.scaling" in graph["posenc_cli.rope.frequencies"]
    assert len(graph) > 50


def test_no_import_circle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_a_circle_would_be_found() -> None:
    graph = import_graph()
    graph["posenc_cli.rope.scaling"] = graph["posenc_cli.rope.scaling"] | {"posenc_cli.engines.render"}
    assert any("posenc_cli.rope.scaling" in c and "posenc_cli.engines.render" in c for c in cycles(graph))


def test_the_core_never_imports_the_command_line() -> None:
    graph = import_graph()
    for name, imported in graph.items():
        if not name.startswith("posenc_cli.cli") and name != "posenc_cli.__main__":  # `python -m posenc_cli`
            assert not {m for m in imported if m.startswith("posenc_cli.cli")}, name


def test_engines_never_reach_up_to_the_request_or_policy_layers() -> None:
    """An engine renders a rope dict and model facts; how a request became that dict is not its business."""
    graph = import_graph()
    above = {
        "posenc_cli.models.extension", "posenc_cli.pick.picker", "posenc_cli.pick.planning", "posenc_cli.pick.rules",
        "posenc_cli.scale.options", "posenc_cli.scale.scaled"}
    for name, imported in graph.items():
        if name.startswith("posenc_cli.engines"):
            assert not imported & above, (name, imported & above)
    # and the bottom of the pipeline imports nothing above it
    assert graph["posenc_cli.rope.scaling"] <= {"posenc_cli.errors", "posenc_cli.units", "posenc_cli.rope.rope_types"}
    assert graph["posenc_cli.rope.rope_types"] == set()  # the records stand on nothing


# --- the stages and the size targets ---------------------------------------------------------------------------

#: The stages, bottom first: a module may import its own stage and the ones below it. The top-level modules are the
#: ground every stage stands on.
STAGES = ("posenc_cli.errors posenc_cli.units posenc_cli.files posenc_cli.folderlock posenc_cli.__init__",
          "posenc_cli.rope", "posenc_cli.models", "posenc_cli.engines", "posenc_cli.trainers", "posenc_cli.frameworks",
          "posenc_cli.memory",
          "posenc_cli.scale", "posenc_cli.pick", "posenc_cli.plots", "posenc_cli.evaluation", "posenc_cli.experiment",
          "posenc_cli.cli posenc_cli.__main__")
#: Third-party packages whose import costs start-up time: a function-level import of a posenc module is deliberate
#: when that module loads one of these at import time, or when one of the commands that must stay light
#: (:data:`LIGHT_RUNS`) never loads it (the model reader, deferred until a model is given); the registry's loader
#: imports by name.
HEAVY = ("numpy", "matplotlib", "torch", "transformers", "huggingface_hub", "gguf", "ml_dtypes", "yaml",
         "jsonschema", "rich", "httpx")
#: Commands whose start-up is guarded (tests/test_imports.py): a bare request reads no model.
LIGHT_RUNS = (["scale", "yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128"],
              ["pick", "--ctx", "128k"], ["--version"])
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_TOP_LEVEL_MODULES = 6


def stage_of(module: str) -> int:
    for i, names in enumerate(STAGES):
        if any(module == n or module.startswith(n + ".") for n in names.split()):
            return i
    if module == "posenc_cli":
        return 0
    raise AssertionError(f"{module} belongs to no stage: add its package to STAGES")


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in _modules().items()}


def _resolve(name: str, node: ast.ImportFrom | ast.Import, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def function_level_imports() -> list[tuple[str, str, int]]:
    """(importer, imported posenc module, line) for every import of the package inside a function body."""
    modules = _modules()
    found = []
    for name, tree in _trees().items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        found += [(name, t, node.lineno) for t in _resolve(name, node, modules) if t in modules]
    return sorted(set(found))


def _module_level_imports() -> dict[str, set[str]]:
    """Module -> every module it imports when it is imported (functions and TYPE_CHECKING blocks left out)."""
    out: dict[str, set[str]] = {}
    modules = _modules()
    for name, tree in _trees().items():
        targets: set[str] = set()
        pending: list[ast.AST] = list(tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets |= set(_resolve(name, node, modules))
            pending.extend(ast.iter_child_nodes(node))
        out[name] = targets
    return out


def loads_heavy(module: str, graph: dict[str, set[str]] | None = None) -> bool:
    """Whether importing ``module`` (with its parent packages) loads a :data:`HEAVY` package."""
    graph = graph or _module_level_imports()
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for t in graph.get(m, ()):
            if t.split(".")[0] in HEAVY:
                return True
            todo.append(t)
    return False


def function_lengths() -> list[tuple[int, str]]:
    """(body lines, module:function) of every function, longest first; the docstring does not count."""
    out = []
    for name, tree in _trees().items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = fn.body[1:] if ast.get_docstring(fn) and len(fn.body) > 1 else fn.body
                out.append(((fn.end_lineno or 0) - body[0].lineno + 1, f"{name}:{fn.name}"))
    return sorted(out, reverse=True)


def long_functions() -> list[tuple[int, str]]:
    return [(n, f) for n, f in function_lengths() if n > MAX_FUNCTION_LINES]


def long_modules() -> list[tuple[int, str]]:
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), n) for n, p in _modules().items()]
    return sorted(((n, m) for n, m in sizes if n > MAX_MODULE_LINES), reverse=True)


def top_level_modules() -> list[str]:
    return sorted(p.name for p in PACKAGE.glob("*.py"))


def test_every_import_runs_down_the_stages() -> None:
    upward = sorted((a, b) for a, targets in import_graph().items() for b in targets if stage_of(b) > stage_of(a))
    assert upward == []


def test_an_upward_import_would_be_found() -> None:
    assert stage_of("posenc_cli.models.sources") > stage_of("posenc_cli.rope.scaling")
    assert stage_of("posenc_cli.cli.scale") == len(STAGES) - 1


def test_function_level_imports_are_only_the_deliberately_lazy() -> None:
    graph = _module_level_imports()
    light = [(a, b, line) for a, b, line in function_level_imports() if not loads_heavy(b, graph)]
    runs = [posenc_modules(argv) for argv in LIGHT_RUNS]
    assert "posenc_cli.rope.scaling" in runs[0] and "posenc_cli.pick.picker" in runs[1]  # the probe ran them
    loaded_by_all = set.intersection(*runs)
    pointless = [(a, b, line) for a, b, line in light if b in loaded_by_all]
    assert pointless == [], "import these at the top of the module: every light command loads them anyway"


#: Where a posenc module may be loaded by name (``importlib.import_module``, ``__import__``), as
#: ``module:function``. The registry's loader is the one list of engines and trainers, a stage above both, so every
#: module it loads sits below it (checked below). Two tables of their own stay: the CLI's command table
#: (``cli/app.py``'s ``COMMANDS``, so a run imports one command's module) loads modules of its own stage, so it
#: hides no edge between stages; the package's public names (``posenc_cli/__init__.py``, PEP 562, the library's
#: face in docs/python.md) are reached only by library users: no posenc module imports through them (checked).
BY_NAME = {"posenc_cli.frameworks.registry:_load", "posenc_cli.cli.app:PosencGroup.get_command",
           "posenc_cli:__getattr__"}
#: Loads by a computed name of an installed third-party package's own modules (``check --installed``): the
#: transformers modeling module of a config class, each module of vLLM's rotary package.
THIRD_PARTY_BY_NAME = {"posenc_cli.engines.installed.hf:rotary_class",
                       "posenc_cli.engines.installed.vllm:captured_inv_freq"}


def by_name_imports(trees: dict[str, ast.Module] | None = None) -> dict[str, str]:
    """``module:function`` -> the name's source, for every load by name whose name is a posenc module's or is
    computed (a literal third-party name, ``importlib.import_module("vllm")``, is no posenc edge)."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, module: str, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in (
                "importlib.import_module", "import_module", "__import__"):
            name = node.args[0]
            literal = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
            if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
                literal = str(name.values[0].value)
            if literal is None or literal.startswith("posenc_cli"):
                found[f"{module}:{'.'.join(scope)}"] = ast.unparse(name)
        for child in ast.iter_child_nodes(node):
            visit(child, module, scope)

    for module, tree in (trees or _trees()).items():
        visit(tree, module, [])
    return found


def test_modules_are_loaded_by_name_only_by_the_registrys_loader() -> None:
    from posenc_cli.cli.app import COMMANDS
    from posenc_cli.frameworks import registry

    assert set(by_name_imports()) == BY_NAME | THIRD_PARTY_BY_NAME
    below = stage_of("posenc_cli.frameworks.registry")
    loaded = [e.module for e in registry.ENTRIES] + [e.installed for e in registry.ENTRIES if e.installed]
    assert all(stage_of(m) < below for m in loaded), loaded
    assert {stage_of(module) for module, _ in COMMANDS.values()} == {stage_of("posenc_cli.cli.app")}
    public = set(importlib.import_module("posenc_cli")._EXPORTS)
    through = [(name, a.name) for name, tree in _trees().items() for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module == "posenc_cli" and not node.level
               for a in node.names if a.name in public]
    assert through == [], "import the defining module, not the package's lazy public name"


def test_a_load_by_name_elsewhere_would_be_found() -> None:
    tree = ast.parse("import importlib\n\nclass Plan:\n    def trainer(self, name):\n"
                     "        return importlib.import_module(f'posenc_cli.trainers.{name}')\n"
                     "def vllm():\n    return importlib.import_module('vllm')\n"
                     "def computed(config):\n    return __import__(type(config).__module__)\n")
    assert by_name_imports({"posenc_cli.pick.fake": tree}) == {
        "posenc_cli.pick.fake:Plan.trainer": "f'posenc_cli.trainers.{name}'",
        "posenc_cli.pick.fake:computed": "type(config).__module__"}


def test_heavy_is_told_apart() -> None:
    graph = _module_level_imports()
    assert loads_heavy("posenc_cli.rope.frequencies", graph)  # numpy
    assert not loads_heavy("posenc_cli.rope.scaling", graph)


def test_size_targets() -> None:
    assert len(top_level_modules()) <= MAX_TOP_LEVEL_MODULES, top_level_modules()
    assert long_modules() == []
    assert long_functions() == []


# --- thin commands: a CLI module parses, makes one core call and renders -----------------------------------------

MAX_CLI_MODULE_LINES = 300


def cli_module_sizes() -> list[tuple[int, str]]:
    """(lines, module) of every module of the command line, largest first."""
    return sorted(((len(p.read_text(encoding="utf-8").splitlines()), n) for n, p in _modules().items()
                   if n.startswith("posenc_cli.cli.")), reverse=True)


def test_no_cli_module_is_over_the_limit() -> None:
    sizes = cli_module_sizes()
    assert len(sizes) > 10 and sizes[0][0] > 100  # the scan saw the command modules
    assert [(n, m) for n, m in sizes if n > MAX_CLI_MODULE_LINES] == []


# --- no private module of a dependency ---------------------------------------------------------------------------


def private_imports(tree: ast.Module) -> list[str]:
    """Modules of other packages imported by a private (underscore) name: ``typer._click.exceptions``, ``from typer
    import _click``; the standard library's own ``_``-modules and posenc's are not dependencies."""
    import importlib.util
    import sys

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # ``from pkg import _name`` is a module when pkg holds one by that name, else a private attribute
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                                    and _is_module(f"{node.module}.{a.name}", importlib.util))]
        else:
            continue
        for name in names:
            top, *rest = name.split(".")
            if top in ("posenc_cli", "__future__") or top in sys.stdlib_module_names:
                continue
            if any(part.startswith("_") for part in [top, *rest]):
                found.append(name)
    return found


def _is_module(name: str, util: Any) -> bool:
    try:
        return util.find_spec(name) is not None
    except (ImportError, ValueError):  # the package is not installed: a name it may hold is not known to be one
        return False


def test_no_module_imports_a_private_module_of_a_dependency() -> None:
    found = {name: private_imports(tree) for name, tree in _trees().items()}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_a_private_import_would_be_found() -> None:
    tree = ast.parse("import typer\nfrom typer._click.exceptions import ClickException\nfrom typer import _click\n"
                     "from os import _exit\nimport _thread\nfrom posenc_cli.cli import _x\n")
    assert private_imports(tree) == ["typer._click.exceptions", "typer._click"]





# --- one home per rope-type key list and per transformers default ----------------------------------------------

#: A literal that is a framework's own fact or a deliberate emulation of an engine's arithmetic says so on its
#: statement (or the line above it); every other copy of a record's keys or of transformers' defaults is a finding.
FACT_MARKERS = ("# framework fact:", "# emulation:")
#: The one home of the rope-type records and of transformers' rope defaults.
RECORDS_HOME = "posenc_cli.rope.rope_types"
#: transformers' YaRN defaults (``_compute_yarn_parameters``: ``beta_fast or 32``, ``beta_slow or 1``).
TRANSFORMERS_DEFAULTS = {"beta_fast": 32, "beta_slow": 1}


def _type_keys() -> list[set[str]]:
    """Each rope type's own keys (the common ones left out), for the types with three or more."""
    from posenc_cli.rope.rope_types import COMMON_KEYS, RECORDS

    own = [set(r.keys) - set(COMMON_KEYS) for r in RECORDS.values()]
    return [keys for keys in own if len(keys) >= 3]


def _statement_lines(tree: ast.Module) -> dict[int, tuple[int, int]]:
    """Line -> (first, last) line of the innermost statement holding it."""
    out: dict[int, tuple[int, int]] = {}
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)),
                       key=lambda n: (n.end_lineno or n.lineno) - n.lineno, reverse=True):
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            out[line] = (node.lineno, node.end_lineno or node.lineno)
    return out


def _mentions(node: ast.AST, key: str) -> bool:
    spellings = (key, key.replace("_", "-"))
    for sub in ast.walk(node):
        text = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else (
            sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else
            sub.arg if isinstance(sub, ast.keyword) and sub.arg else sub.arg if isinstance(sub, ast.arg) else "")
        if any(s in text for s in spellings):
            return True
    return False


def _is_number(node: ast.AST | None, value: float) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool) and node.value == value)


def default_literals(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, key) of every transformers default written as a literal beside its key: ``.get(k, 32)``,
    ``.get(k) or 32``, ``{k: 32}``, ``k=32``, ``k: float = 32.0``, ``f(..., "--yarn-beta-fast", 32.0)``."""
    found = []
    for node in ast.walk(tree):
        for key, value in TRANSFORMERS_DEFAULTS.items():
            literal: ast.AST | None = None
            if isinstance(node, ast.Call) and node.args and _mentions(node.args[0], key) and any(
                    _is_number(a, value) for a in node.args[1:]):
                literal = next(a for a in node.args[1:] if _is_number(a, value))
            elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                    and _mentions(a, key) for a in node.args):
                literal = next((a for a in node.args if _is_number(a, value)), None)
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and _mentions(node.values[0], key) \
                    and _is_number(node.values[-1], value):
                literal = node.values[-1]
            elif isinstance(node, ast.Dict):
                literal = next((v for k, v in zip(node.keys, node.values, strict=True)
                                if k is not None and _mentions(k, key) and _is_number(v, value)), None)
            elif isinstance(node, ast.keyword) and node.arg and key in node.arg and _is_number(node.value, value):
                literal = node.value
            elif isinstance(node, (ast.AnnAssign, ast.Assign)) and _is_number(node.value, value) and any(
                    _mentions(t, key) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                literal = node.value
            if literal is not None:
                found.append((getattr(literal, "lineno", node.lineno), key))
    return sorted(set(found))


def key_lists(tree: ast.Module) -> list[int]:
    """Lines of every literal tuple, list or set of strings (or dict of constants) holding three or more of one
    rope type's own keys: a copy of its record."""
    types = _type_keys()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict) and all(isinstance(v, ast.Constant) for v in node.values):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if len(names) == len(items) and any(len(names & keys) >= 3 for keys in types):
            found.append(node.lineno)
    return sorted(set(found))


def _marked(source: list[str], spans: dict[int, tuple[int, int]], line: int) -> bool:
    first, last = spans.get(line, (line, line))
    return any(m in text for text in source[max(first - 2, 0):last] for m in FACT_MARKERS)


def copies(package: Path = PACKAGE) -> dict[str, dict[str, list[int]]]:
    """Per module outside :data:`RECORDS_HOME`: ``defaults`` and ``key_lists`` it writes unmarked, and the
    ``marked`` ones (framework facts, emulations)."""
    out: dict[str, dict[str, list[int]]] = {}
    for path in sorted(package.rglob("*.py")):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        if name == RECORDS_HOME:
            continue
        text = path.read_text(encoding="utf-8")
        tree, source = ast.parse(text), text.splitlines()
        spans = _statement_lines(tree)
        lines = [line for line, _ in default_literals(tree)] + key_lists(tree)
        entry = {"defaults": [ln for ln, _ in default_literals(tree) if not _marked(source, spans, ln)],
                 "key_lists": [ln for ln in key_lists(tree) if not _marked(source, spans, ln)],
                 "marked": [ln for ln in lines if _marked(source, spans, ln)]}
        if any(entry.values()):
            out[name] = entry
    return out


def test_each_rope_key_list_and_transformers_default_has_one_home() -> None:
    found = copies()
    assert {m: e["defaults"] for m, e in found.items() if e["defaults"]} == {}, "read it with rope_types.param"
    assert {m: e["key_lists"] for m, e in found.items() if e["key_lists"]} == {}, "derive it from rope_types.RECORDS"
    # the home holds both: the scan sees its key lists, and its defaults are transformers'
    from posenc_cli.rope.rope_types import RECORDS

    assert key_lists(ast.parse((PACKAGE / "rope" / "rope_types.py").read_text(encoding="utf-8")))
    assert {k: RECORDS["yarn"].defaults[k].value for k in TRANSFORMERS_DEFAULTS} == TRANSFORMERS_DEFAULTS


def test_a_copy_would_be_found_and_a_marked_fact_allowed() -> None:
    copied = ast.parse("\n".join([
        'a = params.get("beta_fast", 32)',
        'b = float(params.get("beta_slow") or 1.0)',
        'c = {"beta_fast": 32.0, "rope_type": "yarn"}',
        'd = Rope(beta_slow=1)',
        'KEYS = ("beta_fast", "beta_slow", "mscale_all_dim")',
        'e = _number(args, "--yarn-beta-fast", 32.0, path)',
        'f = params.get("beta_fast", 24)',  # not transformers' default: another value
    ]))
    assert default_literals(copied) == [(1, "beta_fast"), (2, "beta_slow"), (3, "beta_fast"), (4, "beta_slow"),
                                        (6, "beta_fast")]
    assert key_lists(copied) == [5]
    source = ["x = 1", "# framework fact: Megatron's argparse default", 'e = _number(args, "--yarn-beta-fast", 32.0)']
    tree = ast.parse("\n".join(source))
    assert default_literals(tree) == [(3, "beta_fast")] and _marked(source, _statement_lines(tree), 3)
    assert not _marked(source[:1] + source[2:], _statement_lines(ast.parse("\n".join(source[:1] + source[2:]))), 2)

if __name__ == "__main__":  # the figures: python tests/test_layout.py
    lazy = function_level_imports()
    print(f"modules at the top level: {len(top_level_modules())} ({', '.join(top_level_modules())})")
    print("largest modules:", ", ".join(f"{m} {n}" for n, m in sorted(
        ((len(p.read_text(encoding='utf-8').splitlines()), n) for n, p in _modules().items()), reverse=True)[:3]))
    print("largest CLI modules:", ", ".join(f"{m} {n}" for n, m in cli_module_sizes()[:3]))
    print("longest function bodies:", ", ".join(f"{m} {n}" for n, m in function_lengths()[:3]))
    graph = _module_level_imports()
    deferred = [b for _, b, _ in lazy if not loads_heavy(b, graph)]
    print(f"function-level imports of the package: {len(lazy)} ({len(deferred)} of a light module the light "
          f"commands never load: {', '.join(sorted(set(deferred)))})")
    found = copies()
    print(f"rope-type key lists outside {RECORDS_HOME}: {sum(len(e['key_lists']) for e in found.values())}; "
          f"transformers' YaRN default literals outside it: {sum(len(e['defaults']) for e in found.values())}; "
          f"marked framework facts/emulations: {sum(len(e['marked']) for e in found.values())} in "
          f"{sum(1 for e in found.values() if e['marked'])} modules")
