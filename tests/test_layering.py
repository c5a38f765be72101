"""paratrain's modules form layers, not a tangle: no import cycles, nothing below the CLI imports the CLI, and the
optional backends are imported only where they are used.

Why: a cycle means neither module can be read, tested or split off without the other, and its import order decides
whether it works at all (a partially initialised module). Importing a module inside a function only dodges the
ImportError; the two modules still depend on each other, so lazy imports count here too.

How the graph is built, from the source text (``ast``; nothing is imported):

- Every ``import`` counts, wherever it is (module level, functions, classes, ``try``), except those under
  ``if TYPE_CHECKING:``, which never run and only name types.
- ``import a.b.c`` is an edge to ``a.b.c``; ``from a.b import c`` to ``a.b.c`` when ``c`` is a submodule, else to
  ``a.b``. Relative imports are resolved against the importing module's package.
- Package-init noise is left out, so that the check finds real cycles. Importing ``a.b.c`` also runs
  ``a/b/__init__.py``, but that implicit parent import is no edge: a package whose ``__init__`` re-exports its
  submodules would otherwise form a cycle with every submodule that imports a sibling. For the same reason
  ``from a.b import name``, where ``a/b/__init__.py`` only re-exports ``name`` from a submodule (an import in the
  ``__init__``, including a ``TYPE_CHECKING`` one that documents a lazy ``__getattr__``), is an edge to that
  submodule, where the name lives; only a name the ``__init__`` defines itself (``__version__``) makes an edge to
  the package. A package's ``__init__`` importing its own submodules is an ordinary edge.
- ``importlib.import_module`` with a computed name is not seen; such a look-up should stay a registry of names.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paratrain

ROOT = Path(paratrain.__file__).parent
# Optional extras (pyproject's [project.optional-dependencies]) by import name: `import paratrain` and every
# command must work without them, so they are imported inside the functions that use them.
OPTIONAL = ("deepspeed", "horovod", "tensorflow", "keras", "tf_keras", "matplotlib", "sklearn")
CLI = "paratrain.cli"
CLI_IMPORTERS = ("paratrain.__main__",)  # the CLI's own entry points, besides the CLI package itself
# Cycles known and being removed; each entry is one cycle as reported (its smallest module first). Any cycle not
# listed fails, and so does an entry that no longer occurs, so the list only shrinks.
KNOWN_CYCLES: tuple[str, ...] = ()  # a cycle allowed while it is being removed; none today


@dataclass(frozen=True)
class Import:
    """One import statement: the module it is in, the modules it names, and whether it runs at import time."""

    module: str
    targets: tuple[str, ...]
    top_level: bool
    line: int


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("paratrain", *path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in MODULES.items()}


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, top_level: bool = True) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import under ``node`` that can run, with whether it runs when the module is imported (not inside a
    function). ``if TYPE_CHECKING:`` bodies are skipped; their ``else`` is not."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, top_level
        elif isinstance(child, ast.If) and _type_checking(child):
            yield from _walk(ast.Module(body=child.orelse, type_ignores=[]), top_level)
        else:
            yield from _walk(child, top_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import reads from (``from . import x`` in ``a.b.c`` reads ``a.b``)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


@functools.cache
def _reexports(package: str) -> dict[str, str]:
    """Names a package's ``__init__`` takes from a module it imports them from (TYPE_CHECKING imports included:
    they name what a lazy ``__getattr__`` returns)."""
    names = {}
    for node in ast.walk(TREES[package]):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(package, node)
            for alias in node.names:
                names[alias.asname or alias.name] = source
    return names


def _from_target(source: str, name: str, seen: frozenset[str] = frozenset()) -> str | None:
    """The paratrain module ``from source import name`` depends on (see the module docstring), None outside it."""
    while source and source not in MODULES:
        source = source.rpartition(".")[0]  # a name below a module: the nearest module that exists
    if not source.startswith("paratrain"):
        return None
    if f"{source}.{name}" in MODULES:
        return f"{source}.{name}"
    origin = _reexports(source).get(name) if _is_package(source) else None
    if origin is None or origin in seen:
        return source
    return _from_target(origin, name, seen | {source}) or source


def _imports(module: str) -> Iterator[Import]:
    for node, top in _walk(TREES[module]):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            source = _absolute(module, node)
            targets = [_from_target(source, a.name) or source for a in node.names]
        yield Import(module, tuple(dict.fromkeys(targets)), top, node.lineno)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for module in MODULES:
        for imp in _imports(module):
            for target in imp.targets:
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        members.append(top)
                        if top == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def cycles(graph: dict[str, set[str]], limit: int = 200) -> list[list[str]]:
    """Every elementary cycle (each once, starting at its smallest module), up to ``limit`` of them."""
    found: list[list[str]] = []
    for members in _components(graph):
        inside = set(members)
        for start in members:
            path = [start]
            work = [iter(sorted(n for n in graph[start] if n in inside and n >= start))]
            while work and len(found) < limit:
                child = next(work[-1], None)
                if child is None:
                    work.pop()
                    path.pop()
                elif child == start:
                    found.append([*path, start])
                elif child not in path:
                    path.append(child)
                    work.append(iter(sorted(n for n in graph[child] if n in inside and n >= start)))
    return found


def test_no_import_cycles() -> None:
    found = [" → ".join(c) for c in cycles(_graph())]
    new = [c for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    every = "\n".join(f"  {c}{'  (known)' if c in KNOWN_CYCLES else ''}" for c in found)
    assert not new, f"import cycles (lazy imports count):\n{every}"
    assert not gone, "these known cycles are gone: remove them from KNOWN_CYCLES\n" + "\n".join(gone)


def _in_cli(module: str) -> bool:
    return module == CLI or module.startswith(CLI + ".")


def test_only_the_cli_imports_the_cli() -> None:
    wrong = [f"{m} imports {t}" for m, targets in _graph().items() for t in sorted(targets)
             if _in_cli(t) and not (_in_cli(m) or m in CLI_IMPORTERS)]
    assert not wrong, "the CLI is the top layer; the library must not import it:\n" + "\n".join(wrong)


def test_optional_backends_are_imported_lazily() -> None:
    wrong = [f"{imp.module}:{imp.line} imports {t} at module level" for m in MODULES for imp in _imports(m)
             if imp.top_level for t in imp.targets if t.split(".")[0] in OPTIONAL]
    assert not wrong, "optional backends must be imported inside the functions that use them:\n" + "\n".join(wrong)


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The checks above are only as good as the graph: it must see an import inside a function, skip a
    TYPE_CHECKING one, resolve ``from pkg import submodule`` and a relative import, and follow re-exports."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import horovod\nelse:\n"
                     "    import keras\ndef f():\n    import deepspeed\n")
    assert [(n.names[0].name, top) for n, top in _walk(tree) if isinstance(n, ast.Import)] == [
        ("keras", True), ("deepspeed", False)]
    node = ast.parse("from ..bench import report").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _absolute("paratrain.workloads.mlp", node) == "paratrain.bench"
    assert _from_target("paratrain.bench", "report") == "paratrain.bench.report"
    assert _from_target("paratrain", "Session") == "paratrain.session"
    assert _from_target("paratrain", "__version__") == "paratrain"
    assert _from_target("paratrain.workloads", "get") == "paratrain.workloads.registry"
    assert "paratrain.bench.recommend" in _graph()["paratrain.bench.report"]
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}) == [["a", "b", "a"], ["b", "c", "b"]]
