"""The package layout is the architecture: every module of peak_mcp sits in one layer package, imports only from its
own layer or those below it, and no import cycle exists between modules. Read with the standard library's `ast`, so
an import inside a function or under TYPE_CHECKING counts like any other: a lazy import hides a dependency, it does
not remove it. README.md, section Layout, says what each layer owns."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "peak_mcp"
# Bottom to top: a layer may import its own modules and those of the layers before it, never one after it.
# research (experiments, an MCP client) sits below api so that api's command line can start it; it imports no
# other layer: api hands it the server to connect to.
LAYERS = ("core", "confine", "problems", "backends", "evaluation", "runner", "store", "catalog", "loop", "research",
          "api")
ROOT_MODULES = {"peak_mcp", "peak_mcp.__main__"}  # the version, and `python -m peak_mcp` calling api.cli


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the peak_mcp modules it imports (`from pkg import submodule` names the submodule, not pkg)."""

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in found.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = resolve(name) if name.startswith("peak_mcp") else None
                if target and target != module and target not in ROOT_MODULES - {"peak_mcp.__main__"}:
                    edges[module].add(target)
    return edges


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in list(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
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


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                  for module, targets in edges.items() for target in targets
                  if layer_of(module) and layer_of(target) and LAYERS.index(layer_of(target)) >
                  LAYERS.index(layer_of(module)))


def test_every_module_sits_in_a_layer() -> None:
    stray = sorted(m for m in modules() if layer_of(m) is None and m not in ROOT_MODULES)
    assert stray == [], f"modules outside the layer packages {LAYERS}: {stray}"


def test_no_import_cycles() -> None:
    assert cycles(imports(modules())) == []


def test_imports_run_only_downward_between_layers() -> None:
    assert upward(imports(modules())) == []


def test_only_the_api_layer_speaks_mcp() -> None:
    """The domain layers know nothing of MCP: the SDK is imported only under peak_mcp/api/ (the server) and
    peak_mcp/research/ (a client of it)."""
    speaking = set()
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "mcp" or n.startswith("mcp.") for n in names):
                speaking.add(module)
    assert {m for m in speaking if layer_of(m) not in ("api", "research")} == set()


def test_the_contract_catches_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The checks above find what they guard against: a planted cycle and a planted upward import."""
    package = tmp_path / "peak_mcp"
    for folder in ("core", "store", "api"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("from peak_mcp.core import b\n")
    (package / "core" / "b.py").write_text("def f():\n    from peak_mcp.core.a import x\n")
    (package / "store" / "rows.py").write_text("from peak_mcp.api.server import serve\n")
    (package / "api" / "server.py").write_text("from peak_mcp.store import rows\nserve = None\n")
    edges = imports(modules(package))
    assert ["peak_mcp.core.a", "peak_mcp.core.b"] in cycles(edges)
    assert upward(edges) == ["peak_mcp.store.rows (store) imports peak_mcp.api.server (api)"]
