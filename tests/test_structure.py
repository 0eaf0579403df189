"""The package's code stays in pieces a reader can hold, checked with `ast`.

- No function or method in ``src/headwater`` is longer than ``MAX_FUNCTION``
  lines (``end_lineno - lineno + 1``, its docstring not counted).
- No module is longer than ``MAX_MODULE`` lines.

Outside the rules: ``testing/`` (test doubles that script whole conversations)
and the generated Alembic migrations. ``EXEMPT`` lists the other exceptions,
each with its reason; an entry that no longer needs its exemption fails, so the
list only shrinks. The gateway's own rules are in ``tests/gateway/test_structure.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "headwater"
MAX_FUNCTION = 60
MAX_MODULE = 600
OUTSIDE = ("testing/", "sessions/migrations/")
Function = ast.FunctionDef | ast.AsyncFunctionDef

# Module path under src/headwater -> why its size is not checked yet.
EXEMPT: dict[str, str] = {
    "runner.py": "i27-run",
    "agents/flow.py": "i27-run",
    "agents/live_flow.py": "i27-run",
}


def modules() -> list[str]:
    return [path.relative_to(SRC).as_posix() for path in sorted(SRC.rglob("*.py"))
            if not path.relative_to(SRC).as_posix().startswith(OUTSIDE)]


def functions(tree: ast.AST) -> Iterator[tuple[str, Function]]:
    """Every function of ``tree`` with its qualified name (``Class.method``, ``outer.inner``)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def length(function: Function) -> int:
    """Its lines, ``end_lineno - lineno + 1``, less those of its docstring."""
    assert function.end_lineno is not None
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def too_long(module: str) -> list[str]:
    """What in ``module`` is past a bound, one line each."""
    source = (SRC / module).read_text("utf-8")
    found = [f"{module}:{f.lineno} {name}: {length(f)} lines (most {MAX_FUNCTION})"
             for name, f in functions(ast.parse(source)) if length(f) > MAX_FUNCTION]
    lines = len(source.splitlines())
    if lines > MAX_MODULE:
        found.append(f"{module}: {lines} lines (most {MAX_MODULE})")
    return found


@pytest.mark.parametrize("module", [m for m in modules() if m not in EXEMPT])
def test_no_function_or_module_is_longer_than_the_bound(module: str) -> None:
    long = too_long(module)
    assert not long, f"split it (functions: docstring not counted): {long}"


@pytest.mark.parametrize("module", sorted(EXEMPT))
def test_an_exempt_module_still_needs_its_exemption(module: str) -> None:
    assert (SRC / module).exists(), f"{module} is gone: remove it from EXEMPT"
    assert too_long(module), f"{module} is within the bounds now: remove it from EXEMPT"


def test_the_checks_see_the_package() -> None:
    found = modules()
    assert {"runner.py", "gateway/core.py", "sessions/sqlite.py", "models/_http.py"} <= set(found)
    assert not any(m.startswith(OUTSIDE) for m in found)


def test_the_length_counts_lines_less_the_docstring() -> None:
    source = 'def f():\n    """Two\n    lines."""\n    a = 1\n    return a\n'
    [(_, function)] = list(functions(ast.parse(source)))
    assert length(function) == 3
