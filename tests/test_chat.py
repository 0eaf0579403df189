"""``headwater chat`` in a pseudo-terminal, as a person uses it.

Each test runs ``python -m headwater chat`` under pexpect in a temporary
directory (its SQLite file under .headwater/), on the embedded demo app or
against a real ``headwater serve`` on a loopback port, and reads what the
terminal shows (ANSI styling stripped for the checks).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.errors import ERRORS

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")]

PROMPT = r"you>(?:\x01?\x1b\[[0-9;]*m\x02?)* "
ANSWER_1042 = "Order 1042 shipped on 30 September and is due Monday."
TIMEOUT = 30  # generous: a loaded 2-core machine; expect() returns as soon as the text shows
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x01\x02]")


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    """No HEADWATER_* or provider keys from outside; the demo model quick; a colour terminal."""
    clean = {k: v for k, v in child_env.items()
             if not k.startswith(("HEADWATER_", "GOOGLE_")) and not k.endswith("_API_KEY")}
    return {**clean, "HEADWATER_DEMO_WORD_DELAY": "0.002", "TERM": "xterm-256color",
            "COLUMNS": "120", "LINES": "40"}


class Terminal:
    """A ``headwater chat`` child in a pty, and everything it has shown."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str],
                 typed_first: Path | None = None) -> None:
        self.log = io.StringIO()
        command = [sys.executable, "-m", "headwater", "chat", *args]
        if typed_first is not None:  # its lines come first on standard input, then the pty's
            command = ["/bin/sh", "-c", f'cat "$0" - | {shlex.join(command)}', str(typed_first)]
        self.child = pexpect.spawn(command[0], command[1:], cwd=str(cwd), env=env,
                                   encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 120))
        self.child.logfile_read = self.log

    def expect(self, pattern: str) -> str:
        """Wait for ``pattern`` (a regex); returns what came before it, unstyled."""
        self.child.expect(pattern)
        return plain(self.child.before)

    def say(self, text: str) -> str:
        """Send a line and wait for the next prompt; returns what the run showed, unstyled."""
        self.child.sendline(text)
        return self.expect(PROMPT)

    @property
    def shown(self) -> str:
        return plain(self.log.getvalue())

    def exit_code(self) -> int:
        self.child.expect(pexpect.EOF)
        self.child.close()
        status: int = self.child.exitstatus
        return status

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def plain(text: str) -> str:
    return _ANSI.sub("", text).replace("\r\n", "\n")


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def chat(terminals: list[Terminal], *args: str, cwd: Path, env: dict[str, str],
         typed_first: Path | None = None) -> Terminal:
    terminal = Terminal(list(args), cwd, env, typed_first)
    terminals.append(terminal)
    return terminal


def hw(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headwater", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def session_of(shown: str) -> str:
    found = re.findall(r"new session ([0-9a-f]+) ", shown)
    assert found, shown
    return found[-1]


# -- the embedded demo ---------------------------------------------------------------------------

def test_an_answer_is_shown_once(tmp_path: Path, env: dict[str, str],
                                 terminals: list[Terminal]) -> None:
    term = chat(terminals, cwd=tmp_path, env=env)
    banner = term.expect(PROMPT)
    assert "embedded server http://127.0.0.1:" in banner
    assert "agent coordinator · model demo" in banner
    shown = term.say("Where is order 1042?")  # the coordinator hands it to support
    assert "→ calls transfer_to_agent" in shown
    assert "→ calls lookup_order" in shown
    assert "✓ lookup_order answered" in shown
    assert f"support> {ANSWER_1042}\n" in shown
    assert shown.count("Order 1042") == 1  # streamed once; the message frame replaced the draft
    assert re.search(r"tokens: \d+ in, \d+ out", shown)
    term.child.sendeof()
    assert term.exit_code() == 0
    assert "Task was destroyed" not in term.shown and "Traceback" not in term.shown
    assert (tmp_path / ".headwater" / "sessions.db").is_file()
    assert f"headwater chat --session {session_of(term.shown)}" in term.shown.replace("\n", " ")


def test_an_approval_inside_an_agent_used_as_a_tool_is_asked_and_resumes_it(
        tmp_path: Path, env: dict[str, str], terminals: list[Terminal]) -> None:
    """The release agent calls the deployer agent as a tool; its deploy asks (issue 30)."""
    term = chat(terminals, cwd=tmp_path, env=env)
    term.expect(PROMPT)
    term.child.sendline("Release version 3 to staging")
    asked = term.expect(r"Approve deploy version 3 to staging\? \[y/n\]")
    assert "→ calls deployer" in asked and "→ calls deploy" in asked
    assert "deploy needs your approval: deploy version 3 to staging" in asked
    shown = term.say("y")
    assert "deployer> Version 3 is live on staging.\n" in shown
    assert "release> deployer says: Version 3 is live on staging.\n" in shown
    assert shown.count("release> ") == 1
    term.child.sendline("/quit")
    assert term.exit_code() == 0
    assert "Traceback" not in term.shown


def test_an_approval_is_asked_and_the_deploy_reports_progress(
        tmp_path: Path, env: dict[str, str], terminals: list[Terminal]) -> None:
    term = chat(terminals, cwd=tmp_path, env=env)
    term.expect(PROMPT)
    term.child.sendline("Deploy version 2 to staging")  # to deploy, through the coordinator
    # The deploy tool's approval_summary says what is approved.
    asked = term.expect(r"Approve deploy version 2 to staging\? \[y/n\]")
    assert "→ calls deploy" in asked
    assert "deploy needs your approval: deploy version 2 to staging" in asked
    shown = term.say("y")
    assert "5/5 verify" in shown and "100%" in shown  # the bar, full
    assert "✓ deploy answered" in shown
    assert "deploy> Version 2 is live on staging.\n" in shown  # no "(live)" tacked on
    assert "(live)" not in shown
    assert shown.count("is live on staging") == 1
    # No: the tool does not run, and the model is told (deploy, which answered, takes it).
    term.child.sendline("Deploy version 3 to production")
    term.expect(r"Approve deploy version 3 to production\? \[y/n\]")
    term.child.sendline("maybe")  # asked again until it is a yes or a no
    term.expect(r"Approve deploy version 3 to production\? \[y/n\]")
    shown = term.say("n")
    assert "✗ deploy denied" in shown and "failed" not in shown
    assert "the deploy call was denied" in shown
    assert "3/5" not in shown
    term.child.sendline("/quit")
    assert term.exit_code() == 0


def test_ctrl_c_stops_the_run_and_the_chat_goes_on(tmp_path: Path, env: dict[str, str],
                                                   terminals: list[Terminal]) -> None:
    env = {**env, "HEADWATER_DEMO_WORD_DELAY": "0.05"}  # the story takes ~35 s at this pace
    term = chat(terminals, cwd=tmp_path, env=env)
    term.expect(PROMPT)
    term.child.sendline("Tell me a long story")
    term.expect("Once upon a time")
    started = time.monotonic()
    term.child.sendintr()
    term.expect(r"stopped:(?:\x1b\[[0-9;]*m)* The run was cancelled\. \(cancelled\)")
    term.expect(PROMPT)
    assert time.monotonic() - started < 10
    shown = term.say("Where is order 1042?")  # still running, and the session takes a run
    assert ANSWER_1042 in shown
    assert "word for word" not in term.shown  # the story's end never came
    term.child.sendintr()  # Ctrl-C at the prompt leaves
    assert term.exit_code() == 0
    session = session_of(term.shown)
    history = hw("sessions", "show", session, cwd=tmp_path, env=env)
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert lines[1].endswith("user: Tell me a long story")
    assert "coordinator: Once upon a time" in lines[2]  # a story is the coordinator's own
    assert lines[3].endswith("coordinator: error cancelled")
    assert lines[4].endswith("user: Where is order 1042?")
    assert lines[-1].endswith(f"support: {ANSWER_1042}")


def test_slash_commands_and_going_on_with_a_session(tmp_path: Path, env: dict[str, str],
                                                    terminals: list[Terminal]) -> None:
    term = chat(terminals, cwd=tmp_path, env=env)
    term.expect(PROMPT)
    listed = term.say("/agents")
    assert "* coordinator · model demo" in listed and "  market · model demo" in listed
    assert "agent market" in term.say("/agent market")
    assert "agent coordinator" in term.say("/agent coordinator")
    shown = term.say("Search the docs for streaming")
    assert "search_docs" in shown and "100%" in shown
    assert "I found 3 pages about streaming" in shown
    session = session_of(shown)
    assert session in term.say("/session")
    assert "no agent named 'nobody'" in term.say("/agent nobody")
    assert "unknown command" in term.say("/dance")
    term.child.sendline("/quit")
    assert term.exit_code() == 0

    again = chat(terminals, "--session", session, cwd=tmp_path, env=env)
    banner = again.expect(PROMPT)
    assert "agent coordinator" in banner
    assert f"session {session}: 6 events" in banner  # the transfer, then docs' turn
    assert "  you: Search the docs for streaming" in banner
    shown = again.say("Search the docs for approval")  # docs answered last: docs takes it
    assert "new session" not in shown  # the same session goes on
    assert "I found 1 pages about approval: Approval gates." in shown
    again.child.sendeof()
    assert again.exit_code() == 0


# -- a gateway at --url --------------------------------------------------------------------------

APP_FILE = '''
from headwater.cli import demo_app
from headwater.models import DemoModel

app = demo_app("sqlite+aiosqlite:///served.db", DemoModel())
'''

AUTH_FILE = '''
from headwater import Agent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.models import DemoModel

app = create_app(Agent(name="clerk", model=DemoModel(), instruction="Help."),
                 auth=StaticTokenAuth({"s3cret": "ann"}))
'''


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def served(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """``headwater serve`` of two apps (the demo's; one with a token) on loopback ports."""
    (tmp_path / "served_app.py").write_text(APP_FILE)
    (tmp_path / "auth_app.py").write_text(AUTH_FILE)
    with serving(["served_app:app", "auth_app:app"], tmp_path, env) as urls:
        yield " ".join(urls)


@contextlib.contextmanager
def serving(targets: list[str], cwd: Path, env: dict[str, str]) -> Iterator[list[str]]:
    """``headwater serve`` of each ``module:attr`` on a loopback port, until the block ends."""
    import httpx

    children = []
    urls = []
    for target in targets:
        port = free_port()
        log = (cwd / f"{target}.log").open("wb")
        children.append((subprocess.Popen(
            [sys.executable, "-m", "headwater", "serve", target, "--port", str(port),
             "--log-level", "warning"], cwd=cwd, env=env, stdout=log,
            stderr=subprocess.STDOUT), log))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            deadline = time.monotonic() + TIMEOUT
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        yield urls
    finally:
        for child, log in children:
            child.terminate()
            child.wait(timeout=20)
            log.close()


def test_inspect_prints_the_last_run_s_timeline_indented_by_parent(
        tmp_path: Path, env: dict[str, str], terminals: list[Terminal]) -> None:
    term = chat(terminals, cwd=tmp_path, env=env)
    term.expect(PROMPT)
    assert "no run yet" in term.say("/inspect")
    term.say("Where is order 1042?")  # the coordinator hands it to support, which looks it up
    lines = [line for line in term.say("/inspect").splitlines() if line.strip()]
    spans = [line for line in lines if re.match(r"\s*(agent|model|tool|transfer) ", line)]
    assert re.match(r"agent +coordinator  @0ms \d+ms  input_tokens=\d+", spans[0]), lines
    assert re.match(r"  model +demo  @\d+ms \d+ms  input_tokens=\d+ output_tokens=\d+", spans[1])
    assert spans[2].startswith("  tool     transfer_to_agent  @") and "status=ok" in spans[2]
    assert spans[3].startswith("  transfer coordinator → support  @")
    assert spans[4].startswith("    agent    support  @")  # under the transfer
    assert [s.split()[0] for s in spans[5:]] == ["model", "tool", "model"]
    assert all(s.startswith("      ") for s in spans[5:])  # support's calls, under its turn
    term.child.sendeof()
    assert term.exit_code() == 0


def test_chat_with_a_running_gateway(tmp_path: Path, env: dict[str, str], served: str,
                                     terminals: list[Terminal]) -> None:
    demo_url, auth_url = served.split()
    work = tmp_path / "elsewhere"
    work.mkdir()
    term = chat(terminals, "--url", demo_url, cwd=work, env=env)
    banner = term.expect(PROMPT)
    assert f"gateway {demo_url}/" in banner and "embedded" not in banner
    shown = term.say("Where is order 1042?")
    assert shown.count("Order 1042") == 1 and ANSWER_1042 in shown
    term.child.sendline("Deploy version 2 to staging")  # support hands it to deploy, a peer
    term.expect(r"Approve deploy version 2 to staging\?")
    shown = term.say("yes")
    assert "100%" in shown and "Version 2 is live on staging" in shown
    term.child.sendeof()
    assert term.exit_code() == 0
    assert not (work / ".headwater").exists()  # the gateway's store, not one of the chat's
    assert (tmp_path / "served.db").is_file()

    term = chat(terminals, "--url", auth_url, "--token", "s3cret", cwd=work, env=env)
    assert "agent clerk" in term.expect(PROMPT)
    assert "I am the demo model" in term.say("hello")
    term.child.sendeof()
    assert term.exit_code() == 0

    refused = hw("chat", "--url", auth_url, "--token", "wrong", cwd=work, env=env)
    words = ERRORS["unauthorized"].message  # the registry's words for the code
    assert one_line_error(refused).startswith(f"headwater chat: {words} (unauthorized)")


def flat(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as one space (rich wraps lines)."""
    return " ".join(text.split())


def test_a_message_too_large_says_what_the_server_answered_and_leaves_no_session(
        tmp_path: Path, env: dict[str, str], served: str, terminals: list[Terminal]) -> None:
    """1.5 MB (past ``max_body_bytes``) and 150,000 characters (past ``max_message_chars``),
    as ``cat message - | headwater chat`` sends them: each is refused in the server's words,
    which name the limit; no empty session is left, and the chat goes on."""
    demo_url, _ = served.split()
    typed = tmp_path / "typed.txt"
    typed.write_text("x" * 1_500_000 + "\n" + "y" * 150_000 + "\n")
    term = chat(terminals, "--url", demo_url, cwd=tmp_path, env=env, typed_first=typed)
    term.expect(PROMPT)
    said = flat(term.expect(PROMPT))
    assert said == (f"error: {ERRORS['payload_too_large'].message} (payload_too_large): The "
                    "request body is over this server's limit of 1,048,576 bytes.")
    said = flat(term.expect(PROMPT))
    assert said == (f"error: {ERRORS['payload_too_large'].message} (payload_too_large): The "
                    "message is over this server's limit of 100,000 characters.")
    assert "cannot reach" not in term.shown and "new session" not in term.shown
    assert sessions_of(demo_url) == []  # the sessions made for them were deleted again
    shown = term.say("Where is order 1042?")
    assert ANSWER_1042 in shown
    assert [s["title"] for s in sessions_of(demo_url)] == ["Where is order 1042?"]
    # A live agent: where it runs, on this gateway (the page, WS /live/{session}).
    note = flat(term.say("/agent market"))
    assert ("market's tools are live streams: they run only in a live session, which "
            f"headwater chat does not open; the page at {demo_url}/ opens one (Go live), and "
            f"so does a WebSocket client of {demo_url.replace('http', 'ws')}/live/<session id>."
            ) in note
    term.child.sendeof()
    assert term.exit_code() == 0


def sessions_of(url: str) -> list[dict[str, object]]:
    import httpx

    items: list[dict[str, object]] = httpx.get(f"{url}/sessions", timeout=10).json()["items"]
    return items


def test_a_live_agent_is_pointed_to_where_it_runs(tmp_path: Path, env: dict[str, str],
                                                  terminals: list[Terminal]) -> None:
    note = ("market's tools are live streams: they run only in a live session, which "
            "headwater chat does not open; headwater demo serves a page that opens one "
            "(Go live).")
    term = chat(terminals, "--agent", "market", cwd=tmp_path, env=env)
    assert note in flat(term.expect(PROMPT))
    shown = term.say("Watch GOOG")
    assert "market> Watching a price is a live stream" in shown
    assert "agent coordinator" in term.say("/agent coordinator")
    shown = flat(term.say("Watch GOOG"))  # the coordinator hands it to market, in words
    assert "⇢ coordinator handed the conversation to market market> Watching" in shown
    assert shown.endswith(note)  # after the run, once
    assert "transfer_to_agent answered" not in shown
    term.child.sendeof()
    assert term.exit_code() == 0


GATE_FILE = '''
from headwater import Agent, tool
from headwater.gateway import create_app
from headwater.testing import ScriptedModel


@tool(requires_approval=True)
def drop_table(table: str, cascade: bool = False) -> str:
    """Drop a table."""
    raise AssertionError("never approved in this test")


model = (ScriptedModel().call("drop_table", {"table": "users", "cascade": True})
         .reply("Nothing ", "dropped."))
app = create_app(Agent(name="dba", model=model, tools=[drop_table]), session_service=None)
'''
ASKED = r'Approve drop_table\(table="users", cascade=true\)\? \[y/n\]'


def test_an_approval_shows_its_arguments_and_a_late_yes_is_refused_as_superseded(
        tmp_path: Path, env: dict[str, str], terminals: list[Terminal]) -> None:
    import httpx

    (tmp_path / "gate_app.py").write_text(GATE_FILE)
    with serving(["gate_app:app"], tmp_path, env) as [url]:
        term = chat(terminals, "--url", url, cwd=tmp_path, env=env)
        term.expect(PROMPT)
        term.child.sendline("drop the users table")
        asked = term.expect(ASKED)  # what is approved: the call with its arguments
        assert 'drop_table needs your approval: drop_table(table="users", cascade=true)' in asked
        session = session_of(term.shown)
        term.close()  # left unanswered
        again = chat(terminals, "--url", url, "--session", session, cwd=tmp_path, env=env)
        again.expect(ASKED)  # asked again, from the history
        # Meanwhile another client (the page, say) sends the session a message.
        with httpx.stream("POST", f"{url}/sessions/{session}/runs",
                          json={"message": "never mind"}, timeout=TIMEOUT) as answer:
            assert answer.status_code == 200 and "Nothing dropped." in answer.read().decode()
        shown = " ".join(again.say("y").split())  # the terminal wraps long lines
        assert "Invalid request. (invalid_request)" in shown
        assert "was superseded: a later message was sent before it was answered" in shown
        again.child.sendline("/quit")
        assert again.exit_code() == 0


SHOP_FILE = '''
from headwater import Agent
from headwater.gateway import create_app
from headwater.testing import ScriptedModel

billing = Agent(name="billing", description="Invoices.",
                model=ScriptedModel().reply("Your invoice ", "is ", "paid.")
                .reply("Anything ", "else?"))
coordinator = Agent(name="coordinator", instruction="Route the user.", sub_agents=[billing],
                    model=ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"}))
app = create_app(coordinator, session_service=None)
'''


def test_a_transfer_shows_the_handover_and_labels_each_message_with_its_agent(
        tmp_path: Path, env: dict[str, str], terminals: list[Terminal]) -> None:
    (tmp_path / "shop_app.py").write_text(SHOP_FILE)
    with serving(["shop_app:app"], tmp_path, env) as [url]:
        term = chat(terminals, "--url", url, cwd=tmp_path, env=env)
        assert "agent coordinator" in term.expect(PROMPT)
        shown = term.say("Is my invoice paid?")
        assert re.search(r'→ calls transfer_to_agent\("agent_name": "billing"\) · coordinator\n'
                         r"⇢ coordinator handed the conversation to billing\n"
                         r"billing> Your invoice is paid\.\n", shown), shown
        assert "transfer_to_agent answered" not in shown and "null" not in shown
        assert shown.count("Your invoice") == 1  # the draft stood; the record was not repeated
        shown = term.say("Thanks!")  # the next turn goes to billing
        assert "billing> Anything else?\n" in shown and "coordinator>" not in shown
        term.child.sendeof()
        assert term.exit_code() == 0


# -- bad input: one line, exit code 2 ------------------------------------------------------------

def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "says"), [
    (["--model", "nope:x"], "unknown model provider 'nope'"),
    (["--model", "openai:gpt-4o-mini"], "set OPENAI_API_KEY"),
    (["--model", "anthropic:claude-3-5-haiku-latest"], "set ANTHROPIC_API_KEY"),
    (["--model", "gemini:gemini-2.0-flash"], "set GEMINI_API_KEY"),
    (["--agent", "nobody"], "no agent named 'nobody'; this gateway serves coordinator, "
                            "market, people"),
    (["--session", "0123"], "(not_found)"),
    (["--url", "ftp://example.org"], "--url must be an http:// or https:// URL"),
    (["--url", "http://127.0.0.1:9", "--model", "demo"], "--model configures the embedded"),
    (["--url", "http://127.0.0.1:9"], "cannot reach http://127.0.0.1:9/"),
])
def test_bad_input(args: list[str], says: str, tmp_path: Path, env: dict[str, str]) -> None:
    line = one_line_error(hw("chat", *args, cwd=tmp_path, env=env))
    assert line.startswith("headwater chat: ") and says in line, line
