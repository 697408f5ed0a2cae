"""The layout's guarantees, read from the source with `ast`: no import cycle among the modules of gateway/,
orchestrator/ and plugins/, and one place for the storage backend (`queue.backend` read in one module, the
PostgreSQL code imported only from the pg packages and the backend's registration).

Every import counts: at module level, inside functions, and under `if TYPE_CHECKING:` (an annotation that
names a module above its own is a layering back-reference too, even when it never runs). An import
names the module it loads (`from a.b import c` is `a.b.c` when that is a module, else `a.b`). An import of
a module's own parent package (`plugins/console/channel.py` taking CHANNEL_TYPE from `plugins.console`) is
no edge: Python runs the parent first whenever the module is imported, so it adds no order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "orchestrator", "plugins")
BACKEND_CHOICE = "gateway/composition.py"  # the one module that reads queue.backend
PG_PACKAGES = ("gateway/backends/postgres/", "orchestrator/storage/postgres/")
PG_REGISTRATIONS = ("gateway/backends/postgres/plugin.py", "orchestrator/storage/postgres/plugin.py")
# (they import pg code inside factories)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it stands."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(f"{target}."):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return f"{' <-> '.join(component)}: {'; '.join(edges)}"


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(_describe(c, graph) for c in found)


def test_the_cycle_finder_sees_a_cycle() -> None:
    """The check can fail: a loop through three modules is one cycle, a chain is none."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _source_files() -> list[tuple[str, str]]:
    return [(str(path.relative_to(ROOT)), path.read_text()) for path in _modules().values()]


def test_queue_backend_is_read_in_one_module() -> None:
    """Only the composition module reads `queue.backend` (`<...>.queue.backend` or `queue.backend` in code,
    not in a sentence): nothing else branches on the backend's name."""
    readers = sorted(path for path, text in _source_files() if _reads_queue_backend(ast.parse(text)))
    assert readers == [BACKEND_CHOICE]


def _reads_queue_backend(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr == "backend"
               and (isinstance(node.value, ast.Attribute) and node.value.attr == "queue"
                    or isinstance(node.value, ast.Name) and node.value.id == "queue")
               for node in ast.walk(tree))


def test_the_reader_check_sees_a_read() -> None:
    assert _reads_queue_backend(ast.parse("if settings.queue.backend == 'postgres': pass"))
    assert not _reads_queue_backend(ast.parse("help = 'needs queue.backend: postgres'"))


def test_pg_code_is_imported_only_from_pg_and_its_registration() -> None:
    """`gateway.backends.postgres` / `orchestrator.storage.postgres` are imported only by the pg packages and the
    backend's registration."""
    importers = sorted(path for path, text in _source_files()
                       if not path.startswith(PG_PACKAGES) and path not in PG_REGISTRATIONS
                       and re.search(r"^\s*(from|import)\s+(gateway\.backends|orchestrator\.storage)\.postgres\b",
                                     text, re.M))
    assert importers == []


def test_only_the_entry_points_know_the_gateway() -> None:
    """Nothing the Gateway builds refers back to it (not even in an annotation): the backends, the channel
    supervision and the dashboard get what they need passed in."""
    names_the_gateway = re.compile(
        r"^\s*from\s+gateway\.app\s+import|^\s*import\s+gateway\.app\b", re.M)
    importers = sorted(path for path, text in _source_files() if names_the_gateway.search(text))
    assert importers == ["gateway/cli/commands.py"]
