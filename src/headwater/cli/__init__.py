"""The ``headwater`` command.

Only the standard library loads before a command runs, so ``--help`` answers
at once; each command imports what it needs. Bad input (a malformed or
unreachable ``--db``, an unwritable path, a file that is not a database, a bad
``HEADWATER_*`` setting, a missing optional driver, a busy port) ends with one
line on stderr and exit code 2, never a traceback. A reader of stdout that
leaves early (``| head``) ends the command quietly, with exit code 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._common import DEMO_APPS, DEMO_USER
from ._common import CommandError as CommandError
from ._demo import demo_app as demo_app

MODEL_STRINGS = """\
    openai:gpt-4o-mini                 needs OPENAI_API_KEY (OPENAI_BASE_URL: another root)
    openai-responses:gpt-4o-mini       the Responses API; needs OPENAI_API_KEY
    anthropic:claude-3-5-haiku-latest  needs ANTHROPIC_API_KEY
    gemini:gemini-2.0-flash            needs GEMINI_API_KEY (or GOOGLE_API_KEY)
    vertex:<model>[@<project>/<loc>]   needs GOOGLE_CLOUD_ACCESS_TOKEN (project and
                                       location else GOOGLE_CLOUD_PROJECT/_LOCATION)
    openai-compatible:<model>@<url>    Ollama, vLLM, llama.cpp, …
                                       (OPENAI_COMPATIBLE_API_KEY if the server wants one)
    demo                               the offline demo model (scripted, no key)
"""

ENVIRONMENT = """\
environment:
  HEADWATER_DATABASE_URL   session store (default sqlite:///.headwater/sessions.db)
  HEADWATER_MODEL          model string (see above)
  HEADWATER_DEMO_WORD_DELAY  seconds between the demo model's words (default 0.03)
"""

MODELS_EPILOG = """\
models:
  --model (or HEADWATER_MODEL) takes a model string; without one the agents run
  on the offline demo model ("demo": scripted, keyword-driven, no key).
""" + MODEL_STRINGS + "\n" + ENVIRONMENT

SERVE_EPILOG = """\
models:
  Served agents run on their own models; --model puts every agent of an Agent or
  a list of agents on one model string instead (HEADWATER_MODEL is not read here).
""" + MODEL_STRINGS + """
environment (docs/deployment.md):
  HEADWATER_DATABASE_URL   the session store (--db)
  HEADWATER_REDIS_URL      the Redis replicas share (--redis-url)
  HEADWATER_AUTH_TOKENS    token=user pairs, or a file of them: the served agents'
                           bearer tokens
  HEADWATER_JWT_KEY (or _KEY_FILE), HEADWATER_JWT_ALGORITHMS, HEADWATER_JWT_AUDIENCE,
  HEADWATER_JWT_ISSUER     JSON Web Tokens instead (user id: HEADWATER_JWT_USER_CLAIM,
                           default sub)
  An Agent target with either is served with that auth (not dev mode, so it may
  bind any address); an app keeps its own auth.
"""

RUN_EPILOG = """\
agents:
  The root may be any agent: an Agent, or a SequentialAgent, ParallelAgent or
  LoopAgent over others (docs/multi-agent.md). Each agent's text is labelled
  `name>`; when several speak, each goes on lines of its own, and an agent used
  as a tool writes under its call.

models:
  The agents run on the models their file gives them. --model runs the root
  agent on this model string instead ("demo": the offline demo model); the
  agents under it (sub-agents, agents used as tools) keep their own models. A
  workflow root calls no model, so --model is refused for it: give its agents
  their models in the file. HEADWATER_MODEL is not read here.
""" + MODEL_STRINGS

CHAT_EPILOG = """\
in the chat:
  Ctrl-C during an answer stops the run (the page's Stop); Ctrl-C or Ctrl-D at the
  prompt leaves. Commands: /new, /agent NAME, /agents, /session, /help, /quit.
  --model and --db configure the embedded server; a gateway at --url has its own.
"""

_DB_HELP = ("session store URL, e.g. sqlite:///path.db or postgresql://… "
            "(default: HEADWATER_DATABASE_URL or sqlite:///.headwater/sessions.db)")


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (a bad one is a usage error, exit code 2)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port


def _workers(text: str) -> int:
    """An argparse type: a number of worker processes, at least 1."""
    try:
        workers = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of workers: {text!r}") from None
    if workers < 1:
        raise argparse.ArgumentTypeError(f"at least 1 worker, not {workers}")
    return workers


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="URL", help=_DB_HELP)


def _add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, metavar="M",
                        help="model string, e.g. openai:gpt-4o-mini (default: HEADWATER_MODEL, "
                             "else the offline demo model)")


def _add_cors_origin(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                        help="let pages of this origin (scheme://host[:port]) call the gateway "
                             "from a browser; repeat for more (default: none; sets "
                             "HEADWATER_CORS_ORIGINS)")


if TYPE_CHECKING:  # the sub-command table, as typeshed names it
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="headwater", formatter_class=formatter, epilog=MODELS_EPILOG,
        description="headwater: a streaming-first agent kit. Start with `headwater demo`.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _demo_command(commands)
    _chat_command(commands)
    _run_command(commands)
    _sessions_command(commands)
    _db_command(commands)
    _serve_command(commands)
    _mcp_command(commands)
    return parser


def _demo_command(commands: _Commands) -> None:
    """``headwater demo``: the example agents and their page."""
    formatter = argparse.RawDescriptionHelpFormatter
    demo = commands.add_parser(
        "demo", formatter_class=formatter, epilog=MODELS_EPILOG,
        help="serve the example agents and their web page on 127.0.0.1",
        description="Start the gateway on 127.0.0.1 with the example agents (a coordinator "
                    "that hands each request to support, docs, deploy, market, people or "
                    "indexer, whose tools come from an MCP server) on "
                    "the offline demo model and SQLite under .headwater/, print the URL and "
                    "open a browser. Ctrl-C stops it.")
    demo.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")
    demo.add_argument("--no-browser", action="store_true", help="do not open a browser")
    _add_db(demo)
    _add_model(demo)
    _add_cors_origin(demo)
    demo.add_argument("--terminal", action="store_true",
                      help="instead of serving, run one support turn in the terminal")
    demo.add_argument("--prompt", default="Where is order 1042?",
                      help="the message of --terminal (default: %(default)s)")
    demo.add_argument("--mode", choices=["sse", "none"], default="sse",
                      help="streaming mode of --terminal: sse streams deltas (default)")


def _chat_command(commands: _Commands) -> None:
    """``headwater chat``: a chat in the terminal."""
    formatter = argparse.RawDescriptionHelpFormatter
    chat = commands.add_parser(
        "chat", formatter_class=formatter, epilog=CHAT_EPILOG + "\n" + MODELS_EPILOG,
        help="chat with the agents in the terminal (the demo's, or a gateway's at --url)",
        description="An interactive chat in the terminal. Without --url it serves the demo's\n"
                    "agents (a coordinator over support, docs, deploy, market, people and\n"
                    "indexer; SQLite under .headwater/; the offline demo model or --model)\n"
                    "on a "
                    "free 127.0.0.1 port and talks to them over HTTP; with --url it talks\n"
                    "to a running gateway. Answers stream as they come, tools show their\n"
                    "progress, approvals are asked inline.")
    chat.add_argument("--agent", default=None, metavar="NAME",
                      help="the agent to talk to (default: the gateway's first; the demo's "
                           "are coordinator, market and people)")
    chat.add_argument("--url", default=None, metavar="URL",
                      help="a running gateway, e.g. http://127.0.0.1:8000 (default: serve "
                           "the demo's agents in this process)")
    chat.add_argument("--token", default=None, metavar="TOKEN",
                      help="bearer token for a gateway with auth (sent as Authorization: "
                           "Bearer)")
    chat.add_argument("--session", default=None, metavar="ID",
                      help="go on with this session (its agent, its history, an approval it "
                           "waits for); default: a new session")
    _add_model(chat)
    _add_db(chat)


def _run_command(commands: _Commands) -> None:
    """``headwater run``: one run of an agent file."""
    formatter = argparse.RawDescriptionHelpFormatter
    run = commands.add_parser(
        "run", formatter_class=formatter, epilog=RUN_EPILOG,
        help="stream one run of an agent file to stdout",
        description="Load path/to/agent.py (its `agent`, else `root_agent`: any agent, the "
                    "root of a tree too) and stream one run of MESSAGE to stdout. Exit code 1 "
                    "when the run ends in an error.")
    run.add_argument("path", help="a Python file defining `agent` or `root_agent`")
    run.add_argument("message", help="the user's message")
    run.add_argument("--json", action="store_true",
                     help="one JSON object per event (type, author, text, partial, …)")
    run.add_argument("--model", default=None, metavar="M",
                     help="run the root agent on this model string, e.g. "
                          "openai:gpt-4o-mini (default: the model the agent file gives it)")
    _add_db(run)


def _sessions_command(commands: _Commands) -> None:
    """``headwater sessions``: the stored sessions."""
    sessions = commands.add_parser(
        "sessions", help="list, show or delete stored sessions",
        description="Work with the session store: list sessions, show one's events, delete one.")
    sessions.add_argument("action", nargs="?", choices=["list", "show", "delete"],
                          default="list", help="what to do (default: list)")
    sessions.add_argument("session_id", nargs="?", metavar="ID",
                          help="the session (for show and delete)")
    _add_db(sessions)
    sessions.add_argument("--app", action="append", default=None, metavar="NAME",
                          help="only this app's sessions (an agent's name; repeat for more; "
                               "default: the demo's agents, " + ", ".join(DEMO_APPS) + ")")
    sessions.add_argument("--user", default=DEMO_USER, help="user id (default: %(default)s)")


def _db_command(commands: _Commands) -> None:
    """``headwater db``: the session database's schema."""
    db = commands.add_parser(
        "db", help="upgrade the session database's schema, or show its revision",
        description="The session store's schema (Alembic revisions). upgrade: bring it to the "
                    "newest revision (idempotent; an empty database gets its tables, one made "
                    "before migrations is stamped and upgraded) and print the revision "
                    "reached. current: print its revision.")
    db.add_argument("action", choices=["upgrade", "current"], help="what to do")
    _add_db(db)


def _serve_command(commands: _Commands) -> None:
    """``headwater serve``: an app or agents over HTTP."""
    formatter = argparse.RawDescriptionHelpFormatter
    serve = commands.add_parser(
        "serve", formatter_class=formatter, epilog=SERVE_EPILOG,
        help="serve an app, an agent or a list of agents over HTTP (uvicorn)",
        description="Serve module:attr (a FastAPI/ASGI app, an agent of any kind or a list "
                    "of agents). Replicas behind a proxy: docs/deployment.md.")
    serve.add_argument("target", help="module:attr naming a FastAPI/ASGI app, an Agent "
                                      "or a list of agents")
    serve.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s)")
    serve.add_argument("--port", type=_port, default=8000, help="port (default: %(default)s)")
    serve.add_argument("--reload", action="store_true", help="restart on code changes")
    serve.add_argument("--workers", type=_workers, default=1, metavar="N",
                       help="worker processes sharing the port; more than 1 needs "
                            "--redis-url (default: %(default)s)")
    serve.add_argument("--db", default=None, metavar="URL",
                       help="session store URL, e.g. postgresql+asyncpg://user@host/db or "
                            "sqlite:///path.db (default: HEADWATER_DATABASE_URL or "
                            "sqlite:///.headwater/sessions.db); checked before serving")
    serve.add_argument("--redis-url", default=None, metavar="URL",
                       help="a Redis shared by the gateway's replicas, e.g. "
                            "redis://127.0.0.1:6379/0: run frames, runs and cancels across "
                            "them (default: HEADWATER_REDIS_URL, else all in the process)")
    serve.add_argument("--insecure-dev", action="store_true",
                       help="allow a gateway without auth on a non-loopback address")
    serve.add_argument("--model", default=None, metavar="M",
                       help="run every served agent on this model string, e.g. "
                            "openai:gpt-4o-mini (an Agent or a list of agents only; default: "
                            "each agent's own model)")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug"],
                       help="uvicorn's log level (default: %(default)s)")
    _add_cors_origin(serve)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``headwater`` console script; returns the exit code."""
    parser = _parser()
    args: Any = parser.parse_args(argv)
    if args.version:
        import importlib.metadata

        print(f"headwater {importlib.metadata.version('headwater')}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    command: Callable[[Any], int]
    if args.command == "demo":
        from ._demo import demo_command as command
    elif args.command == "chat":
        from ._chat import chat_command as command
    elif args.command == "run":
        from ._run import run_command as command
    elif args.command == "sessions":
        from ._sessions import sessions_command as command
    elif args.command == "db":
        from ._db import db_command as command
    elif args.command == "mcp":
        from ._mcp import mcp_command as command
    else:
        from ._serve import serve_command as command
    return _guarded(command, args)


def _guarded(command: Callable[[Any], int], args: Any) -> int:
    """Run ``command``; bad input becomes one line on stderr and exit code 2."""
    from ._errors import describe

    try:
        code = command(args)
        sys.stdout.flush()  # a reader that left (`| head`) shows here, not at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _stdout_gone()
        return 0
    except Exception as exc:
        line = describe(exc)
        if line is None:
            raise
        print(f"headwater {args.command}: {line}", file=sys.stderr)
        return 2


def _stdout_gone() -> None:
    """The reader of stdout left (``headwater sessions | head``): not an error, and nothing
    more to say; what is still buffered goes nowhere (not to a "Broken pipe" at exit)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


MCP_EPILOG = """\
what a client sees:
  one tool, named after the agent, with input {"message": string, "session_id"?: string}.
  While it runs, what the agent streams comes as progress notifications (each message
  the answer so far, or a tool's progress line); the result is its final text, and its
  _meta (and structuredContent) carry the session id to go on with. A cancel from the
  client stops the run, recorded cancelled. Sessions are the local user's
  (headwater sessions --app NAME lists them). Nothing but MCP goes to stdout.

a client's configuration (Claude Desktop, an IDE):
  {"mcpServers": {"shop": {"command": "headwater", "args": ["mcp", "/path/to/agent.py"]}}}

the MCP Inspector:
  npx @modelcontextprotocol/inspector headwater mcp agent.py

over HTTP: headwater serve serves the same at /mcp, under the gateway's auth
(docs/mcp.md). Needs the MCP SDK: pip install "headwater[mcp]".
"""


def _mcp_command(commands: _Commands) -> None:
    """``headwater mcp``: an agent file as an MCP server over stdio."""
    formatter = argparse.RawDescriptionHelpFormatter
    mcp = commands.add_parser(
        "mcp", formatter_class=formatter, epilog=MCP_EPILOG,
        help="serve an agent file as an MCP tool over stdio (for MCP clients)",
        description="Load path/to/agent.py (its `agent`, else `root_agent`: any agent) and "
                    "serve it over stdin/stdout as an MCP server whose one tool is the agent. "
                    "An MCP client starts this command; it runs until the client closes "
                    "stdin.")
    mcp.add_argument("path", help="a Python file defining `agent` or `root_agent`")
    mcp.add_argument("--model", default=None, metavar="M",
                     help="run the root agent on this model string, e.g. openai:gpt-4o-mini "
                          "(default: the model the agent file gives it)")
    _add_db(mcp)
