"""The layout's guarantees, read from the source with `ast`: no import cycle among the modules of gateway/,
orchestrator/ and plugins/; one place for the storage backend (`queue.backend` read in one module, the
PostgreSQL code imported only from the pg packages and the backend's registration); the four layering rules
of docs/architecture.md, each with the named list of today's exceptions (a list that can only shrink); and
that page's picture of the package graph, regenerated from the imports.

Every import counts: at module level, inside functions, and under `if TYPE_CHECKING:` (an annotation that
names a module above its own is a layering back-reference too, even when it never runs). An import
names the module it loads (`from a.b import c` is `a.b.c` when that is a module, else `a.b`). An import of
a module's own parent package (`plugins/console/channel.py` taking CHANNEL_TYPE from `plugins.console`) is
no edge: Python runs the parent first whenever the module is imported, so it adds no order.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "orchestrator", "plugins")
BACKEND_CHOICE = "gateway/composition.py"  # the one module that reads queue.backend
PG_PACKAGES = ("gateway/backends/postgres/", "orchestrator/storage/postgres/")
PG_REGISTRATIONS = ("gateway/backends/postgres/plugin.py", "orchestrator/storage/postgres/plugin.py",
                    "gateway/cli/postgres.py")  # the backend's commands, `db` and `worker`
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


@functools.cache
def the_graph() -> dict[str, set[str]]:
    """import_graph() read once per test session (the tests only read it)."""
    return import_graph()


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
    graph = the_graph()
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


# The layering rules (docs/architecture.md, "Layering rules"). Each rule's exceptions are today's imports that
# break it, named one by one: the test fails on a new one and on one that is gone (delete its line), so a list
# only shrinks. A line reads `module -> module module …`.

BACKENDS = ("files", "postgres", "memory")
CONTRACT = ("gateway", "gateway.api", "gateway.hookspecs", "gateway.models", "gateway.settings",
            "gateway.config.fields")
CONTRACT_TREES = ("gateway.testing", "gateway.channelkit")  # the packages and every module in them
GATEWAY_MACHINERY = ("gateway.runtime", "gateway.cli", "gateway.dashboard")


def _pairs(text: str) -> set[tuple[str, str]]:
    lines = (line.split(" -> ") for line in text.strip().splitlines())
    return {(source.strip(), target) for source, targets in lines for target in targets.split()}


def _lines(pairs: set[tuple[str, str]]) -> str:
    sources = sorted({source for source, _ in pairs})
    return "\n".join(f"    {s} -> {' '.join(sorted(t for a, t in pairs if a == s))}" for s in sources)


BACKEND_TO_BACKEND: set[tuple[str, str]] = set()
ORCHESTRATOR_TO_BACKEND: set[tuple[str, str]] = set()
PLUGIN_BEYOND_CONTRACT: set[tuple[str, str]] = set()
BACKEND_TO_MACHINERY: set[tuple[str, str]] = set()


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def backend_of(module: str) -> str | None:
    """`files`, `postgres` or `memory` for a module of gateway/backends/<name>/ or orchestrator/storage/<name>/
    (or orchestrator/storage/memory.py): the gateway's and the orchestrator's halves are one backend."""
    parts = module.split(".")
    inside = parts[:2] in (["gateway", "backends"], ["orchestrator", "storage"]) and len(parts) > 2
    return parts[2] if inside and parts[2] in BACKENDS else None


def crosses_backends(source: str, target: str) -> bool:
    return backend_of(source) is not None and backend_of(target) not in (None, backend_of(source))


def orchestrator_reaches_a_backend(source: str, target: str) -> bool:
    """The package's own modules (`gateway.backends`: the Backend; `gateway.backends.runtime`: the runtime's
    protocols) are the seam, not a backend."""
    above_storage = _in(source, "orchestrator") and not _in(source, "orchestrator.storage")
    in_a_backend = _in(target, "gateway.backends") and target not in ("gateway.backends", "gateway.backends.runtime")
    return above_storage and (backend_of(target) is not None or in_a_backend)


def plugin_beyond_contract(source: str, target: str) -> bool:
    if not _in(source, "plugins"):
        return False
    own = ".".join(source.split(".")[:2])
    return not (target in CONTRACT or any(_in(target, tree) for tree in (*CONTRACT_TREES, own)))


def backend_reaches_machinery(source: str, target: str) -> bool:
    return backend_of(source) is not None and any(_in(target, package) for package in GATEWAY_MACHINERY)


def breaches(rule: Callable[[str, str], bool], graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(source, target) for source, targets in graph.items() for target in targets if rule(source, target)}


def _holds(rule: Callable[[str, str], bool], exceptions: set[tuple[str, str]]) -> None:
    found = breaches(rule, the_graph())
    new, gone = found - exceptions, exceptions - found
    assert not new and not gone, (f"{rule.__name__}: {len(found)} import(s) break it, {len(exceptions)} listed\n"
                                  f"not listed (remove the import):\n{_lines(new)}\n"
                                  f"listed but gone (delete the line):\n{_lines(gone)}")


def test_no_backend_imports_another_backend() -> None:
    _holds(crosses_backends, BACKEND_TO_BACKEND)


def test_the_orchestrator_above_its_storage_imports_no_backend() -> None:
    _holds(orchestrator_reaches_a_backend, ORCHESTRATOR_TO_BACKEND)


def test_plugins_import_only_the_public_contract() -> None:
    _holds(plugin_beyond_contract, PLUGIN_BEYOND_CONTRACT)


def test_no_backend_imports_the_runtime_the_cli_or_the_dashboard() -> None:
    _holds(backend_reaches_machinery, BACKEND_TO_MACHINERY)


def test_the_layering_rules_see_a_breach() -> None:
    """Each rule can fail, and draws its lines where the page says."""
    assert crosses_backends("gateway.backends.memory.processing", "orchestrator.storage.postgres.runs")
    assert crosses_backends("orchestrator.storage.memory", "gateway.backends.files.backend")
    assert not crosses_backends("orchestrator.storage.files.runs", "gateway.backends.files.backend")
    assert not crosses_backends("gateway.backends.postgres.db", "gateway.stores")
    assert orchestrator_reaches_a_backend("orchestrator.chat.handler", "gateway.backends.files.processing")
    assert not orchestrator_reaches_a_backend("orchestrator.plugin", "gateway.backends")
    assert orchestrator_reaches_a_backend("orchestrator.plugin", "orchestrator.storage.memory")
    assert not orchestrator_reaches_a_backend("orchestrator.storage.stores", "orchestrator.storage.files.runs")
    assert not orchestrator_reaches_a_backend("orchestrator.chat.handler", "orchestrator.storage.stores")
    assert plugin_beyond_contract("plugins.slack.channel", "gateway.runtime.worker")
    assert plugin_beyond_contract("plugins.slack.channel", "plugins.discord.buttons")
    assert plugin_beyond_contract("plugins.slack.channel", "orchestrator.chat.handler")
    assert not plugin_beyond_contract("plugins.slack.channel", "plugins.slack.blocks")
    assert not plugin_beyond_contract("plugins.slack.channel", "gateway.channelkit.chunking")
    assert not plugin_beyond_contract("plugins.slack.channel", "gateway.testing.conformance")
    assert backend_reaches_machinery("orchestrator.storage.files.usage", "gateway.runtime.keys")
    assert backend_reaches_machinery("gateway.backends.memory", "gateway.cli")
    assert not backend_reaches_machinery("gateway.backends.files.processing", "gateway.spool.queue")
    assert not backend_reaches_machinery("gateway.backends.postgres.locks", "gateway.disk.locks")
    assert _pairs("a.b -> c d\n  a.b -> e") == {("a.b", "c"), ("a.b", "d"), ("a.b", "e")}


# The picture of docs/architecture.md: one node per package (the channel plugins as one), an arrow where a
# module of one imports a module of another. The arrows into the two packages nearly every package imports
# are left out (the block's first line counts them), so the rest can be read.

ARCHITECTURE = ROOT / "docs" / "architecture.md"
UNDRAWN = ("gateway", "gateway.telemetry")
MERMAID = re.compile(r"^```mermaid\n(.*?)^```$", re.M | re.S)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the packages its modules import (every package of plugins/ is `plugins`)."""
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}

    def package(module: str) -> str:
        return "plugins" if _in(module, "plugins") else module if module in packages else module.rpartition(".")[0]

    found: dict[str, set[str]] = {package(module): set() for module in graph}
    for module, targets in graph.items():
        found[package(module)] |= {package(target) for target in targets} - {package(module)}
    return found


def picture(packages: dict[str, set[str]]) -> str:
    """The mermaid block (without its fences) drawing `packages`."""
    ids = {name: name.replace(".", "_") for name in packages}
    counts = " and ".join(f"into {name} (from {sum(name in targets for targets in packages.values())})"
                          for name in UNDRAWN)
    lines = ["graph TD", f"  %% {len(packages)} packages; not drawn: the arrows {counts}"]
    for top in ("gateway", "orchestrator"):
        lines.append(f'  subgraph {top}_tree ["{top}/"]')
        lines += [f'    {ids[name]}["{name}"]' for name in sorted(packages) if _in(name, top)]
        lines.append("  end")
    lines.append('  plugins["plugins (every channel)"]')
    for name in sorted(packages):
        drawn = sorted(ids[target] for target in packages[name] if target not in UNDRAWN)
        if drawn:
            lines.append(f"  {ids[name]} --> {' & '.join(drawn)}")
    return "\n".join(lines) + "\n"


def test_the_architecture_page_draws_the_package_graph_as_the_imports_are() -> None:
    drawn = MERMAID.findall(ARCHITECTURE.read_text())
    expected = picture(package_graph(the_graph()))
    assert drawn == [expected], ("docs/architecture.md must hold one mermaid block, the package graph as the code "
                                 f"imports today; paste this one:\n\n```mermaid\n{expected}```\n")


def test_the_picture_draws_each_import_between_packages_once() -> None:
    graph = {"gateway.api": set(), "gateway.cli": {"gateway.api"}, "orchestrator.chat.handler": {"gateway.cli"},
             "plugins.console.channel": {"gateway.api", "orchestrator.chat.handler"}}
    packages = {"gateway": set(), "gateway.cli": {"gateway"}, "orchestrator.chat": {"gateway.cli"},
                "plugins": {"gateway", "orchestrator.chat"}}
    assert package_graph(graph) == packages
    assert "  plugins --> orchestrator_chat\n" in picture(packages)
    assert "4 packages; not drawn: the arrows into gateway (from 2) and into gateway.telemetry (from 0)\n" in (
        picture(packages))
    assert "gateway_cli -->" not in picture(packages)
