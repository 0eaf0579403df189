"""Layers point down (docs/architecture.md, "Layers"), checked by walking imports with `ast`.

    0  core (types, events, errors, settings, ...), and the facades at the root
    1  models, tools, sessions, artifacts
    2  agents
    3  runner
    4  gateway, examples, cli

A module may import its own layer or lower ones. `headwater.testing` may import
anything; nothing else imports it. The package root re-exports the public surface,
so it is exempt as an importer and off limits as an import. Only the gateway
imports web frameworks, and only the MCP modules (``MCP_MODULES``) the official
MCP SDK.

Two more rules keep the machinery private and the graph a tree of layers:

- a private module (`headwater.models._sse`) or a private name
  (`from .execution import _helper`) is imported only from inside the package
  that defines it (`headwater.models`, and its sub-packages);
- no import cycle between modules of `headwater`;
- no private name of a third-party library is read: neither imported
  (``from opentelemetry.trace import _TRACER_PROVIDER``) nor taken as an
  attribute of what an import binds (``trace._TRACER_PROVIDER``).

And one rule keeps a wire rule in one home: `headwater.core.sse` is the only
Server-Sent Events decoder and encoder. No other function reads SSE fields
(compares a value with ``data`` and splits at a colon or knows another field)
or searches bytes for a ``data:`` line, and no other library module but the
provider emulators of `headwater.testing` builds a ``data:`` line.

Inside the gateway, its parts point down too (``GATEWAY_PARTS``): ``wire`` (the
frames and their encodings) imports no other part, ``http`` and ``runs`` import
``wire`` only, and no part imports a surface, a module at the gateway's root
(``app``, ``core``, ``websocket``, ...); the surfaces import every part. A module
that moved keeps its old path as a facade (``FACADES``), a thin re-export for
users; library code imports the module itself, never a facade.

Every import counts, including those under `if TYPE_CHECKING:` and inside
functions.

Settings are passed in, never fetched (docs/architecture.md, "Settings"): only
the entry points (the command line, `headwater.gateway.serve`, the examples'
console) call `get_settings()` or build `Settings` from the environment; below
them a constructor given no settings calls `settings_or_default`, and nothing
else does.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "headwater"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

# Top-level name (module or subpackage) -> layer. A new module must be placed here.
LAYERS: dict[str, int] = {
    "core": 0,  # the bottom layer; the names below are its facades, the public paths
    "types": 0,
    "genai": 0,  # genai-named generation settings (re-exported by types)
    "events": 0,
    "errors": 0,
    "settings": 0,
    "run_config": 0,
    "state": 0,
    "context": 0,
    "live_request_queue": 0,
    "clock": 0,
    "sse": 0,
    "telemetry": 0,
    "tasks": 0,
    "models": 1,
    "tools": 1,
    "sessions": 1,
    "artifacts": 1,
    "memory": 1,
    "agents": 2,
    "planners": 2,  # ADK's planners: an agent's, applied by its flow
    "runner": 3,
    "run": 3,
    "gateway": 4,
    "examples": 4,  # the demo's agents: the cli serves them
    "cli": 4,
    "__main__": 5,  # `python -m headwater`: the cli, nothing else
}
TESTING = "testing"
GATEWAY = "headwater.gateway"
GATEWAY_PARTS: dict[str, frozenset[str]] = {
    "wire": frozenset(),  # the frames and their encodings (SSE, AG-UI, Vercel): sans-I/O
    "http": frozenset({"wire"}),  # auth, origins, limits, the error envelope, the SSE response
    "runs": frozenset({"wire"}),  # runs in flight, the run log, the run registry (and Redis)
}
"""Each sub-package of the gateway -> the other parts it may import. The modules at the
gateway's root are its surfaces (``app``, ``core``, ``agui``, ``vercel``, ``websocket``,
``page``, ``serve``, ``background``, ``mcp``, ``mcp_server``): they may import every part,
and no part imports them."""
CORE_MODULES = ("types", "events", "errors", "settings", "run_config", "state", "context",
                "live_request_queue", "clock", "sse", "telemetry", "tasks", "genai")
"""The modules of ``headwater.core``: each keeps its old path at the root as a facade."""
FACADES: frozenset[str] = frozenset({
    *(f"{PACKAGE}.{name}" for name in CORE_MODULES),
    *(f"{GATEWAY}.{name}" for name in ("frames", "sse")),
    *(f"{GATEWAY}.{name}" for name in ("runs", "runlog", "registry", "redis_backend",
                                       "redis_client", "redis_runlog", "redis_registry")),
    *(f"{GATEWAY}.{name}" for name in ("auth", "origins", "limits", "problems", "ratelimit",
                                       "connections", "tracing", "logs", "responses")),
})
"""Paths kept as thin re-exports of the names of the module that holds the code: the
bottom layer's public paths (``headwater.types`` re-exports ``headwater.core.types``) and
the gateway's old module paths (``headwater.gateway.runs`` is the package whose
``__init__`` re-exports ``runs.manager``). Users and tests may import them; library code
does not."""
WEB_FRAMEWORKS = frozenset({"starlette", "fastapi", "uvicorn"})
WEB_ALLOWED = frozenset({"gateway"})
MCP_SDK = frozenset({"mcp", "mcp_types", "httpx2"})
"""The official MCP SDK (and the HTTP client it brings): imported only by the MCP modules."""
MCP_MODULES = frozenset({"headwater.tools.mcp", "headwater.tools._mcp_connection",
                         "headwater.gateway.mcp", "headwater.gateway.mcp_server",
                         "headwater.cli._mcp", "headwater.examples.index_server"})


def _top(module: str) -> str | None:
    """`headwater.models.base` -> `models`; the package root -> ``None``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def check_import(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or ``None`` when it may.

    Both are dotted module names; `imported` may be a third-party module.
    """
    top = _top(importer)
    if importer == PACKAGE or top == TESTING:
        return None
    if top not in LAYERS:
        return f"{importer} is not placed in a layer: add {top!r} to LAYERS"
    root = imported.split(".")[0]
    if root in MCP_SDK and importer not in MCP_MODULES:
        return f"only the MCP modules ({', '.join(sorted(MCP_MODULES))}) may import {root}"
    if root in WEB_FRAMEWORKS:
        return None if top in WEB_ALLOWED else f"only headwater.gateway may import {root}"
    if root != PACKAGE:
        return None
    target = _top(imported)
    if target is None:
        return "imports the package root; import from the defining module instead"
    if target == TESTING:
        return "library code never imports headwater.testing"
    if target not in LAYERS:
        return f"{imported} is not placed in a layer"
    if LAYERS[target] > LAYERS[top]:
        return f"upward import: layer {LAYERS[top]} ({top}) -> layer {LAYERS[target]} ({target})"
    return check_gateway_import(importer, imported)


def _gateway_part(module: str) -> str | None:
    """The gateway part (``"wire"``) `module` is in, ``""`` for a surface (a module at the
    gateway's root, or the gateway itself), ``None`` outside the gateway."""
    if not _inside(module, GATEWAY):
        return None
    first = module[len(GATEWAY) + 1:].split(".")[0]
    return first if first in GATEWAY_PARTS else ""


def check_gateway_import(importer: str, imported: str) -> str | None:
    """Why a part of the gateway may not import `imported`, or ``None`` when it may."""
    part, target = _gateway_part(importer), _gateway_part(imported)
    if not part or target is None or target == part:
        return None
    if target == "":
        return f"gateway.{part} imports a surface of the gateway ({imported})"
    if target not in GATEWAY_PARTS[part]:
        allowed = ", ".join(sorted(GATEWAY_PARTS[part])) or "no other part"
        return f"gateway.{part} imports gateway.{target} (it may import {allowed})"
    return None


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, src: Path) -> bool:
    base = src.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


@dataclass(frozen=True)
class Import:
    """One name an import statement binds.

    Attributes:
        line: where the statement is.
        module: the absolute module it loads (``from . import events`` loads
            ``headwater.events``).
        name: the name it takes from `module` (``from .base import LlmRequest``),
            or ``None`` when it binds a module.
    """

    line: int
    module: str
    name: str | None = None


def _imports(path: Path, src: Path) -> Iterator[Import]:
    module = _module_name(path, src)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                # `from . import events` imports the module headwater.events
                candidate = f"{source}.{alias.name}"
                if _is_module(candidate, src):
                    yield Import(node.lineno, candidate)
                else:
                    yield Import(node.lineno, source, alias.name)


def imports_of(path: Path, src: Path = SRC) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in the file at `path` under `src`."""
    for found in _imports(path, src):
        yield found.line, found.module


def violations(src: Path = SRC) -> list[str]:
    """One line per forbidden import, or unplaced module, in the package at `src`."""
    found = []
    for path in sorted(src.rglob("*.py")):
        importer = _module_name(path, src)
        where = path.relative_to(src.parent).as_posix()
        if importer != PACKAGE and _top(importer) not in {*LAYERS, TESTING}:
            found.append(f"{where}: {importer} is not placed in a layer: add it to LAYERS")
            continue
        for line, imported in imports_of(path, src):
            reason = check_import(importer, imported)
            if reason:
                found.append(f"{where}:{line}: {imported}: {reason}")
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def check_private_import(
    importer: str, imported: str, name: str | None = None, *, package: bool = False
) -> str | None:
    """Why `importer` may not take `name` (or the module itself) from `imported`, or ``None``.

    A private module belongs to the package that holds it; a private name to the
    package of the module that defines it (`imported` itself when `package`
    says it is a package's ``__init__``). Only that package and its
    sub-packages may import them.
    """
    if imported.split(".")[0] != PACKAGE:
        return None
    parts = imported.split(".")
    private = next((i for i, part in enumerate(parts) if _is_private(part)), None)
    if private is not None:
        owner, what = ".".join(parts[:private]), f"private module {imported}"
    elif name is not None and _is_private(name):
        owner = imported if package else imported.rpartition(".")[0]
        what = f"private name {name} of {imported}"
    else:
        return None
    if _inside(importer, owner):
        return None
    return f"imports the {what} from outside {owner}; make it public or move the caller"


def private_import_violations(src: Path = SRC) -> list[str]:
    """One line per import of private machinery from outside the package that owns it."""
    found = []
    for path in sorted(src.rglob("*.py")):
        importer = _module_name(path, src)
        where = path.relative_to(src.parent).as_posix()
        for imp in _imports(path, src):
            is_package = (src.parent.joinpath(*imp.module.split(".")) / "__init__.py").is_file()
            reason = check_private_import(importer, imp.module, imp.name, package=is_package)
            if reason:
                found.append(f"{where}:{imp.line}: {importer}: {reason}")
    return found


def import_graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    """importer -> {imported module of the package: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(src.rglob("*.py")):
        edges = graph.setdefault(_module_name(path, src), {})
        for imp in _imports(path, src):
            if imp.module.split(".")[0] == PACKAGE and _is_module(imp.module, src):
                edges.setdefault(imp.module, imp.line)
    return graph


def strongly_connected(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph`, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(graph: Mapping[str, Mapping[str, int]], members: list[str]) -> list[str]:
    """A shortest cycle through the first of `members`, staying inside them."""
    start, inside = members[0], set(members)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph.get(node, {})):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if succ in inside and succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{members} is not a cycle")


def import_cycles(graph: Mapping[str, Mapping[str, int]]) -> dict[frozenset[str], str]:
    """Each import cycle (its modules) -> a line naming them and one loop with its lines."""
    found = {}
    for members in strongly_connected(graph):
        if len(members) == 1 and members[0] not in graph.get(members[0], {}):
            continue
        loop = _shortest_cycle(graph, members)
        steps = ", ".join(f"{a} -> {b} (line {graph[a][b]})" for a, b in itertools.pairwise(loop))
        found[frozenset(members)] = f"import cycle among {', '.join(members)}: {steps}"
    return found


def test_no_import_points_up() -> None:
    assert any(SRC.rglob("*.py")), f"no sources under {SRC}"
    found = violations()
    assert not found, "layering violations:\n" + "\n".join(found)


def test_no_private_import_across_packages() -> None:
    found = private_import_violations()
    assert not found, "private machinery imported from outside its package:\n" + "\n".join(
        found)


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph())
    found = sorted(cycles.values())
    assert not found, "import cycles:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("headwater.models.x", "headwater.runner"),
        ("headwater.types", "headwater.models.base"),
        ("headwater.core.types", "headwater.models.base"),
        ("headwater.core.events", "headwater.runner"),
        ("headwater.agents.flow", "headwater.gateway.app"),
        ("headwater.runner", "headwater.testing"),
        ("headwater.models.scripted", "headwater.testing.contract"),
        ("headwater.sessions.sql", "headwater"),
        ("headwater.runner", "starlette.responses"),
        ("headwater.newthing", "headwater.types"),
        ("headwater.tools.function_tool", "mcp"),
        ("headwater.gateway.app", "mcp.server.lowlevel"),
        ("headwater.runner", "mcp_types"),
        ("headwater.gateway.wire.frames", "headwater.gateway.runs.manager"),
        ("headwater.gateway.wire.sse", "headwater.gateway.http.problems"),
        ("headwater.gateway.http.responses", "headwater.gateway.runs.runlog"),
        ("headwater.gateway.runs.manager", "headwater.gateway.http.problems"),
        ("headwater.gateway.runs.manager", "headwater.gateway.core"),
        ("headwater.gateway.http.auth", "headwater.gateway"),
        ("headwater.gateway.wire.agui", "headwater.gateway.agui"),
    ],
)
def test_check_import_reports(importer: str, imported: str) -> None:
    assert check_import(importer, imported) is not None


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("headwater.models.openai", "headwater.types"),
        ("headwater.models.openai", "headwater.core.types"),
        ("headwater.gateway.wire.sse", "headwater.core.sse"),
        ("headwater.models.openai", "headwater.sessions.base"),
        ("headwater.runner", "headwater.agents.llm_agent"),
        ("headwater.gateway.app", "headwater.runner"),
        ("headwater.gateway.app", "starlette.responses"),
        ("headwater.testing.fake_provider", "headwater.gateway"),
        ("headwater", "headwater.testing"),
        ("headwater.runner", "asyncio"),
        ("headwater.tools.mcp", "mcp.client.session"),
        ("headwater.tools._mcp_connection", "mcp_types"),
        ("headwater.gateway.http.responses", "headwater.gateway.wire.sse"),
        ("headwater.gateway.runs.manager", "headwater.gateway.wire.frames"),
        ("headwater.gateway.runs.redis_runlog", "headwater.gateway.runs.runlog"),
        ("headwater.gateway.core", "headwater.gateway.runs.manager"),
        ("headwater.gateway.app", "headwater.gateway.http.auth"),
        ("headwater.gateway.wire.frames", "headwater.events"),
    ],
)
def test_check_import_allows(importer: str, imported: str) -> None:
    assert check_import(importer, imported) is None


def test_walk_resolves_relative_imports_and_reports(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE
    (pkg / "models").mkdir(parents=True)
    for name in ("__init__.py", "runner.py", "types.py", "models/base.py", "_new.py"):
        (pkg / name).touch()
    (pkg / "__init__.py").write_text("from .runner import Runner\nfrom . import testing\n")
    (pkg / "models" / "__init__.py").write_text("from . import base\nfrom .. import types\n")
    (pkg / "models" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .base import LlmRequest\n"
        "from ..types import Content\n"
        "if TYPE_CHECKING:\n"
        "    from ..runner import Runner\n"
        "def later() -> None:\n"
        "    from .. import Agent\n"
    )
    assert sorted(m for _, m in imports_of(pkg / "models" / "x.py", pkg)) == [
        "headwater",
        "headwater.models.base",
        "headwater.runner",
        "headwater.types",
        "typing",
    ]
    assert [m for _, m in imports_of(pkg / "models" / "__init__.py", pkg)] == [
        "headwater.models.base",
        "headwater.types",
    ]
    assert violations(pkg) == [
        "headwater/_new.py: headwater._new is not placed in a layer: add it to LAYERS",
        "headwater/models/x.py:5: headwater.runner: "
        "upward import: layer 1 (models) -> layer 3 (runner)",
        "headwater/models/x.py:7: headwater: imports the package root; "
        "import from the defining module instead",
    ]


@pytest.mark.parametrize(
    ("importer", "imported", "name", "package"),
    [
        ("headwater.testing.fake_provider", "headwater.models._sse", None, False),
        ("headwater.runner", "headwater.agents._execution", "CallOutcome", False),
        ("headwater.runner", "headwater.agents.agent", "_drain", False),
        ("headwater.sessions.sql", "headwater.models", "_factories", True),
        ("headwater.models", "headwater.models.x._y", None, False),
        ("headwater.tools.a", "headwater.models._wire.z", "public", False),
    ],
)
def test_check_private_import_reports(importer: str, imported: str, name: str | None,
                                      package: bool) -> None:
    assert check_private_import(importer, imported, name, package=package) is not None


@pytest.mark.parametrize(
    ("importer", "imported", "name", "package"),
    [
        ("headwater.models.openai", "headwater.models._sse", "ServerSentEvent", False),
        ("headwater.models", "headwater.models._http", None, False),
        ("headwater.models.x.y", "headwater.models._sse", None, False),
        ("headwater.agents.agent", "headwater.agents._execution", "_helper", False),
        ("headwater.models.registry", "headwater.models", "_factories", True),
        ("headwater.models.x", "headwater.models.base", "__all__", False),
        ("headwater.runner", "asyncio", "_private", False),
        ("headwater.runner", "headwater.agents.agent", "Agent", False),
        ("headwater.tools.a", "headwater._shared", None, False),  # the whole package's
    ],
)
def test_check_private_import_allows(importer: str, imported: str, name: str | None,
                                     package: bool) -> None:
    assert check_private_import(importer, imported, name, package=package) is None


# -- facades ------------------------------------------------------------------------------------


def check_facade_import(importer: str, imported: str, name: str | None = None) -> str | None:
    """Why `importer` may not take `name` (or the module) from `imported`, or ``None``.

    A facade is for users: library code (all but ``headwater.testing`` and the
    package root) imports the module that holds the code. A facade that is a
    package (``headwater.gateway.runs``) may still be the parent of a module
    imported by its full path.
    """
    top = _top(importer)
    if importer == PACKAGE or top == TESTING or imported not in FACADES:
        return None
    what = f"{name} from {imported}" if name else imported
    return f"imports {what}, a facade kept for users: import the module that holds the code"


def facade_violations(src: Path = SRC) -> list[str]:
    """One line per import of a facade by library code."""
    found = []
    for path in sorted(src.rglob("*.py")):
        importer = _module_name(path, src)
        where = path.relative_to(src.parent).as_posix()
        for imp in _imports(path, src):
            reason = check_facade_import(importer, imp.module, imp.name)
            if reason:
                found.append(f"{where}:{imp.line}: {importer}: {reason}")
    return found


def _is_thin(tree: ast.Module) -> bool:
    """A docstring, ``from <module> import <names>`` and ``__all__``: nothing else."""
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    return all(isinstance(node, ast.ImportFrom) or (
        isinstance(node, ast.Assign)
        and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"])
        for node in body)


def test_library_code_imports_no_facade() -> None:
    found = facade_violations()
    assert not found, "facades imported by library code:\n" + "\n".join(found)


@pytest.mark.parametrize("facade", sorted(FACADES))
def test_a_facade_only_re_exports(facade: str) -> None:
    base = SRC.parent.joinpath(*facade.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert _is_thin(tree), f"{path} is a facade: it may only re-export names"
    exported = {alias.asname or alias.name for node in tree.body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    module = importlib.import_module(facade)
    assert sorted(module.__all__) == sorted(exported), f"{facade}: __all__ is what it imports"


def test_facade_rule_reports_and_allows() -> None:
    assert check_facade_import("headwater.gateway.app", "headwater.gateway.frames", "FrameMapper")
    assert check_facade_import("headwater.gateway.core", "headwater.gateway.runs", "Run")
    assert check_facade_import("headwater.gateway.core", "headwater.gateway.runs") is not None
    assert check_facade_import("headwater.gateway.core", "headwater.gateway.runs.manager",
                               "Run") is None
    assert check_facade_import("headwater.testing.x", "headwater.gateway.frames", "A") is None
    assert check_facade_import("headwater", "headwater.gateway.frames", "A") is None
    assert check_facade_import("headwater.runner", "headwater.types", "Content")
    assert check_facade_import("headwater.core.events", "headwater.errors", "ErrorCode")
    assert check_facade_import("headwater.runner", "headwater.core.types", "Content") is None
    assert check_facade_import("headwater.testing.x", "headwater.events", "Event") is None


# -- no private name of another library ---------------------------------------------------------


def _third_party(module: str) -> bool:
    root = module.split(".")[0]
    return bool(root) and root != PACKAGE and root not in sys.stdlib_module_names


def foreign_private_findings(tree: ast.AST) -> list[str]:
    """``"<line>: ..."`` for each private name of a third-party library `tree` reads: a
    private module or name imported (``from opentelemetry.trace import _TRACER_PROVIDER``),
    or a private attribute of what such an import binds (``trace._TRACER_PROVIDER``)."""
    found: list[str] = []
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
                    if any(_is_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if not _third_party(module):
                continue
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                if any(_is_private(part) for part in [*module.split("."), alias.name]):
                    found.append(f"{node.lineno}: imports {alias.name} from {module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                found.append(f"{node.lineno}: reads {node.attr} of {bound[base.id]}")
    return found


def test_no_private_name_of_another_library() -> None:
    found = [f"{path.relative_to(SRC.parent).as_posix()}:{finding}"
             for path in sorted(SRC.rglob("*.py"))
             for finding in foreign_private_findings(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, "private names of other libraries read:\n" + "\n".join(found)


@pytest.mark.parametrize(("code", "found"), [
    ("from opentelemetry.trace import _TRACER_PROVIDER\n", True),
    ("from opentelemetry import trace\nx = trace._TRACER_PROVIDER\n", True),
    ("import opentelemetry.trace as t\ndef f():\n    return t._PROXY.x\n", True),
    ("import uvicorn._types\n", True),
    ("from starlette.responses import Response\nResponse._render\n", True),
    ("from opentelemetry import trace\nx = trace.get_tracer_provider()\n", False),
    ("import os\nos._exit(1)\n", False),  # the standard library is not checked
    ("from .x import _y\n", False),  # headwater's own rule is the private-import one
    ("self._trace = None\ntrace = 1\n", False),
])
def test_foreign_private_rule(code: str, found: bool) -> None:
    assert bool(foreign_private_findings(ast.parse(code))) is found


# -- settings are passed in --------------------------------------------------------------------

SETTINGS_ENTRY_POINTS = ("headwater.settings", "headwater.core.settings", "headwater.cli",
                         "headwater.gateway.serve", "headwater.examples._console",
                         "headwater.examples.index_server")
"""Where the process-wide settings may be read (a module, or a package and its modules)."""
FETCHERS = frozenset({"get_settings", "reload_settings"})
DEFAULT_PATH = "settings_or_default"
CONSTRUCTORS = frozenset({"__init__", "create_app"})
"""The functions that may take the default path: an object's construction, and the
gateway's factory."""


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _SettingsUse(ast.NodeVisitor):
    """Every place a module reads settings on its own, with why it may not."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.found: list[tuple[int, str]] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name in FETCHERS:
                self.found.append((node.lineno, f"imports {alias.name}"))

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FETCHERS:
            self.found.append((node.lineno, f"uses {node.id}"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FETCHERS:
            self.found.append((node.lineno, f"uses {node.attr}"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _called_name(node)
        if name == "Settings":
            self.found.append((node.lineno, "builds Settings from the environment"))
        elif name == DEFAULT_PATH and (not self.functions
                                       or self.functions[-1] not in CONSTRUCTORS):
            where = self.functions[-1] if self.functions else "module level"
            self.found.append((node.lineno, f"calls {DEFAULT_PATH} in {where}, not in a "
                                            f"constructor ({', '.join(sorted(CONSTRUCTORS))})"))
        self.generic_visit(node)


def settings_violations(src: Path = SRC) -> list[str]:
    """One line per place below the entry points that fetches settings instead of taking them."""
    found = []
    for path in sorted(src.rglob("*.py")):
        module = _module_name(path, src)
        if any(_inside(module, entry) for entry in SETTINGS_ENTRY_POINTS):
            continue
        use = _SettingsUse()
        use.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        where = path.relative_to(src.parent).as_posix()
        found += [f"{where}:{line}: {module} {what}: take a Settings argument (only the entry "
                  f"points read the process-wide settings)" for line, what in use.found]
    return found


def test_settings_are_passed_in_below_the_entry_points() -> None:
    found = settings_violations()
    assert not found, "settings fetched instead of passed in:\n" + "\n".join(found)


def test_the_settings_walk_reports_every_way_of_fetching(tmp_path: Path) -> None:
    pkg = _write_package(tmp_path, {
        "settings.py": "def get_settings(): ...\ndef settings_or_default(s): ...\n"
                       "class Settings: ...\nget_settings()\n",
        "cli/run.py": "from ..settings import get_settings\nget_settings()\n",
        "gateway/serve.py": "from ..settings import get_settings\n",
        "gateway/app.py": "from ..settings import settings_or_default\n"
                          "def create_app(settings=None):\n"
                          "    return settings_or_default(settings)\n",
        "runner.py": "from . import settings as s\n"
                     "from .settings import settings_or_default\n"
                     "class Runner:\n"
                     "    def __init__(self, settings=None):\n"
                     "        self.settings = settings_or_default(settings)\n"
                     "    def run(self):\n"
                     "        return s.get_settings().tool_timeout\n"
                     "    def later(self):\n"
                     "        return settings_or_default(None)\n",
        "tools/threads.py": "from ..settings import Settings, get_settings as g\n"
                            "WORKERS = Settings().sync_tool_workers\n",
    })
    assert settings_violations(pkg) == [
        "headwater/runner.py:7: headwater.runner uses get_settings: take a Settings argument "
        "(only the entry points read the process-wide settings)",
        "headwater/runner.py:9: headwater.runner calls settings_or_default in later, not in a "
        "constructor (__init__, create_app): take a Settings argument (only the entry points "
        "read the process-wide settings)",
        "headwater/tools/threads.py:1: headwater.tools.threads imports get_settings: take a "
        "Settings argument (only the entry points read the process-wide settings)",
        "headwater/tools/threads.py:2: headwater.tools.threads builds Settings from the "
        "environment: take a Settings argument (only the entry points read the process-wide "
        "settings)",
    ]


def _write_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_walk_reports_private_imports_from_outside_their_package(tmp_path: Path) -> None:
    pkg = _write_package(tmp_path, {
        "models/__init__.py": "from ._sse import Decoder\n_registry = {}\n",
        "models/_sse.py": "class Decoder: ...\n",
        "models/openai.py": "from ._sse import Decoder\nfrom . import _registry\n",
        "models/wire/x.py": "from .. import _sse\n",
        "testing/fake.py": "def later() -> None:\n    from ..models._sse import Decoder\n",
        "runner.py": "from .models import _registry\nimport headwater.models._sse as s\n"
                     "from .models.openai import _helper\n",
    })
    assert private_import_violations(pkg) == [
        "headwater/runner.py:1: headwater.runner: imports the private name _registry of "
        "headwater.models from outside headwater.models; make it public or move the caller",
        "headwater/runner.py:2: headwater.runner: imports the private module "
        "headwater.models._sse from outside headwater.models; make it public or move the caller",
        "headwater/runner.py:3: headwater.runner: imports the private name _helper of "
        "headwater.models.openai from outside headwater.models; make it public or move the "
        "caller",
        "headwater/testing/fake.py:2: headwater.testing.fake: imports the private module "
        "headwater.models._sse from outside headwater.models; make it public or move the caller",
    ]


def test_walk_reports_cycles_through_local_and_type_checking_imports(tmp_path: Path) -> None:
    pkg = _write_package(tmp_path, {
        "models/__init__.py": "",
        "models/base.py": "def connect() -> None:\n    from .connection import Conn\n",
        "models/connection.py": "from typing import TYPE_CHECKING\n"
                                "if TYPE_CHECKING:\n    from .base import Req\n",
        "types.py": "",
        "a.py": "from . import b\nfrom . import types\n",
        "b.py": "from .c import x\n",
        "c.py": "import headwater.a\n",
        "d.py": "from .d import y\n",
    })
    cycles = import_cycles(import_graph(pkg))
    assert cycles == {
        frozenset({"headwater.a", "headwater.b", "headwater.c"}):
            "import cycle among headwater.a, headwater.b, headwater.c: "
            "headwater.a -> headwater.b (line 1), headwater.b -> headwater.c (line 1), "
            "headwater.c -> headwater.a (line 1)",
        frozenset({"headwater.models.base", "headwater.models.connection"}):
            "import cycle among headwater.models.base, headwater.models.connection: "
            "headwater.models.base -> headwater.models.connection (line 2), "
            "headwater.models.connection -> headwater.models.base (line 3)",
        frozenset({"headwater.d"}): "import cycle among headwater.d: "
                                    "headwater.d -> headwater.d (line 1)",
    }


def test_an_acyclic_graph_has_no_cycles() -> None:
    graph = {"a": {"b": 1, "c": 2}, "b": {"c": 1}, "c": {}}
    assert import_cycles(graph) == {}
    assert sorted(strongly_connected(graph)) == [["a"], ["b"], ["c"]]


# -- one SSE codec -------------------------------------------------------------------------------

SSE_CODEC = "headwater/core/sse.py"
# The provider emulators write what OpenAI, Anthropic and Gemini send, byte for byte (their
# JSON spacing, CRLF): the other side of the wire, not a second encoder of headwater's.
SSE_EMULATORS = ("headwater/testing/_render",)
_FIELDS = frozenset({"data", "event", "id", "retry"})
_SEARCHES = frozenset({"startswith", "endswith", "removeprefix", "index", "rindex", "find",
                       "rfind", "split", "rsplit", "partition", "rpartition", "count"})


def _literal(node: ast.AST) -> str | None:
    """The text of a str or bytes constant (bytes as Latin-1), else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def _is_data_line(text: str) -> bool:
    """A ``data:`` line's start as a decoder looks for it: after a line break, or ``data: ``."""
    stripped = text.lstrip("\r\n")
    return stripped.startswith("data: ") or (stripped != text and stripped.startswith("data:"))


def _looked_for(function: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, how, text) for each literal `function` compares with or searches for."""
    for node in ast.walk(function):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                text = _literal(operand)
                if text is not None:
                    yield node.lineno, "compare", text
        elif isinstance(node, ast.MatchValue):
            text = _literal(node.value)
            if text is not None:
                yield node.lineno, "compare", text
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _SEARCHES):
            for arg in node.args:
                text = _literal(arg)
                if text is not None:
                    yield node.lineno, node.func.attr, text


def sse_decoder_findings(tree: ast.AST) -> list[str]:
    """Why each function of `tree` is an SSE decoder (``"<line>: <what>"``), if it is one."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        looked = list(_looked_for(function))
        compared = {text for _, how, text in looked if how == "compare" and text in _FIELDS}
        splits_at_colon = any(how != "compare" and text == ":" for _, how, text in looked)
        if "data" in compared and (splits_at_colon or len(compared) > 1):
            found.append(f"{function.lineno}: {function.name}() reads SSE fields")
        found += [f"{line}: {function.name}() looks for a data line ({text!r})"
                  for line, _, text in looked if _is_data_line(text)]
    return found


def _builds_data_line(node: ast.expr) -> bool:
    if isinstance(node, ast.JoinedStr):
        pieces = [_literal(value) for value in node.values]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        pieces = [_literal(node.left), _literal(node.right)]
    else:
        return False
    return any(piece is not None and _is_data_line(piece) for piece in pieces)


def sse_encoder_findings(tree: ast.AST) -> list[str]:
    """``"<line>: ..."`` for each ``data:`` line `tree` builds from a value (an f-string, a +)."""
    return [f"{node.lineno}: builds a data line" for node in ast.walk(tree)
            if isinstance(node, ast.expr) and _builds_data_line(node)]


def sse_codec_violations(src: Path = SRC) -> list[str]:
    """One line per SSE decoder or encoder outside `headwater/core/sse.py`."""
    found = []
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src.parent).as_posix()
        if where == SSE_CODEC:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found += [f"{where}:{finding} (the SSE decoder is headwater.core.sse)"
                  for finding in sse_decoder_findings(tree)]
        if not where.startswith(SSE_EMULATORS):
            found += [f"{where}:{finding} (the SSE encoder is headwater.core.sse)"
                      for finding in sse_encoder_findings(tree)]
    return found


def test_headwater_sse_is_the_only_sse_codec() -> None:
    found = sse_codec_violations()
    assert not found, "a second SSE codec:\n" + "\n".join(found)
    # The rules see the one codec (so they are not blind).
    codec = ast.parse((SRC / "core" / "sse.py").read_text(encoding="utf-8"))
    assert sse_decoder_findings(codec) and sse_encoder_findings(codec)


@pytest.mark.parametrize("code", [
    # headwater chat's old reader: a field line split at its colon, "data" compared.
    "async def frames(lines):\n"
    "    for line in lines:\n"
    "        name, _, value = line.partition(':')\n"
    "        if name == 'data':\n"
    "            yield value\n",
    # the old testing parser: field names compared one by one.
    "def process(self, name, value):\n"
    "    if name == 'data':\n        self.data.append(value)\n"
    "    elif name == 'id':\n        self.id = value\n",
    "def field(name, value):\n"
    "    match name:\n        case b'data': return value\n        case b'retry': return 0\n",
    # the WebSocket's old cut of the JSON out of an encoded frame.
    "def frame_text(raw):\n    return raw[raw.index(b'\\ndata: ') + 7:-2]\n",
    "def lines(body):\n    return [l[6:] for l in body.split('\\n') if l.startswith('data: ')]\n",
    "def has(body):\n    return b'\\r\\ndata:' in body\n",
])
def test_a_second_sse_decoder_is_found(code: str) -> None:
    assert sse_decoder_findings(ast.parse(code))


@pytest.mark.parametrize("code", [
    "def blob(source):\n    return source.get('type') != 'data' or source.get('id')\n",
    "def url(piece):\n    return piece['image_url'].removeprefix('data:').partition(';base64,')\n",
    "def spec(text):\n    module, _, attr = text.partition(':')\n    return attr == 'id'\n",
    "def note(message):\n    return f'data: {message}' if message else None\n",
])
def test_other_code_is_not_taken_for_an_sse_decoder(code: str) -> None:
    assert not sse_decoder_findings(ast.parse(code))


@pytest.mark.parametrize(("code", "builds"), [
    ("def chunk(text):\n    return f'data: {text}\\n\\n'.encode()\n", True),
    ("def chunk(text):\n    return b'data: ' + text + b'\\n\\n'\n", True),
    ("def chunk(i, text):\n    return f'id: {i}\\ndata: {text}\\n\\n'\n", True),
    ("def chunk(text):\n    return 'event: x\\n' + 'data: ' + text\n", True),
    ("DONE = b'data: [DONE]\\n\\n'\n", False),
    ("def url(mime, data):\n    return f'data:{mime};base64,{data}'\n", False),
])
def test_a_second_sse_encoder_is_found(code: str, builds: bool) -> None:
    assert bool(sse_encoder_findings(ast.parse(code))) is builds
