"""The package's import graph, read with `ast` from every file of tandem/ (imports inside
functions and under TYPE_CHECKING included): no cycle between two files, no import of tandem
inside a function unless it is listed below with the reason it must stay lazy, nothing in
tandem/ imports the demo models' training (tandem_demo), and routing policies stay pure."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tandem"

# (importer, imported): why the import runs only when the function does
LAZY = {
    ("tandem.asyncq.open_queue", "tandem.asyncq.redis_queue"):
        "a SQLite or PostgreSQL queue never loads the redis client",
    ("tandem.asyncq.open_queue", "tandem.asyncq.postgres_queue"):
        "a SQLite or Redis queue never loads psycopg",
    ("tandem.accounts.open_store", "tandem.accounts.redis_store"):
        "accounts on SQLite or PostgreSQL never load the redis client",
    ("tandem.accounts.open_store", "tandem.asyncq.postgres_queue"):
        "accounts on SQLite or Redis never load psycopg",
    # importing a Triton kernel's module imports triton and decides, then, whether its kernels
    # compile for the GPU or run in the interpreter: only when --attention/--moe-kernel triton
    ("tandem.models.triton_choice", "tandem.kernels.triton.runtime"): "triton only when chosen",
    ("tandem.models.triton_choice", "tandem.kernels.triton.paged_attention"): "triton only when chosen",
    ("tandem.models.triton_choice", "tandem.kernels.triton.paged_mla"): "triton only when chosen",
    ("tandem.models.triton_choice", "tandem.kernels.triton.fused_moe"): "triton only when chosen",
    ("tandem.usage.open_store", "tandem.usage.redis_store"):
        "a SQLite or PostgreSQL usage store never loads the redis client",
    ("tandem.usage.open_store", "tandem.asyncq.postgres_queue"):
        "a SQLite or Redis usage store never loads psycopg",
    ("tandem.tracing.tracer", "tandem.tracing.otlp"):
        "opentelemetry only with --otlp-endpoint: without it tracing costs no import",
}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    in_function: bool
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is a module of the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def _edges() -> list[Edge]:
    modules = _modules()
    edges = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = {_resolve(t, modules) for t in _imported_names(node, package)
                       if t.split(".")[0] in ("tandem", "tandem_demo")}
            for target in targets:
                if target and target != name:
                    edges.append(Edge(name, target, id(node) in in_function, node.lineno))
            if any(t.split(".")[0] == "tandem_demo" for t in _imported_names(node, package)):
                edges.append(Edge(name, "tandem_demo", id(node) in in_function, node.lineno))
    return edges


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def test_no_import_cycle_between_files():
    assert _cycles(_edges()) == []


def test_the_cycle_check_finds_a_cycle():
    edges = [Edge("a", "b", False, 1), Edge("b", "c", True, 1), Edge("c", "a", False, 1), Edge("c", "d", False, 1)]
    assert _cycles(edges) == [["a", "b", "c"]]


def test_imports_inside_functions_are_the_listed_lazy_ones():
    lazy = {(e.importer, e.imported): e.line for e in _edges() if e.in_function}
    unlisted = sorted(f"{a} line {line}: {b}" for (a, b), line in lazy.items() if (a, b) not in LAZY)
    assert unlisted == [], "move these imports to the top of their module, or list them in LAZY with the reason"
    stale = sorted(set(LAZY) - set(lazy))
    assert stale == [], f"listed as lazy but no longer imported inside a function: {stale}"


def test_the_serving_package_never_imports_the_demo_training():
    assert [f"{e.importer} line {e.line}" for e in _edges() if e.imported == "tandem_demo"] == []


def test_routing_policies_import_nothing_above_kv_and_types():
    allowed = ("tandem.router.", "tandem.kv.", "tandem.types", "tandem.errors")
    bad = [f"{e.importer} -> {e.imported}" for e in _edges()
           if e.importer.startswith("tandem.router.policies") and not e.imported.startswith(allowed)]
    assert bad == []
