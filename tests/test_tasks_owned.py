"""Every task library code starts has an owner (docs/architecture.md, "Tasks"), checked with `ast`.

The event loop keeps only a weak reference to a task, so a task nobody keeps
can vanish mid-way. In ``src/headwater`` a task is started in one of two ways:

- ``<group>.create_task(…)`` on an ``asyncio.TaskGroup``: ``<group>`` is the
  ``as`` target of an ``async with …TaskGroup()`` in the same function (or an
  enclosing one), or ``self.<name>`` where the class binds ``self.<name>`` to
  such a target (``async with TaskGroup() as self.<name>``, or
  ``self.<name> = <target>`` in the ``async with`` block's function);
- :meth:`headwater.tasks.TaskSet.spawn`, the owner's set (``core/tasks.py``, the
  one module that calls ``create_task`` itself).

Anything else that starts a task fails: ``create_task`` or ``ensure_future``
(on any receiver, or imported bare), ``asyncio.Task(…)``, and
``asyncio.shield(<a call>)`` (a coroutine shielded becomes a task nobody
keeps). ``ALLOWED`` lists the exceptions, each with its reason; an entry that
no longer matches a call fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "headwater"
HELPER = "core/tasks.py"
STARTERS = frozenset({"create_task", "ensure_future"})

# (module path under src/headwater, qualified function) -> why it may start a task itself.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Site:
    """One call that starts a task outside the rules."""

    module: str
    function: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.function}: {self.code}"


def _is_task_group(expr: ast.expr) -> bool:
    """``TaskGroup()`` / ``asyncio.TaskGroup()``."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    return ((isinstance(func, ast.Name) and func.id == "TaskGroup")
            or (isinstance(func, ast.Attribute) and func.attr == "TaskGroup"))


def _group_targets(function: ast.AST) -> set[str]:
    """The ``as`` targets (unparsed) of ``async with …TaskGroup()`` directly in ``function``
    (not in functions nested in it)."""
    found: set[str] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.AsyncWith | ast.With):
            for item in node.items:
                if item.optional_vars is not None and _is_task_group(item.context_expr):
                    found.add(ast.unparse(item.optional_vars))
    return found


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _class_groups(cls: ast.ClassDef) -> set[str]:
    """``self.<name>`` attributes the class binds to a task group."""
    found: set[str] = set()
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local = _group_targets(method)
        found |= {target for target in local if target.startswith("self.")}
        for node in _own_nodes(method):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id in local):
                found |= {ast.unparse(t) for t in node.targets if isinstance(t, ast.Attribute)}
    return found


def _starts_a_task(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else (
        func.id if isinstance(func, ast.Name) else None)
    if name in STARTERS:
        return True
    if name == "Task" and (isinstance(func, ast.Name)
                           or (isinstance(func.value, ast.Name) and func.value.id == "asyncio")):
        return True
    return name == "shield" and bool(call.args) and isinstance(call.args[0], ast.Call)


def sites(tree: ast.Module, module: str) -> Iterator[Site]:
    """The calls of ``tree`` that start a task outside a task group."""

    def walk(node: ast.AST, scope: str, groups: frozenset[str],
             class_groups: frozenset[str]) -> Iterator[Site]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{scope}{child.name}.", groups,
                                frozenset(_class_groups(child)))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = groups | _group_targets(child)
                yield from walk(child, f"{scope}{child.name}.", frozenset(inner), class_groups)
            else:
                if isinstance(child, ast.Call) and _starts_a_task(child):
                    func = child.func
                    receiver = (ast.unparse(func.value) if isinstance(func, ast.Attribute)
                                else None)
                    in_group = (isinstance(func, ast.Attribute) and func.attr == "create_task"
                                and receiver in groups | class_groups)
                    if not in_group:
                        yield Site(module, scope.rstrip(".") or "<module>", child.lineno,
                                   ast.unparse(child)[:80])
                yield from walk(child, scope, groups, class_groups)

    yield from walk(tree, "", frozenset(), frozenset())


def all_sites() -> list[Site]:
    found: list[Site] = []
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module == HELPER:
            continue
        found += sites(ast.parse(path.read_text("utf-8")), module)
    return found


def test_every_task_is_started_in_a_task_group_or_a_task_set() -> None:
    unowned = [str(site) for site in all_sites()
               if (site.module, site.function) not in ALLOWED]
    assert not unowned, (
        "tasks started outside a task group and outside headwater.tasks.TaskSet "
        f"(start them with the owner's TaskSet.spawn, or in an asyncio.TaskGroup): {unowned}")


def test_every_allowlist_entry_still_matches_a_call() -> None:
    found = {(site.module, site.function) for site in all_sites()}
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"allowlist entries that match no call any more (remove them): {stale}"


def test_the_helper_module_exists_and_is_the_one_that_creates_tasks() -> None:
    helper = ast.parse((SRC / HELPER).read_text("utf-8"))
    assert any(isinstance(node, ast.Call) and _starts_a_task(node) for node in ast.walk(helper))


@pytest.mark.parametrize(("source", "flagged"), [
    ("import asyncio\nasync def f():\n    asyncio.ensure_future(g())\n", ["f"]),
    ("import asyncio\nasync def f():\n    t = asyncio.create_task(g())\n    await t\n", ["f"]),
    ("from asyncio import create_task\nasync def f():\n    create_task(g())\n", ["f"]),
    ("def f(loop):\n    loop.create_task(g())\n", ["f"]),
    ("import asyncio\nasync def f():\n    await asyncio.shield(g())\n", ["f"]),
    ("import asyncio\nasync def f(t):\n    await asyncio.shield(t)\n", []),
    ("import asyncio\nasync def f():\n    asyncio.Task(g())\n", ["f"]),
    ("import asyncio\nasync def f():\n"
     "    async with asyncio.TaskGroup() as group:\n        group.create_task(g())\n", []),
    ("import asyncio\nasync def f():\n"
     "    async with asyncio.TaskGroup() as group:\n"
     "        async def inner():\n            group.create_task(g())\n", []),
    ("import asyncio\nasync def f(group):\n    group.create_task(g())\n", ["f"]),
    ("import asyncio\nasync def f():\n"
     "    async with asyncio.TaskGroup() as group:\n        other.create_task(g())\n", ["f"]),
    ("import asyncio\nclass C:\n"
     "    async def run(self):\n"
     "        async with asyncio.TaskGroup() as group:\n            self._group = group\n"
     "    def spawn(self):\n        self._group.create_task(g())\n", []),
    ("import asyncio\nclass C:\n"
     "    async def run(self):\n        async with asyncio.TaskGroup() as self.g:\n"
     "            pass\n"
     "    def spawn(self):\n        self.g.create_task(g())\n", []),
    ("import asyncio\nclass C:\n"
     "    def __init__(self, loop):\n        self._group = loop\n"
     "    def spawn(self):\n        self._group.create_task(g())\n", ["C.spawn"]),
    ("def f(tasks):\n    tasks.spawn(g())\n", []),
])
def test_the_rule_flags_what_it_should(source: str, flagged: list[str]) -> None:
    assert [site.function for site in sites(ast.parse(source), "m.py")] == flagged
