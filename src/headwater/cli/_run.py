"""``headwater run path/to/agent.py "message" [--json]``: one run, streamed to stdout."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any, TextIO

from ..agents.agent import Agent
from ..agents.base import BaseAgent
from ..agents.toolsets import open_toolsets
from ..core.errors import UserError
from ..core.events import Event
from ..core.run_config import RunConfig, StreamingMode
from ..runner import Runner
from ._common import DEMO_USER, CommandError
from ._store import open_store, probe
from ._terminal import narrate

AGENT_NAMES = ("agent", "root_agent")
"""The names ``headwater run`` looks up in the agent file, in order (``root_agent``: ADK's)."""


def run_command(args: Any) -> int:  # argparse.Namespace
    """Run the file's agent once; 0 on success, 1 when the run ends in an error event."""
    agent = load_agent(Path(args.path))
    if args.model:
        on_model(agent, args.model)
    return asyncio.run(run_once(agent, args.message, args.db, args.json, sys.stdout))


def on_model(agent: BaseAgent, model: str) -> None:
    """``--model``: the root agent runs on ``model``; the agents under it (its sub-agents,
    the agents it calls as tools) keep their own models.

    Raises:
        CommandError: the root is a workflow agent (it calls no model).
        UserError: an unknown provider, a malformed string or a missing API key.
    """
    if not isinstance(agent, Agent):
        raise CommandError(f"--model sets the root agent's model; {agent.name!r} is "
                           f"{_a(type(agent).__name__)}, which calls no model (its agents run "
                           "on their own models)")
    from ._models import resolve_model

    agent.model = resolve_model(model)


def load_agent(path: Path) -> BaseAgent:
    """The ``agent`` (else ``root_agent``) of the Python file at ``path``: any agent kind
    (an ``Agent``, a ``SequentialAgent``, …), the root of the tree the run drives.

    A file that runs an event loop at import (a module-level ``asyncio.run(main())``)
    has run before the command's run; one line on stderr says so.

    Raises:
        CommandError: no such file (or a directory), a syntax error, an agent built wrong
            (a ``UserError`` at import, such as a bad ``model``: ``path:line: why``), no
            agent in it, or ``agent`` / ``root_agent`` is something else (the error says
            what).
    """
    if path.is_dir():
        raise CommandError(f"{path} is a directory: give the Python file that defines the "
                           "agent, e.g. agent.py")
    if not path.is_file():
        raise CommandError(f"no such file: {path}")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise CommandError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    spec = importlib.util.spec_from_file_location("headwater_run_target", path)
    if spec is None or spec.loader is None:
        raise CommandError(f"cannot load {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # its sibling modules import
    ran = loop_run_at_import(tree)
    try:
        spec.loader.exec_module(module)
    except UserError as exc:  # an agent built wrong (a bad model, a bad name): one line
        raise CommandError(f"{path}{_line_in(path, exc)}: {exc}") from None
    finally:
        if ran is not None:
            line, call = ran
            print(f"headwater run: note: {path}:{line} runs {call}(…) at import, so that code "
                  "ran before this run; put it under `if __name__ == \"__main__\":`",
                  file=sys.stderr, flush=True)
    found = {name: getattr(module, name) for name in AGENT_NAMES if hasattr(module, name)}
    for value in found.values():
        if isinstance(value, BaseAgent):
            return value
    if found:
        name, value = next(iter(found.items()))
        raise CommandError(f"{path}: {not_an_agent(name, value)}")
    raise CommandError(f"{path} defines no Agent named `agent` or `root_agent`")


def _line_in(path: Path, exc: BaseException) -> str:
    """``:<line>`` of the last line of ``path`` that ``exc`` passed through, or ``""``."""
    target = path.resolve()
    line = ""
    frame = exc.__traceback__
    while frame is not None:
        if Path(frame.tb_frame.f_code.co_filename).resolve() == target:
            line = f":{frame.tb_lineno}"
        frame = frame.tb_next
    return line


def not_an_agent(name: str, value: object) -> str:
    """What an error says of a name that holds no agent: ```root_agent` is a str, not an
    agent``; a class or a function not called says so."""
    if isinstance(value, type):
        return (f"`{name}` is the class {value.__name__}, not an agent: build one, "
                f"{value.__name__}(name=…)")
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        return (f"`{name}` is the function {value.__name__}, not an agent: call it to build "
                "the agent")
    if isinstance(value, types.ModuleType):
        return f"`{name}` is the module {value.__name__}, not an agent"
    return f"`{name}` is {_a(type(value).__name__)}, not an agent"


def _a(kind: str) -> str:
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


_LOOP_RUNNERS = {"asyncio", "anyio", "trio", "uvloop"}


def loop_run_at_import(tree: ast.Module) -> tuple[int, str] | None:
    """Where a module runs an event loop when imported: the line and the call
    (``asyncio.run``, ``loop.run_until_complete``, …), outside functions, classes and
    ``if __name__ == "__main__":``; ``None`` when it does not."""
    runs_from = {alias.asname or alias.name for node in tree.body
                 if isinstance(node, ast.ImportFrom) and node.module in _LOOP_RUNNERS
                 for alias in node.names if alias.name == "run"}
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(statement, ast.If) and _is_main_guard(statement.test):
            pending = statement.orelse + pending
            continue
        inner = [child for field in ("body", "orelse", "finalbody", "handlers")
                 for child in getattr(statement, field, [])]
        for node in _expressions(statement):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and (
                    func.attr in ("run_until_complete", "run_forever")
                    or (func.attr == "run" and isinstance(func.value, ast.Name)
                        and func.value.id in _LOOP_RUNNERS)):
                return node.lineno, ast.unparse(func)
            if isinstance(func, ast.Name) and func.id in runs_from:
                return node.lineno, func.id
        pending = [s for s in inner if isinstance(s, ast.stmt)] + [
            s for handler in inner if isinstance(handler, ast.ExceptHandler)
            for s in handler.body] + pending
    return None


def _expressions(statement: ast.stmt) -> list[ast.AST]:
    """The nodes of ``statement`` outside its nested statements and lambdas."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [child for child in ast.iter_child_nodes(statement)
                              if not isinstance(child, ast.stmt | ast.ExceptHandler)]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Lambda):
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda n: getattr(n, "lineno", 0))


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


async def run_once(agent: BaseAgent, message: str, db: str | None, as_json: bool,
                   out: TextIO) -> int:
    """Stream one run of ``message`` to ``out``; returns the exit code."""
    service, shown = open_store(db)
    runner = Runner(agent=agent, app_name=agent.name, session_service=service)
    try:
        await probe(service, shown)
        await open_toolsets(agent)  # an MCP server that cannot start: one line, before the run
        session = await service.create_session(app_name=agent.name, user_id=DEMO_USER)
        failed = False
        async with runner.run_async(user_id=DEMO_USER, session_id=session.id,
                                    new_message=message,
                                    run_config=RunConfig(streaming_mode=StreamingMode.SSE)
                                    ) as stream:
            if as_json:
                async for event in stream:
                    failed = failed or bool(event.error_code)
                    out.write(json.dumps(event_json(event), ensure_ascii=False) + "\n")
                    out.flush()
            else:
                failed = await narrate(stream, out)
        return 1 if failed else 0
    finally:
        await runner.aclose()  # closes the session store too


def event_type(event: Event) -> str:
    """The kind of an event, as ``--json`` names it."""
    if event.error_code:
        return "error"
    if event.tool_progress is not None:
        return "tool_progress"
    if event.partial:
        return "delta"
    if event.actions.requested_approvals:
        return "approval_required"
    if event.function_calls:
        return "tool_call"
    if event.function_responses:
        return "tool_result"
    return "message"


def event_json(event: Event) -> dict[str, Any]:  # raw JSON out
    """One ``--json`` line: what the event holds, nothing more."""
    line: dict[str, Any] = {"type": event_type(event), "author": event.author,
                            "partial": event.partial, "text": event.text}
    if event.function_calls:
        line["function_calls"] = [{"id": c.id, "name": c.name, "args": c.args}
                                  for c in event.function_calls]
    if event.function_responses:
        line["function_responses"] = [{"id": r.id, "name": r.name, "response": r.response}
                                      for r in event.function_responses]
    if event.tool_progress is not None:
        progress = event.tool_progress
        item = progress.event
        line["tool_progress"] = {"call_id": progress.call_id, "name": progress.tool_name,
                                 "type": item.type, "delta": item.delta,
                                 "progress": item.progress, "total": item.total,
                                 "message": item.message}
    if event.actions.requested_approvals:
        line["approvals"] = [{"call_id": a.call_id, "name": a.tool_name, "args": a.args,
                              "display": a.display}
                             for a in event.actions.requested_approvals]
    if event.error_code:
        line["error_code"] = event.error_code
        line["error_message"] = event.error_message
    if event.usage is not None:
        line["usage"] = {"input_tokens": event.usage.input_tokens,
                         "output_tokens": event.usage.output_tokens}
    if event.finish_reason:
        line["finish_reason"] = event.finish_reason
    return line
