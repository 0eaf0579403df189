"""The ``headwater`` command as a new user meets it: help, bad input, sessions, run, demo."""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headwater.cli import CommandError, _parser

pytestmark = pytest.mark.slow


def hw(*args: str, cwd: Path, env: dict[str, str],
       timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headwater.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    """No HEADWATER_* from outside; the demo model at full speed."""
    clean = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    return {**clean, "HEADWATER_DEMO_WORD_DELAY": "0"}


def test_demo_terminal_runs_on_sqlite_and_the_scripted_model(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    result = hw("demo", "--terminal", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "model 'demo' (scripted demo model, offline)" in out
    assert '[tool call] lookup_order({"order_id": "1042"})' in out
    assert "support> Order 1042 shipped on 30 September and is due Monday.\n" in out
    assert out.count("Order 1042 shipped") == 1  # streamed once, never rendered twice
    db = tmp_path / ".headwater" / "sessions.db"
    with sqlite3.connect(db) as raw:
        authors = [row[0] for row in raw.execute("SELECT author FROM hw_events ORDER BY seq")]
    raw.close()
    assert authors == ["user", "support", "support", "support"]


def test_demo_terminal_runs_the_demo_model_or_the_model_given(tmp_path: Path,
                                                              env: dict[str, str]) -> None:
    story = hw("demo", "--terminal", "--prompt", "Tell me a long story", cwd=tmp_path, env=env)
    assert story.returncode == 0, story.stderr
    assert "support> Once upon a time" in story.stdout and "lookup_order" not in story.stdout
    line = one_line_error(hw("demo", "--terminal", "--model", "bogus", cwd=tmp_path, env=env))
    assert line.startswith("headwater demo: ") and "bogus" in line
    line = one_line_error(hw("demo", "--terminal", cwd=tmp_path,
                             env={**env, "HEADWATER_MODEL": "bogus"}))
    assert line.startswith("headwater demo: ") and "bogus" in line
    # A real model string: the run goes to that provider (here a closed loopback port).
    result = hw("demo", "--terminal", "--model", "openai-compatible:m@http://127.0.0.1:9/v1",
                cwd=tmp_path, env={**env, "HEADWATER_MODEL_MAX_ATTEMPTS": "1"})
    assert result.returncode == 1, result.stderr
    assert "model 'm'" in result.stdout
    assert "[error] provider_unavailable" in result.stdout


# -- help -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [[], ["demo"], ["chat"], ["run"], ["sessions"], ["db"],
                                     ["serve"], ["mcp"]])
def test_help_is_quick_and_documents_every_option(command: list[str], tmp_path: Path,
                                                  env: dict[str, str]) -> None:
    hw(*command, "--help", cwd=tmp_path, env=env)  # warm the file cache
    started = time.perf_counter()
    result = hw(*command, "--help", cwd=tmp_path, env=env)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 1.0  # measured about 0.15 s; the bound only catches eager imports
    assert "--help" in result.stdout
    if command in ([], ["demo"], ["chat"], ["run"], ["serve"]):
        assert "OPENAI_API_KEY" in result.stdout and "ANTHROPIC_API_KEY" in result.stdout
        assert "GEMINI_API_KEY" in result.stdout


def test_every_command_and_option_has_help() -> None:
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    documented = {c.dest: c.help for c in commands._choices_actions}
    assert set(documented) == set(commands.choices) == {"demo", "chat", "run", "sessions",
                                                        "db", "serve", "mcp"}
    assert all(documented.values())
    for name, sub in [("headwater", parser), *commands.choices.items()]:
        missing = [a.dest for a in sub._actions if not a.help and a.dest != "command"]
        assert not missing, f"{name}: options without help: {missing}"


@pytest.mark.parametrize("command", [[], ["chat"]])
def test_help_does_not_import_the_kit(command: list[str], tmp_path: Path,
                                      env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from headwater.cli import main\n"
         f"try:\n    main({[*command, '--help']!r})\nexcept SystemExit:\n    pass\n"
         "print(sorted(m for m in sys.modules if m.startswith(('sqlalchemy', 'pydantic', "
         "'headwater.runner', 'fastapi', 'rich', 'httpx'))))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


# -- bad input: one line on stderr, exit code 2 ---------------------------------------------------

def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_malformed_db_url(tmp_path: Path, env: dict[str, str]) -> None:
    line = one_line_error(hw("sessions", "--db", "not a url", cwd=tmp_path, env=env))
    assert line.startswith("headwater sessions: --db is not a database URL")


def test_an_unsupported_database(tmp_path: Path, env: dict[str, str]) -> None:
    line = one_line_error(hw("demo", "--db", "mysql://u@h/db", "--no-browser",
                             cwd=tmp_path, env=env))
    assert "unsupported database 'mysql'" in line


def test_an_unreachable_database_without_its_password(tmp_path: Path,
                                                      env: dict[str, str]) -> None:
    url = "postgresql://user:hunter2@127.0.0.1:1/db"
    result = hw("sessions", "--db", url, cwd=tmp_path, env=env)
    line = one_line_error(result)
    assert "cannot use the session store postgresql://user:***@127.0.0.1:1/db" in line
    assert "hunter2" not in result.stderr + result.stdout


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://", "sqlite:///:memory:"])
def test_a_sqlite_url_without_a_file(url: str, tmp_path: Path, env: dict[str, str]) -> None:
    for command in (["sessions"], ["demo", "--terminal"]):
        line = one_line_error(hw(*command, "--db", url, cwd=tmp_path, env=env))
        assert "--db names no SQLite file" in line and "sqlite:///sessions.db" in line


def test_a_reader_that_leaves_early_is_no_error(tmp_path: Path, env: dict[str, str]) -> None:
    """``headwater sessions | head``: the pipe's reader is gone before the table is written."""
    child = subprocess.Popen([sys.executable, "-m", "headwater.cli", "sessions"], cwd=tmp_path,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    try:
        assert child.wait(timeout=60) == 0
        assert child.stderr.read() == b""  # no "Broken pipe", no "Exception ignored"
    finally:
        child.stderr.close()


def test_an_unwritable_path(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "file").write_text("x")
    line = one_line_error(hw("sessions", "--db", "sqlite+aiosqlite:///file/sub/s.db",
                             cwd=tmp_path, env=env))
    assert "file is not a directory" in line


def test_a_file_that_is_not_a_database(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "notes.db").write_text("these are my notes\n")
    for command in (["sessions"], ["demo", "--terminal"], ["demo", "--no-browser"]):
        line = one_line_error(hw(*command, "--db", "sqlite+aiosqlite:///notes.db",
                                 cwd=tmp_path, env=env))
        assert line.endswith("notes.db is not a SQLite database")
    assert (tmp_path / "notes.db").read_text() == "these are my notes\n"


def test_a_bad_setting(tmp_path: Path, env: dict[str, str]) -> None:
    result = hw("sessions", cwd=tmp_path, env={**env, "HEADWATER_SQLITE_READERS": "many"})
    line = one_line_error(result)
    assert line.startswith("headwater sessions: bad setting HEADWATER_SQLITE_READERS: ")
    assert "'many'" in line


def test_a_missing_optional_driver(tmp_path: Path, env: dict[str, str]) -> None:
    blocker = tmp_path / "no_asyncpg"
    blocker.mkdir()
    (blocker / "asyncpg.py").write_text("raise ImportError('No module named asyncpg')\n")
    env = {**env, "PYTHONPATH": os.pathsep.join([str(blocker), env["PYTHONPATH"]])}
    line = one_line_error(hw("sessions", "--db", "postgresql://u@127.0.0.1/db",
                             cwd=tmp_path, env=env))
    assert 'pip install "headwater[postgres]"' in line


def test_an_unknown_model_and_a_missing_key(tmp_path: Path, env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
    line = one_line_error(hw("demo", "--no-browser", "--model", "nope:x", cwd=tmp_path, env=env))
    assert "unknown model provider 'nope'" in line
    line = one_line_error(hw("demo", "--no-browser", cwd=tmp_path,
                             env={**env, "HEADWATER_MODEL": "openai:gpt-4o-mini"}))
    assert "set OPENAI_API_KEY" in line


def test_serve_model(tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from headwater.gateway.serve import load_target
    from headwater.models import DemoModel

    (tmp_path / "own_model.py").write_text(
        "from headwater import Agent\nfrom headwater.testing import ScriptedModel\n"
        "agent = Agent(name='clerk', model=ScriptedModel(model='own'))\n"
        "agents = [agent, Agent(name='other', model=ScriptedModel(model='own'))]\n"
        "from headwater.gateway import create_app\napp = create_app(agents)\n"
        "from headwater import SequentialAgent\n"
        "steps = SequentialAgent(name='steps', sub_agents=[Agent(name='one', model='demo')])\n")
    line = one_line_error(hw("serve", "own_model:app", "--model", "demo", cwd=tmp_path,
                             env=env))
    assert "--model applies to an Agent or a list of agents; own_model:app is an app" in line
    line = one_line_error(hw("serve", "own_model:agent", "--model", "nope:x", cwd=tmp_path,
                             env=env))
    assert "unknown model provider 'nope'" in line
    line = one_line_error(hw("serve", "own_model:agent", "--model", "anthropic:claude",
                             cwd=tmp_path, env={k: v for k, v in env.items()
                                                if k != "ANTHROPIC_API_KEY"}))
    assert "set ANTHROPIC_API_KEY" in line
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    app = load_target("own_model:agent")
    assert app.state.gateway.runners["clerk"].agent.model.model == "own"
    app = load_target("own_model:agents", "demo:demo")
    models = [runner.agent.model for runner in app.state.gateway.runners.values()]
    assert len(models) == 2 and all(isinstance(m, DemoModel) for m in models)
    app = load_target("own_model:steps")  # a workflow root is served as create_app serves it
    assert list(app.state.gateway.runners) == ["steps"]
    line = one_line_error(hw("serve", "own_model:steps", "--model", "demo", cwd=tmp_path,
                             env=env))
    assert "--model applies to an Agent; 'steps' of own_model:steps is a SequentialAgent" in line


# -- sessions -------------------------------------------------------------------------------------

def test_sessions_list_show_delete(tmp_path: Path, env: dict[str, str]) -> None:
    assert hw("sessions", cwd=tmp_path, env=env).stdout == "no sessions\n"
    assert hw("demo", "--terminal", cwd=tmp_path, env=env).returncode == 0
    listed = hw("sessions", "list", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "APP", "CREATED", "UPDATED"]
    session_id, app = row.split()[:2]
    assert app == "support"
    shown = hw("sessions", "show", session_id, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"session {session_id} of support (4 events)"
    assert lines[1].endswith("user: Where is order 1042?")
    assert lines[2].endswith('support: calls lookup_order({"order_id": "1042"})')
    assert lines[3].endswith("support: result of lookup_order: ok")
    assert lines[4].endswith("support: Order 1042 shipped on 30 September and is due Monday.")
    other = hw("sessions", "--user", "someone-else", cwd=tmp_path, env=env)
    assert other.stdout == "no sessions\n"
    assert hw("sessions", "--app", "docs", cwd=tmp_path, env=env).stdout == "no sessions\n"
    deleted = hw("sessions", "delete", session_id, cwd=tmp_path, env=env)
    assert deleted.stdout == f"deleted session {session_id}\n"
    assert hw("sessions", cwd=tmp_path, env=env).stdout == "no sessions\n"
    line = one_line_error(hw("sessions", "show", session_id, cwd=tmp_path, env=env))
    assert f"no session {session_id}" in line
    line = one_line_error(hw("sessions", "delete", cwd=tmp_path, env=env))
    assert "needs a session ID" in line


def test_sessions_lists_every_demo_agent_and_any_app_named(tmp_path: Path,
                                                           env: dict[str, str]) -> None:
    """Without --app, the sessions of all the demo's agents; --app names others (or one)."""
    from headwater.cli._agents import demo_agents
    from headwater.cli._common import DEMO_APPS
    from headwater.models import DemoModel

    served = tuple(agent.name for agent in demo_agents(DemoModel()))
    assert DEMO_APPS[:len(served)] == served  # the served agents, then the examples run alone
    assert set(DEMO_APPS) == {*served, "support", "docs", "deploy", "indexer"}
    examples = Path(__file__).resolve().parents[1] / "examples"
    for example, message in [("docs_search", "Search the docs for streaming"),
                             ("deploy", "Deploy version 2 to staging")]:
        assert hw("run", str(examples / f"{example}.py"), message, cwd=tmp_path,
                  env=env).returncode == 0
    (tmp_path / "shop.py").write_text(AGENT_FILE)
    assert hw("run", "shop.py", "Where is order 7001?", cwd=tmp_path, env=env).returncode == 0
    rows = hw("sessions", cwd=tmp_path, env=env).stdout.splitlines()[1:]
    assert sorted(row.split()[1] for row in rows) == ["deploy", "docs"]
    shop = hw("sessions", "--app", "shop", cwd=tmp_path, env=env).stdout.splitlines()[1:]
    assert [row.split()[1] for row in shop] == ["shop"]
    both = hw("sessions", "--app", "shop", "--app", "docs", cwd=tmp_path, env=env)
    assert sorted(row.split()[1] for row in both.stdout.splitlines()[1:]) == ["docs", "shop"]
    docs_id = next(row.split()[0] for row in rows if row.split()[1] == "docs")
    shown = hw("sessions", "show", docs_id, cwd=tmp_path, env=env)
    assert shown.stdout.splitlines()[0].startswith(f"session {docs_id} of docs (")
    line = one_line_error(hw("sessions", "show", docs_id, "--app", "shop", cwd=tmp_path,
                             env=env))
    assert f"no session {docs_id} for app 'shop'" in line


# -- run ------------------------------------------------------------------------------------------

AGENT_FILE = '''
from headwater import Agent
from headwater.models import DemoModel

def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order number.
    """
    return {"order_id": order_id, "status": "shipped", "shipped_on": "1 May", "due": "Friday"}

root_agent = Agent(name="shop", model=DemoModel(), tools=[lookup_order])
'''

FAILING_FILE = '''
from headwater import Agent
from headwater.testing import ScriptedModel

agent = Agent(name="broken", model=ScriptedModel().reply("Hal", "f", error=(
    "provider_error", "boom")))
'''


def test_run_streams_one_run(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "shop.py").write_text(AGENT_FILE)
    result = hw("run", "shop.py", "Where is order 7001?", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert '[tool call] lookup_order({"order_id": "7001"})' in result.stdout
    assert "shop> Order 7001 shipped on 1 May and is due Friday.\n" in result.stdout


def test_run_json_lines(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "shop.py").write_text(AGENT_FILE)
    result = hw("run", "shop.py", "Where is order 7001?", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    types = [line["type"] for line in lines]
    assert "tool_call" in types and "tool_result" in types
    deltas = [line["text"] for line in lines if line["type"] == "delta"]
    assert all(line["partial"] for line in lines if line["type"] == "delta")
    assert "".join(deltas) == lines[-1]["text"] == "Order 7001 shipped on 1 May and is due Friday."
    assert lines[-1]["type"] == "message" and not lines[-1]["partial"]
    call = next(line for line in lines if line["type"] == "tool_call")
    assert call["function_calls"][0]["args"] == {"order_id": "7001"}


def test_run_exits_1_on_an_error_event(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "broken.py").write_text(FAILING_FILE)
    result = hw("run", "broken.py", "hi", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["type"] == "error" and last["error_code"]


@pytest.mark.parametrize(("example", "message", "answer"), [
    ("support", "Where is order 1042?", "support> Order 1042 shipped on 30 September"),
    ("docs_search", "Search the docs for streaming", "docs> I found 3 pages about streaming"),
    ("deploy", "Deploy version 2 to staging", "[approval required] deploy version 2 to "
                                               "staging"),
])
def test_run_takes_the_request_response_examples(example: str, message: str, answer: str,
                                                  tmp_path: Path, env: dict[str, str]) -> None:
    """What a new user tries first: ``headwater run examples/support.py "…"``."""
    script = Path(__file__).resolve().parents[1] / "examples" / f"{example}.py"
    result = hw("run", str(script), message, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert answer in result.stdout


def test_run_uses_the_agent_files_model_unless_model_is_given(tmp_path: Path,
                                                              env: dict[str, str]) -> None:
    help_text = hw("run", "--help", cwd=tmp_path, env=env).stdout
    model_help = " ".join(help_text[help_text.index("\n  --model M"):].split()[:20])
    assert "default: the model the agent file gives it" in model_help
    assert "HEADWATER_MODEL is not read here" in " ".join(help_text.split())
    unreadable = {**env, "HEADWATER_MODEL": "no-such-provider:x"}  # never read by run
    (tmp_path / "shop.py").write_text(AGENT_FILE)
    result = hw("run", "shop.py", "Where is order 7001?", cwd=tmp_path, env=unreadable)
    assert result.returncode == 0, result.stderr
    (tmp_path / "broken.py").write_text(FAILING_FILE)
    assert hw("run", "broken.py", "hi", cwd=tmp_path, env=unreadable).returncode == 1
    fixed = hw("run", "broken.py", "Where is order 7001?", "--model", "demo", cwd=tmp_path,
               env=unreadable)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout == (  # the demo model: it names no tool the agent lacks
        "broken> I cannot do that here: I have no tool for it, nor an agent to hand it to.\n")


def readme_example() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^## In code\n\n```python\n(.*?)^```", readme, re.S | re.M)
    assert found, "README has no code example under ## In code"
    return found.group(1)


def test_the_readme_example_runs_both_ways(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "agent.py").write_text(readme_example())
    direct = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout == "Order 1042 is due Monday.\n"
    result = hw("run", "agent.py", "Where is order 1042?", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "support> Order 1042 is due Monday.\n" in result.stdout
    assert result.stderr == ""  # no note: nothing ran at import


def test_run_says_when_a_file_ran_code_at_import(tmp_path: Path, env: dict[str, str]) -> None:
    unguarded = readme_example().replace('if __name__ == "__main__":', "if True:")
    (tmp_path / "agent.py").write_text(unguarded)
    result = hw("run", "agent.py", "Where is order 1042?", cwd=tmp_path, env=env)
    line = 1 + unguarded.splitlines().index("    asyncio.run(main())")
    notes = [n for n in result.stderr.splitlines() if "note:" in n]
    assert notes == [f"headwater run: note: agent.py:{line} runs asyncio.run(…) at import, "
                     "so that code ran before this run; put it under "
                     '`if __name__ == "__main__":`'], result.stderr
    assert result.stdout.startswith("Order 1042 is due Monday.\n")  # main() ran at import


@pytest.mark.parametrize(("source", "found"), [
    ("import asyncio\nasyncio.run(main())\n", (2, "asyncio.run")),
    ("from asyncio import run as go\nx = 1\ngo(main())\n", (3, "go")),
    ("import asyncio\nloop = asyncio.new_event_loop()\ntry:\n    pass\nfinally:\n"
     "    loop.run_until_complete(main())\n", (6, "loop.run_until_complete")),
    ("import asyncio\nif __name__ == '__main__':\n    asyncio.run(main())\n", None),
    ("import asyncio\nasync def main():\n    await x\ndef go():\n    asyncio.run(main())\n"
     "handler = lambda: asyncio.run(main())\n", None),
    ("import asyncio\nif __name__ == '__main__':\n    pass\nelse:\n    asyncio.run(m())\n",
     (5, "asyncio.run")),
    ("runner.run(x)\n", None),  # not an event loop's run
])
def test_loop_run_at_import(source: str, found: tuple[int, str] | None) -> None:
    import ast

    from headwater.cli._run import loop_run_at_import

    assert loop_run_at_import(ast.parse(source)) == found


def test_run_bad_files(tmp_path: Path, env: dict[str, str]) -> None:
    line = one_line_error(hw("run", "missing.py", "hi", cwd=tmp_path, env=env))
    assert "no such file: missing.py" in line
    (tmp_path / "agents").mkdir()
    line = one_line_error(hw("run", "agents", "hi", cwd=tmp_path, env=env))
    assert "agents is a directory: give the Python file that defines the agent" in line
    (tmp_path / "empty.py").write_text("x = 1\n")
    line = one_line_error(hw("run", "empty.py", "hi", cwd=tmp_path, env=env))
    assert "defines no Agent named `agent` or `root_agent`" in line
    (tmp_path / "bad.py").write_text("def (\n")
    line = one_line_error(hw("run", "bad.py", "hi", cwd=tmp_path, env=env))
    assert "bad.py:1: syntax error" in line


@pytest.mark.parametrize(("model", "said"), [
    ("...", "model=... is a placeholder, not a model"),
    ("42", "model=42 (an int) is not a model"),
])
def test_run_says_in_one_line_when_an_agent_is_built_without_a_model(
        model: str, said: str, tmp_path: Path, env: dict[str, str]) -> None:
    # docs/multi-agent.md's first example, pasted as it is: the agent is refused when the
    # file builds it, with where and why, not a traceback when the run starts.
    given = f", model={model}"
    (tmp_path / "shop.py").write_text(
        "from headwater import Agent\n\n"
        f"billing = Agent(name='billing'{given}, description='Invoices and payments.')\n"
        "agent = Agent(name='coordinator', model='demo', sub_agents=[billing])\n")
    line = one_line_error(hw("run", "shop.py", "hi", cwd=tmp_path, env=env))
    assert line.startswith(f"headwater run: shop.py:3: agent 'billing': {said}; a model is a "
                           "BaseLlm object, 'demo' (the offline demo model) or a "
                           "'provider:model' string"), line


def test_run_a_sub_agent_without_a_model_takes_its_parents(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    # ADK's canonical_model: no model= is the nearest LLM agent's above (docs/multi-agent.md)
    (tmp_path / "shop.py").write_text(
        "from headwater import Agent\n\n"
        "billing = Agent(name='billing', description='Invoices and payments.')\n"
        "agent = Agent(name='coordinator', model='demo', sub_agents=[billing])\n")
    done = hw("run", "shop.py", "hi", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("coordinator> I am the demo model"), done.stdout
    (tmp_path / "solo.py").write_text("from headwater import Agent\n\n"
                                      "agent = Agent(name='solo')\n")
    line = one_line_error(hw("run", "solo.py", "hi", cwd=tmp_path, env=env))
    assert line == ("headwater run: agent 'solo' has no model, and no LLM agent above it "
                    "has one: pass model= to it or to an agent above it"), line


# -- run: any root agent, each agent's text labelled ---------------------------------------------

TREE_FILE = '''
from headwater import Agent, LoopAgent, ParallelAgent, SequentialAgent
from headwater.testing import ScriptedModel

first = Agent(name="{first}", model=ScriptedModel().reply({first_text}))
second = Agent(name="{second}", model=ScriptedModel().reply({second_text}))
root_agent = {root}(name="pipeline", sub_agents=[first, second]{options})
'''


def tree_file(root: str, options: str = "", first: str = "drafter", second: str = "editor",
              first_text: tuple[str, ...] = ("A draft ", "of words."),
              second_text: tuple[str, ...] = ("An edit ", "of the draft.")) -> str:
    return TREE_FILE.format(root=root, options=options, first=first, second=second,
                            first_text=", ".join(map(repr, first_text)),
                            second_text=", ".join(map(repr, second_text)))


@pytest.mark.parametrize(("root", "options"), [("SequentialAgent", ""),
                                               ("LoopAgent", ", max_iterations=1")])
def test_run_takes_a_workflow_root_and_labels_each_agents_text(
        root: str, options: str, tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "pipeline.py").write_text(tree_file(root, options))
    result = hw("run", "pipeline.py", "Write it", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "drafter> A draft of words.\neditor> An edit of the draft.\n"
    assert result.stderr == ""


def test_run_takes_a_parallel_root_each_branch_on_lines_of_its_own(
        tmp_path: Path, env: dict[str, str]) -> None:
    """Interleaved deltas of two branches: every line is one agent's, labelled with it, and
    each agent's lines say its answer once (no record written again)."""
    web, papers = ("Web ", "one ", "two ", "three."), ("Papers ", "four ", "five ", "six.")
    (tmp_path / "pipeline.py").write_text(tree_file("ParallelAgent", first="web", second="papers",
                                                    first_text=web, second_text=papers))
    result = hw("run", "pipeline.py", "Search", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    said: dict[str, str] = {"web": "", "papers": ""}
    for line in result.stdout.splitlines():
        author, mark, text = line.partition("> ")
        assert mark and author in said, result.stdout
        said[author] += text
    assert said == {"web": "".join(web), "papers": "".join(papers)}


def test_run_labels_an_agent_used_as_a_tool_under_its_call(tmp_path: Path,
                                                           env: dict[str, str]) -> None:
    """The research example's root is a SequentialAgent: a ParallelAgent of two searchers,
    then a writer that calls fact_checker (AgentTool), whose lines go under the call."""
    script = Path(__file__).resolve().parents[1] / "examples" / "research.py"
    result = hw("run", str(script), "Research rivers", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  fact_checker> The claim is supported (2 sources)." in lines
    assert any(line.startswith("  [tool call] check_claim(") for line in lines)
    assert lines[-1].startswith("writer> Here is what the research found.")
    texts = [line.partition("> ")[0].strip() for line in lines if "> " in line
             and not line.lstrip().startswith("[")]
    assert set(texts) == {"web", "papers", "fact_checker", "writer"}


def test_run_writes_text_before_a_tool_call_on_its_own_line(tmp_path: Path,
                                                            env: dict[str, str]) -> None:
    """A lone agent that says something, then calls a tool, then answers."""
    (tmp_path / "shop.py").write_text(AGENT_FILE.replace(
        "model=DemoModel()", "model=ScriptedModel().call('lookup_order', {'order_id': '7'}, "
        "text=('Let me ', 'look.')).reply('Order 7 ', 'is due Friday.')").replace(
        "from headwater.models import DemoModel", "from headwater.testing import ScriptedModel"))
    result = hw("run", "shop.py", "Where is order 7?", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "shop> Let me look.", '[tool call] lookup_order({"order_id": "7"})',
        '[tool result] lookup_order -> {"order_id": "7", "status": "shipped", '
        '"shipped_on": "1 May", "due": "Friday"}',
        "shop> Order 7 is due Friday."]


def test_run_a_lone_agents_output_is_as_before(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "shop.py").write_text(AGENT_FILE)
    result = hw("run", "shop.py", "Where is order 7001?", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        '[tool call] lookup_order({"order_id": "7001"})\n'
        '[tool result] lookup_order -> {"order_id": "7001", "status": "shipped", '
        '"shipped_on": "1 May", "due": "Friday"}\n'
        "shop> Order 7001 shipped on 1 May and is due Friday.\n")
    (tmp_path / "broken.py").write_text(FAILING_FILE)
    result = hw("run", "broken.py", "hi", cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr
    assert result.stdout == "broken> Half\n[error] provider_error: boom\n"


@pytest.mark.parametrize(("source", "said"), [
    ('root_agent = "a pipeline"\n', "pipeline.py: `root_agent` is a str, not an agent"),
    ("from headwater import SequentialAgent\nroot_agent = SequentialAgent\n",
     "pipeline.py: `root_agent` is the class SequentialAgent, not an agent: build one, "
     "SequentialAgent(name=…)"),
    ("def agent():\n    pass\n",
     "pipeline.py: `agent` is the function agent, not an agent: call it to build the agent"),
    ("import json as agent\nroot_agent = 3\n",
     "pipeline.py: `agent` is the module json, not an agent"),
    ("root_agent = 3\n", "pipeline.py: `root_agent` is an int, not an agent"),
])
def test_run_says_what_the_file_holds_when_it_is_not_an_agent(
        source: str, said: str, tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "pipeline.py").write_text(source)
    line = one_line_error(hw("run", "pipeline.py", "hi", cwd=tmp_path, env=env))
    assert line == f"headwater run: {said}"


def test_run_takes_root_agent_when_agent_is_not_an_agent(tmp_path: Path,
                                                         env: dict[str, str]) -> None:
    (tmp_path / "pipeline.py").write_text("agent = 'the name'\n" + tree_file("SequentialAgent"))
    result = hw("run", "pipeline.py", "Write it", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "drafter> A draft of words.\neditor> An edit of the draft.\n"


BOSS_FILE = '''
from headwater import Agent
from headwater.testing import ScriptedModel

helper = Agent(name="helper", description="Looks up orders with lookup_order.",
               model=ScriptedModel().reply("Order 1042 ", "is on its way."))
root_agent = Agent(name="boss", model=ScriptedModel(), sub_agents=[helper])
'''


def test_run_model_puts_the_root_agent_on_it_and_its_agents_keep_theirs(
        tmp_path: Path, env: dict[str, str]) -> None:
    """The root's own model has no turn to play: on the demo model it transfers to helper,
    which answers on its own scripted model."""
    (tmp_path / "boss.py").write_text(BOSS_FILE)
    line = one_line_error(hw("run", "boss.py", "Where is order 1042?", cwd=tmp_path, env=env))
    assert "no scripted turn left" in line
    result = hw("run", "boss.py", "Where is order 1042?", "--model", "demo", cwd=tmp_path,
                env={**env, "HEADWATER_MODEL": "no-such-provider:x"})  # never read by run
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "helper> Order 1042 is on its way."
    (tmp_path / "pipeline.py").write_text(tree_file("SequentialAgent"))
    line = one_line_error(hw("run", "pipeline.py", "hi", "--model", "demo", cwd=tmp_path,
                             env=env))
    assert line == ("headwater run: --model sets the root agent's model; 'pipeline' is a "
                    "SequentialAgent, which calls no model (its agents run on their own models)")
    result = hw("run", "pipeline.py", "Write it", cwd=tmp_path,
                env={**env, "HEADWATER_MODEL": "no-such-provider:x"})
    assert result.returncode == 0, result.stderr  # each agent on its own model


# -- demo: the gateway on 127.0.0.1 ----------------------------------------------------------------

@pytest.mark.parametrize("command", [["demo", "--no-browser"], ["serve", "shop:app"]])
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_bad_port_is_a_usage_error(command: list[str], port: str, tmp_path: Path,
                                     env: dict[str, str]) -> None:
    result = hw(*command, "--port", port, cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "argument --port:" in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("command", [["demo", "--no-browser"], ["serve", "shop:root_agent"]])
def test_a_busy_port(command: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    import socket

    (tmp_path / "shop.py").write_text(AGENT_FILE)
    with socket.socket() as other:  # another server listens there
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        line = one_line_error(hw(*command, "--port", str(port), cwd=tmp_path, env=env))
    assert line.endswith(f"cannot listen on 127.0.0.1:{port} (Address already in use); "
                         "pass another --port")


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free() -> None:
    """A server killed with connections open leaves its port in TIME_WAIT; uvicorn can listen
    there again (SO_REUSEADDR), so the check of demo and serve must not call it "in use"."""
    import socket

    from headwater.cli._common import check_port

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the state this test is about
    check_port("127.0.0.1", port)
    with socket.socket() as other:  # a port another server listens on is still refused
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(CommandError, match="cannot listen on"):
            check_port("127.0.0.1", other.getsockname()[1])


DEMO_UP = 60  # seconds a `headwater demo` child may take to answer: a busy machine's start


def demo_up(base: str, log: Path) -> None:
    """Wait until the demo at ``base`` answers ``/healthz`` (fails with its log past DEMO_UP)."""
    import httpx

    deadline = time.monotonic() + DEMO_UP
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_demo_serves_the_example_agents_and_stops_on_sigterm(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    import signal
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "demo.log").open("wb")
    child = subprocess.Popen([sys.executable, "-m", "headwater.cli", "demo", "--no-browser",
                              "--port", str(port)], cwd=tmp_path, env=env, stdout=log,
                             stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        demo_up(base, tmp_path / "demo.log")
        sid = httpx.post(f"{base}/sessions", json={}).json()["id"]  # the coordinator's
        body = httpx.post(f"{base}/sessions/{sid}/runs",
                          json={"message": "Where is order 1042?"}, timeout=30).text
        kinds = [line[len("event: "):] for line in body.splitlines()
                 if line.startswith("event: ")]
        # The coordinator's transfer, then support's call and its streamed answer.
        assert kinds[:2] == ["tool_call", "tool_result"] and kinds[-2:] == ["message", "done"]
        assert kinds.count("tool_call") == 2 and "delta" in kinds
        assert '"author":"support"' in body
        assert ('"text":"Order 1042 shipped on 30 September and is due Monday.","final":true'
                in body)
        child.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert child.wait(timeout=15) in (0, -signal.SIGTERM)
        out = (tmp_path / "demo.log").read_text()
        assert f"serving the example agents at http://127.0.0.1:{port}/" in out
        assert "Traceback" not in out
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        log.close()


def test_ctrl_c_on_the_demo_ends_an_open_stream_with_server_shutdown(
        tmp_path: Path, env: dict[str, str]) -> None:
    import signal
    import socket
    import threading

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "demo.log").open("wb")
    child = subprocess.Popen([sys.executable, "-m", "headwater.cli", "demo", "--no-browser",
                              "--port", str(port)], cwd=tmp_path,
                             env={**env, "HEADWATER_DEMO_WORD_DELAY": "0.2"}, stdout=log,
                             stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        base = f"http://127.0.0.1:{port}"
        demo_up(base, tmp_path / "demo.log")
        sid = httpx.post(f"{base}/sessions", json={"agent": "coordinator"}).json()["id"]

        def read() -> None:
            with httpx.stream("POST", f"{base}/sessions/{sid}/runs", timeout=30,
                              json={"message": "Tell me a long story"}) as response:
                lines.extend(response.iter_lines())

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 20
        while lines.count("event: delta") < 2:  # the story is streaming
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=15) == 130
        reader.join(15)
        assert not reader.is_alive()
        events = [i for i, line in enumerate(lines) if line.startswith("event: ")]
        assert lines[events[-1]] == "event: error"
        assert '"code":"server_shutdown"' in lines[events[-1] + 1]
        out = (tmp_path / "demo.log").read_text()
        assert "Traceback" not in out and "CancelledError" not in out, out
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        log.close()
