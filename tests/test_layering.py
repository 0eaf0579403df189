"""Layers point down (CONVENTIONS §2, DESIGN §9), checked by walking imports with `ast`.

    0  types, events, errors, settings, ... (explicit list below)
    1  models, tools, sessions, artifacts
    2  agents
    3  runner
    4  gateway, cli

A module may import its own layer or lower ones. `headwater.testing` may import
anything; nothing else imports it. The package root re-exports the public surface,
so it is exempt as an importer and off limits as an import. Only the gateway
imports web frameworks. Every import counts, including those under
`if TYPE_CHECKING:` and inside functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "headwater"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

# Top-level name (module or subpackage) -> layer. A new module must be placed here.
LAYERS: dict[str, int] = {
    "types": 0,
    "events": 0,
    "errors": 0,
    "settings": 0,
    "run_config": 0,
    "state": 0,
    "context": 0,
    "live_request_queue": 0,
    "clock": 0,
    "models": 1,
    "tools": 1,
    "sessions": 1,
    "artifacts": 1,
    "agents": 2,
    "runner": 3,
    "gateway": 4,
    "cli": 4,
}
TESTING = "testing"
WEB_FRAMEWORKS = frozenset({"starlette", "fastapi", "uvicorn"})
WEB_ALLOWED = frozenset({"gateway"})


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
    return None


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, src: Path) -> bool:
    base = src.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, src: Path = SRC) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in the file at `path` under `src`."""
    module = _module_name(path, src)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
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
                yield node.lineno, candidate if _is_module(candidate, src) else source


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


def test_no_import_points_up() -> None:
    assert any(SRC.rglob("*.py")), f"no sources under {SRC}"
    found = violations()
    assert not found, "layering violations:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("headwater.models.x", "headwater.runner"),
        ("headwater.types", "headwater.models.base"),
        ("headwater.agents.flow", "headwater.gateway.app"),
        ("headwater.runner", "headwater.testing"),
        ("headwater.models.scripted", "headwater.testing.contract"),
        ("headwater.sessions.sql", "headwater"),
        ("headwater.runner", "starlette.responses"),
        ("headwater.newthing", "headwater.types"),
    ],
)
def test_check_import_reports(importer: str, imported: str) -> None:
    assert check_import(importer, imported) is not None


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("headwater.models.openai", "headwater.types"),
        ("headwater.models.openai", "headwater.sessions.base"),
        ("headwater.runner", "headwater.agents.llm_agent"),
        ("headwater.gateway.app", "headwater.runner"),
        ("headwater.gateway.app", "starlette.responses"),
        ("headwater.testing.fake_provider", "headwater.gateway"),
        ("headwater", "headwater.testing"),
        ("headwater.runner", "asyncio"),
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
