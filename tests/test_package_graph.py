"""The package graph, read from the source with ``ast``: dependencies point one way.

Each folder of ``src/lockgate`` with an ``__init__.py`` is a package; a module of the top
folder (``lockgate/_errors.py``, ``lockgate/__init__.py``, ...) is a node of its own, so the
public facade may import everything while the floor modules it sits on import nothing above
them. Imports under ``if TYPE_CHECKING:`` are left out (they run for the type checker only);
imports inside functions count, since they run. ``docs/architecture.md`` draws the floors
the packages stand on; :func:`test_every_import_goes_down_the_floors_the_architecture_draws`
holds that drawing against the code.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
DOC = SRC.parent / "docs" / "architecture.md"
ROOT = SRC / "lockgate"

#: The store backends: none imports another. The composite sits above them and may.
BACKENDS = ("stores.memory", "stores.sqlite", "stores.valkey", "stores.kafka")
#: The most lines a module may have (STYLE.md: past it, split the module by role).
MOST_LINES = 800


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the module imported (a name imported from a module: that module)
    names: tuple[str, ...]  # for ``from X import a, b``: the names, else ()
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    path = SRC / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, nested ones too, but those under
    ``if TYPE_CHECKING:`` (its ``else`` runs, so it counts)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.orelse:
                yield from import_nodes(ast.Module(body=[statement], type_ignores=[]))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from import_nodes(child)


def imports_of(path: Path) -> Iterator[Import]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in import_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, (), node.lineno)
        else:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            plain = [a.name for a in node.names if not is_module(f"{target}.{a.name}")]
            for alias in node.names:
                if is_module(f"{target}.{alias.name}"):
                    yield Import(module, f"{target}.{alias.name}", (), node.lineno)
            if plain:
                yield Import(module, target, tuple(plain), node.lineno)


def node_of(dotted: str) -> str:
    """The graph node a module belongs to: its package, or itself for a top-folder module."""
    inner = dotted.removeprefix("lockgate").lstrip(".")
    path = ROOT / inner.replace(".", "/") if inner else ROOT
    if (path / "__init__.py").is_file():
        return inner or "lockgate"
    package = inner.rpartition(".")[0]
    return package if package else dotted


def own_imports() -> list[Import]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found.extend(i for i in imports_of(path) if i.target.split(".")[0] == "lockgate")
    return found


IMPORTS = own_imports()


def edges() -> dict[tuple[str, str], list[Import]]:
    out: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in IMPORTS:
        a, b = node_of(imp.module), node_of(imp.target)
        if a != b:
            out[(a, b)].append(imp)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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


def under(node: str, package: str) -> bool:
    return node == package or node.startswith(package + ".")


def crossing(source: str, targets: tuple[str, ...]) -> list[str]:
    return [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for (a, b), found in edges().items()
        if under(a, source) and any(under(b, t) for t in targets)
        for imp in found
    ]


def test_the_reader_sees_the_imports_it_must() -> None:
    """The reader is not blind: a known import is found, one under TYPE_CHECKING is not, and
    the graph would show a cycle it was handed."""
    assert ("worker", "stores") in edges()
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from lockgate import hidden\n"
        "def f():\n    from lockgate import inner\n"
    )
    found = [a.name for n in import_nodes(ast.parse(source)) for a in n.names]
    assert found == ["TYPE_CHECKING", "inner"]


def test_no_package_import_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        graph[a].add(b)
    found = cycles(graph)
    detail = {
        tuple(c): sorted(
            f"{imp.module}:{imp.line} -> {imp.target}"
            for a in c
            for b in c
            for imp in edges().get((a, b), [])
        )
        for c in found
    }
    assert found == [], detail


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("workflow", ("client", "attempt", "runs", "streams", "worker")),
        ("runs", ("client", "attempt", "worker")),
        ("attempt", ("client", "worker")),
        ("stores", ("workflow", "attempt", "runs", "client", "worker", "streams")),
        ("journal", ("stores", "workflow", "attempt", "runs", "client", "worker", "streams")),
        ("streams", ("client", "worker")),
        ("client", ("worker", "http", "console", "cli")),
        ("worker", ("http", "console", "cli")),
    ],
)
def test_imports_point_down(source: str, forbidden: tuple[str, ...]) -> None:
    assert crossing(source, forbidden) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_backend_imports_another(backend: str) -> None:
    others = tuple(b for b in BACKENDS if b != backend)
    assert crossing(backend, (*others, "stores.composite")) == []


def test_no_module_calls_another_modules_private_names() -> None:
    """``from lockgate.x._mod import _name`` reaches past a module's surface; names another
    module uses are plain names of their module (the modules themselves stay private)."""
    reaching = [
        f"{imp.module}:{imp.line} takes {name} from {imp.target}"
        for imp in IMPORTS
        for name in imp.names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert reaching == []


def test_no_module_over_the_line_budget() -> None:
    long = {
        module_name(path): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert long == {}


def floors_drawn() -> dict[str, int]:
    """The floor of each node, as ``docs/architecture.md``'s ``### Floors`` block draws it:
    lines ``N | node node ... | what they are``, a top-folder module by its name (``_errors``,
    ``__main__``), the facade as ``lockgate``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Floors", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    floors: dict[str, int] = {}
    for line in block.splitlines():
        number, names, _what = (part.strip() for part in line.split("|"))
        for name in names.split():
            node = f"lockgate.{name}" if name.startswith("_") else name
            assert node not in floors, f"{name} is drawn on two floors"
            floors[node] = int(number)
    return floors


def test_every_import_goes_down_the_floors_the_architecture_draws() -> None:
    floors = floors_drawn()
    nodes = {node for edge in edges() for node in edge}
    assert sorted(nodes - floors.keys()) == [], "packages the drawing leaves out"
    assert sorted(floors.keys() - nodes) == [], (
        "packages drawn that import nothing and that nothing imports"
    )
    upward = [
        f"{imp.module}:{imp.line} imports {imp.target} (floor {floors[a]} -> {floors[b]})"
        for (a, b), found in edges().items()
        if floors[b] >= floors[a]
        for imp in found
    ]
    assert upward == []
