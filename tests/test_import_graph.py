"""The package's import graph, read from the source with `ast`: no cycles, and a workflow side
that imports nothing doing I/O.

What counts as an import. Every `import` statement of a module is an edge, wherever it is:
at module level, under `if TYPE_CHECKING:`, and inside a function. A deferred or type-only
import still says "this module needs that one"; deferring it only hides a cycle from the
interpreter (the issue's two cycles were of exactly these kinds: `_stream` imported
`openai_chat` inside a function, `errors` named `results` under `TYPE_CHECKING`). Relative
imports are resolved against the importing module; `from a import b` is an edge to the
module `a.b` when there is one, else to `a`. Importing a submodule is not counted as an edge
to its parent packages (Python runs their `__init__` first, but every module would then be
in a cycle with `towline/__init__.py`, which imports the public API); a package's own
`__init__` imports are edges like any module's. The symlinked role packages
(`towline/workflows`, `towline/activities`, `towline/capabilities`) are walked as the
subpackages they are.

The workflow side (`towline.workflows`, `towline.capabilities`) runs inside Temporal's
workflow sandbox and must be deterministic. Two checks:
- directly, no module of it imports (anywhere in it) a library or towline module that does
  I/O, or one whose purpose is the clock or randomness (`IO_LIBRARIES`, `NONDETERMINISTIC`,
  `IO_MODULES`), except the hook guard's watch list, which imports standard modules to
  recognise and refuse their functions;
- transitively, what importing it loads (module-level edges, followed through towline's
  modules) holds no towline I/O module and no I/O library.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

IO_LIBRARIES = (
    # the standard library's files, processes, sockets and servers
    "os", "io", "pathlib", "glob", "shutil", "tempfile", "socket", "ssl", "select", "selectors",
    "subprocess", "multiprocessing", "concurrent.futures", "http", "urllib.request", "ftplib",
    "smtplib", "sqlite3", "asyncio.subprocess",
    # network clients and servers, the provider SDKs, cloud storage
    "httpx", "httpcore", "requests", "aiohttp", "urllib3", "grpc", "openai", "anthropic",
    "google.genai", "google.auth", "google.cloud", "boto3", "botocore", "aiobotocore", "mcp",
    "uvicorn", "starlette", "fastapi", "cryptography",
    # Temporal's client, server connection and test server (the workflow side uses its
    # `workflow` API; `temporalio.worker` only for the interceptor base classes)
    "temporalio.client", "temporalio.service", "temporalio.testing", "temporalio.runtime",
)
"""Libraries that do I/O (a module or any of its submodules)."""

NONDETERMINISTIC = ("time", "random", "secrets", "uuid", "threading", "_thread")
"""Modules whose point is the clock, randomness or threads (workflow code has `workflow.now()`,
`workflow.random()`, `workflow.uuid4()` and asyncio instead)."""

IO_MODULES = (
    "towline.activities",  # all I/O of a run, except the two below
    "towline.cli", "towline.client", "towline.devserver", "towline.encryption.codec_server", "towline.encryption.codec",
    "towline.storage.cloud_stores", "towline.storage.payload_store", "towline.runtime.registration",
    "towline.telemetry.metrics", "towline.runtime.worker", "towline.runtime.plugin", "towline.runtime.hashseed",
    "towline.replay", "towline.testing",
    "towline.models",  # re-exports the provider models, which live with the activities
)
"""towline's modules that do I/O (a module or any of its submodules)."""

PURE_ACTIVITY_MODULES = ("towline.activities.io", "towline.activities.model_errors")
"""The activity side's payload types and names, and its error names: what the workflow needs
to schedule an activity and read its failure. Pure data, no I/O."""

WORKFLOW_SIDE = ("towline.workflows", "towline.capabilities")

GUARD_WATCHLIST = "towline.workflows.watchlist"
"""The hook guard's list of what hook code may not call: it imports `socket`, `io`, `time`,
`random`, ... to recognise their functions, and calls none of them."""


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@dataclass(repr=False)
class Graph:
    """A package's modules and the imports between them."""

    modules: dict[str, Path]
    edges: dict[str, dict[str, set[str]]] = field(default_factory=dict[str, dict[str, set[str]]])
    """module -> imported package module -> how (`module`, `type_checking`, `function`)."""
    external: dict[str, dict[str, set[str]]] = field(default_factory=dict[str, dict[str, set[str]]])
    """module -> imported module outside the package (full dotted name) -> how."""

    def __repr__(self) -> str:
        return f"Graph({len(self.modules)} modules)"

    def targets(self, module: str, kinds: Iterable[str]) -> set[str]:
        wanted = set(kinds)
        return {t for t, how in self.edges[module].items() if how & wanted}


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` by dotted name, symlinked folders followed."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder, name)
                parts = list(path.relative_to(root.parent).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def build_graph(root: Path) -> Graph:
    """The import graph of the package whose folder is `root` (its name is the folder's)."""
    graph = Graph(_modules(root))
    package = root.name

    def owner(name: str) -> str | None:  # the package module `name` is, or is inside
        while name and name not in graph.modules:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in graph.modules.items():
        inside: dict[str, set[str]] = {}
        outside: dict[str, set[str]] = {}

        def add(name: str, how: str, *, inside: dict[str, set[str]] = inside,
                outside: dict[str, set[str]] = outside, module: str = module) -> None:
            if _within(name, (package,)):
                target = owner(name)
                if target and target != module:
                    inside.setdefault(target, set()).add(how)
            else:
                outside.setdefault(name, set()).add(how)

        def visit(nodes: Iterable[ast.stmt], how: str, *, module: str = module,
                  path: Path = path) -> None:
            for node in nodes:
                if isinstance(node, ast.If) and _is_type_checking(node.test):
                    visit(node.body, "type_checking")
                    visit(node.orelse, how)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    visit(node.body, "function")
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        add(alias.name, how)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = module if path.name == "__init__.py" else module.rpartition(".")[0]
                        for _ in range(node.level - 1):
                            base = base.rpartition(".")[0]
                        source = f"{base}.{node.module}" if node.module else base
                    else:
                        source = node.module or ""
                    for alias in node.names:
                        full = f"{source}.{alias.name}"
                        add(full if full in graph.modules else source, how)
                else:  # class bodies, try/with/for/if blocks, match cases
                    for child in ast.iter_child_nodes(node):
                        if isinstance(child, ast.stmt):
                            visit([child], how)
                        elif isinstance(child, ast.ExceptHandler | ast.match_case):
                            visit(child.body, how)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)).body, "module")
        graph.edges[module] = inside
        graph.external[module] = outside
    return graph


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:  # iterative, so a deep graph needs no recursion limit
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def _cycle_path(graph: Graph, component: list[str]) -> str:
    """A shortest cycle through `component`'s first module, as `a -> b (how) -> ... -> a`,
    to say which import to break."""
    members = set(component)
    start = component[0]
    came: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came:
        following: list[str] = []
        for here in frontier:
            for step in sorted(graph.edges[here]):
                if step in members and step not in came:
                    came[step] = here
                    following.append(step)
        frontier = following
    links = [start]
    while len(links) == 1 or links[-1] != start:
        links.append(came[links[-1]])
    links.reverse()
    shown = [links[0]] + [f"{b} ({'/'.join(sorted(graph.edges[a][b]))})"
                          for a, b in pairwise(links)]
    return " -> ".join(shown)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(REPO / "towline")


def test_the_graph_sees_the_whole_package(graph: Graph) -> None:
    # The symlinked role packages are walked, and relative imports resolve.
    for name in ("towline.workflows.agent_run", "towline.activities.providers._stream",
                 "towline.capabilities.subagent", "towline.cli.run"):
        assert name in graph.modules, name
    assert "towline.activities.providers._common" in graph.edges[
        "towline.activities.providers._stream"]
    # Deferred and type-only imports are edges too.
    assert graph.edges["towline.errors"]["towline.results"] == {"type_checking"}
    assert "function" in graph.edges["towline.capabilities.subagent"]["towline.agent"]
    # Every module the I/O rules name exists (a rename must update them, not void them).
    for name in (*IO_MODULES, *PURE_ACTIVITY_MODULES, GUARD_WATCHLIST):
        assert name in graph.modules, name


def test_no_import_cycles(graph: Graph) -> None:
    kinds = ("module", "type_checking", "function")
    found = cycles({m: graph.targets(m, kinds) for m in graph.modules})
    assert not found, "import cycles:\n" + "\n".join(_cycle_path(graph, c) for c in found)


def test_the_cycle_finder_finds_each_kind_of_edge(tmp_path: Path) -> None:
    """A package with one cycle through a function-level import, one through
    `TYPE_CHECKING`, one through a relative import, and an acyclic rest."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("from pkg.b import B\nA = 1\n")
    (pkg / "b.py").write_text("B = 2\ndef f():\n    from pkg.a import A\n    return A\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg import d\n")
    (pkg / "d.py").write_text("from . import c\n")
    (pkg / "sub" / "__init__.py").write_text("from .e import E\n")
    (pkg / "sub" / "e.py").write_text("from ..a import A\nE = 3\n")
    (pkg / "sub" / "f.py").write_text("import os\nfrom .. import sub\nclass F:\n    import pkg.sub.e\n")
    g = build_graph(pkg)
    found = cycles({m: g.targets(m, ("module", "type_checking", "function")) for m in g.modules})
    assert found == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert cycles({m: g.targets(m, ("module",)) for m in g.modules}) == []
    assert g.edges["pkg.sub.e"] == {"pkg.a": {"module"}}
    assert g.edges["pkg.sub.f"] == {"pkg.sub": {"module"}, "pkg.sub.e": {"module"}}
    assert g.external["pkg.sub.f"] == {"os": {"module"}}


def _side(graph: Graph) -> list[str]:
    return sorted(m for m in graph.modules if _within(m, WORKFLOW_SIDE))


def _io_module(name: str) -> bool:
    return _within(name, IO_MODULES) and not _within(name, PURE_ACTIVITY_MODULES)


def test_the_workflow_side_imports_nothing_that_does_io(graph: Graph) -> None:
    side = _side(graph)
    assert len(side) > 30, side
    wrong: list[str] = []
    for module in side:
        for name in graph.external[module]:
            forbidden = _within(name, IO_LIBRARIES) or _within(name, NONDETERMINISTIC)
            stdlib_watched = module == GUARD_WATCHLIST and name.split(".")[0] in _stdlib()
            if forbidden and not stdlib_watched:
                wrong.append(f"{module} imports {name}")
        wrong += [f"{module} imports {name}" for name in graph.edges[module] if _io_module(name)]
    assert not wrong, "\n".join(wrong)


def _stdlib() -> frozenset[str]:
    return frozenset(sys.stdlib_module_names)


def test_importing_the_workflow_side_loads_no_io(graph: Graph) -> None:
    """What `import towline.workflows.X` loads, followed through towline's modules at module
    level: no towline I/O module, and no module there imports an I/O library at import."""
    reached: dict[str, str] = {m: m for m in _side(graph)}  # module -> who imported it first
    todo = list(reached)
    while todo:
        module = todo.pop()
        for target in sorted(graph.targets(module, ("module",))):
            if target not in reached:
                reached[target] = module
                todo.append(target)

    def chain(module: str) -> str:
        links = [module]
        while reached[links[-1]] != links[-1]:
            links.append(reached[links[-1]])
        return " <- ".join(links)

    wrong = [chain(m) for m in reached if _io_module(m)]
    for module in reached:
        if _within(module, WORKFLOW_SIDE):
            continue  # checked above, the guard's watch list with its reason
        io = [n for n, how in graph.external[module].items()
              if "module" in how and _within(n, IO_LIBRARIES)]
        wrong += [f"{chain(module)} imports {name}" for name in io]
    assert not wrong, "\n".join(wrong)


TOP_LEVEL_API = {"__init__", "agent", "client", "contract", "errors", "events", "hooks", "media",
                 "messages", "models", "native_tools", "options", "results", "tools"}
"""`towline/`'s own modules: the public API. Every other concern is a subpackage."""


def test_the_tree_shows_the_architecture() -> None:
    """At most 15 top-level modules (the public API), each other concern a subpackage whose
    docstring says what it holds in one line. (No line cap: a module is one concern, long
    where that concern is; splitting by a cap scattered one concern over several files.)"""
    package = REPO / "towline"
    modules = {p.stem for p in package.glob("*.py")}
    assert modules == TOP_LEVEL_API and len(modules) <= 15
    for sub in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((sub / "__init__.py").read_text(encoding="utf-8")))
        assert doc, f"towline/{sub.name} has no docstring"
        assert doc.splitlines()[0].endswith("."), f"towline/{sub.name}: one line saying what it holds"
