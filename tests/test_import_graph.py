"""The package's shape, checked on the code as installed (issue 17).

1. Each folder is one layer and imports only the layers below it:
   `statemachine` ← `specs`, and `statemachine` ← `engines` ← `adapters` ← `streamfold` (the
   command-line shell, which nothing else imports). So no two packages import each other.
2. No two files import each other, directly or round a longer circle (lazy imports inside
   functions count; `if TYPE_CHECKING:` imports do not, as they never run).
3. Every name a module imports from another streamfold module is in that module's `__all__`,
   and every name an `__all__` lists exists (as anyio checks its own `__all__`s).
4. Inside `adapters`, what two rooms share sits under both (issue 28): the protocol layer
   (`adapters/protocol`: the request model, input items, tool parameters) imports neither the
   server nor the agent loop, the chat formats (`adapters/formats`) import neither, and the
   agent loop imports nothing of the server.

The graph is read from the source with `ast`, so a lazy import that a test never reaches still
counts.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGES = (
    "streamfold",
    "streamfold.statemachine",
    "streamfold.specs",
    "streamfold.engines",
    "streamfold.adapters",
)
# The layers each layer may import (its own is always allowed).
ALLOWED: dict[str, set[str]] = {
    "streamfold.statemachine": set(),
    "streamfold.engines": {"streamfold.statemachine"},
    # The hypothesis strategies encode their text with the offline vocabulary (engines.vocab).
    "streamfold.specs": {"streamfold.statemachine", "streamfold.engines"},
    "streamfold.adapters": {"streamfold.statemachine", "streamfold.engines"},
    "streamfold": {
        "streamfold.statemachine",
        "streamfold.specs",
        "streamfold.engines",
        "streamfold.adapters",
    },
}


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name (C extensions by their stub)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if name in PACKAGES and name != package:
                continue  # a sub-layer is listed under its own name
            if path.suffix == ".pyi" and name in found:
                continue
            found[name] = path
    return found


MODULES = _modules()


def _layer(module: str) -> str:
    return next(p for p in sorted(PACKAGES, key=len, reverse=True) if module.startswith(p))


class _Import:
    def __init__(self, source: str, target: str, names: tuple[str, ...], line: int) -> None:
        self.source, self.target, self.names, self.line = source, target, names, line

    def __repr__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target} {self.names or ''}"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _imports(module: str, path: Path) -> Iterator[_Import]:
    """The streamfold imports of one module that run (at import time or in a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "streamfold":
                    yield _Import(module, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "streamfold":
                continue
            names = tuple(a.name for a in node.names)
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            if len(submodules) == len(names):  # `from . import _items`: the modules themselves
                for sub in submodules:
                    yield _Import(module, sub, (), node.lineno)
            else:
                yield _Import(module, target, names, node.lineno)


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def test_the_graph_was_read() -> None:
    """Guards the tests below against passing on an empty graph."""
    assert {"streamfold.statemachine._reducer", "streamfold.cli"} <= set(MODULES)
    assert any(i.target == "streamfold.engines" for i in IMPORTS)


def test_each_folder_imports_only_the_layers_below_it() -> None:
    wrong = [
        imp
        for imp in IMPORTS
        if _layer(imp.target) != _layer(imp.source)
        and _layer(imp.target) not in ALLOWED[_layer(imp.source)]
    ]
    assert not wrong, "imports against the layering:\n" + "\n".join(map(repr, wrong))


# Rooms of `adapters` and the rooms each must not import (imports inside functions count).
FORBIDDEN: dict[str, set[str]] = {
    "streamfold.adapters.protocol": {
        "streamfold.adapters.server",
        "streamfold.adapters.agent",
        "streamfold.adapters.formats",
        "streamfold.adapters.structured",
    },
    # What a request asks the model to write, said without any family or server.
    "streamfold.adapters.structured": {
        "streamfold.adapters.server",
        "streamfold.adapters.agent",
        "streamfold.adapters.formats",
    },
    "streamfold.adapters.formats": {"streamfold.adapters.server", "streamfold.adapters.agent"},
    "streamfold.adapters.agent": {"streamfold.adapters.server"},
}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_shared_rooms_sit_under_the_server_and_the_agent_loop() -> None:
    wrong = [
        imp
        for imp in IMPORTS
        for room, forbidden in FORBIDDEN.items()
        if _inside(imp.source, room) and any(_inside(imp.target, f) for f in forbidden)
    ]
    assert not wrong, "imports that run back up inside adapters:\n" + "\n".join(map(repr, wrong))


def test_a_function_level_import_is_read(tmp_path: Path) -> None:
    """The walk sees an import placed inside a function (how agent/ once reached server/)."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from ..server.requests import CreateRequest\n")
    found = list(_imports("streamfold.adapters.agent._m", path))
    assert [i.target for i in found] == ["streamfold.adapters.server.requests"]


def test_no_file_imports_itself_round_a_circle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        target = imp.target
        while target and target not in MODULES:  # `from pkg.mod import name` -> pkg.mod
            target = target.rpartition(".")[0]
        if target and target != imp.source:
            graph[imp.source].add(target)
    cycles = _cycles(graph)
    assert not cycles, "files that import each other: " + "; ".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_a_cycle_is_found_where_there_is_one() -> None:
    """The cycle finder itself, so the test above cannot pass by finding nothing."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _import(module: str) -> object:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:  # an extra that is not installed (torch, starlette)
        if exc.name and exc.name.split(".")[0] != "streamfold":
            pytest.skip(f"{module} needs {exc.name}")
        raise


def test_every_imported_name_is_in_its_modules_all() -> None:
    missing = []
    for imp in IMPORTS:
        if not imp.names or imp.target not in MODULES or imp.target.endswith("._speedups"):
            continue
        exported = getattr(_import(imp.target), "__all__", None)
        for name in imp.names:
            if name in ("*", "__all__"):
                continue
            if exported is None or name not in exported:
                missing.append(f"{imp!r}: {name!r} is not in {imp.target}.__all__")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if not m.endswith(("._speedups", "__main__")))
)
def test_every_name_in_all_exists(module: str) -> None:
    imported = _import(module)
    exported = getattr(imported, "__all__", ())
    assert len(set(exported)) == len(exported), f"{module}.__all__ lists a name twice"
    absent = [name for name in exported if not hasattr(imported, name)]
    assert not absent, f"{module}.__all__ lists names it does not define: {absent}"
