"""The gateway keeps each rule in one home, checked with `ast`.

(The bounds on the length of functions and modules, for the whole package, are
in ``tests/test_structure.py``.)

- Runs start in one place: only ``Gateway.start_run`` hands a stream to
  ``RunManager.start``, and only the run manager writes ``closing``.
- No route reads its caller by hand: the user (and the request rate) comes from
  ``Depends(current_user)`` (a live socket's from ``Depends(live_user)``); only
  :func:`headwater.gateway.core.current_user` calls ``Gateway.user``.
- Routes are ``APIRouter``s at module level, not closures inside a function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "src" / "headwater" / "gateway"
Function = ast.FunctionDef | ast.AsyncFunctionDef


def modules() -> list[Path]:
    return sorted(GATEWAY.rglob("*.py"))


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


def calls(tree: ast.AST, attribute: str) -> Iterator[tuple[str, ast.Call]]:
    """The calls ``<anything>.<attribute>(…)`` in ``tree``, with the function they are in."""
    for name, function in functions(tree):
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == attribute):
                yield name, node


def trees() -> dict[str, ast.Module]:
    """Each module of the gateway by its path under it (``core.py``, ``runs/manager.py``)."""
    return {path.relative_to(GATEWAY).as_posix(): ast.parse(path.read_text("utf-8"))
            for path in modules()}


def test_the_checks_see_the_gateway() -> None:
    found = trees()
    assert {"app.py", "core.py", "websocket.py", "agui.py", "vercel.py", "page.py",
            "runs/manager.py", "wire/frames.py", "http/auth.py"} <= set(found)
    names = {name for name, _ in functions(found["core.py"])}
    assert {"Gateway.start_run", "Gateway.user", "current_user"} <= names


def test_only_start_run_hands_a_stream_to_the_run_manager() -> None:
    runs_start = [(module, name) for module, tree in trees().items()
                  for name, call in calls(tree, "start")
                  if isinstance(call.func, ast.Attribute)
                  and isinstance(call.func.value, ast.Attribute)
                  and call.func.value.attr == "runs"]
    assert runs_start == [("core.py", "Gateway.start_run")]


def test_only_the_run_manager_writes_closing() -> None:
    writers = [(module, node.lineno) for module, tree in trees().items()
               for node in ast.walk(tree)
               if isinstance(node, ast.Assign | ast.AugAssign) and any(
                   isinstance(target, ast.Attribute) and target.attr == "closing"
                   and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                   for target in (node.targets if isinstance(node, ast.Assign)
                                  else [node.target]))]
    assert writers == []
    in_manager = [name for name, function in functions(trees()["runs/manager.py"])
                  for node in ast.walk(function)
                  if isinstance(node, ast.Assign) and any(
                      isinstance(t, ast.Attribute) and t.attr == "closing" for t in node.targets)]
    assert set(in_manager) <= {"RunManager.__init__", "RunManager.begin_shutdown"}


def test_only_current_user_reads_the_caller() -> None:
    callers = [(module, name) for module, tree in trees().items()
               for name, _ in calls(tree, "user")]
    assert callers == [("core.py", "current_user")]


def test_routes_are_routers_at_module_level() -> None:
    decorated = []
    for module, tree in trees().items():
        for name, function in functions(tree):
            for decorator in function.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (isinstance(target, ast.Attribute) and target.attr in
                        {"get", "post", "put", "patch", "delete", "websocket"}):
                    decorated.append((module, name, ast.unparse(target.value)))
    assert decorated, "no route found"
    nested = [(module, name) for module, name, _ in decorated if "." in name]
    assert nested == [], "a route defined inside a function"
    on_app = [(module, name) for module, name, owner in decorated if owner == "app"]
    assert on_app == [], "a route added to the app, not to a router"
