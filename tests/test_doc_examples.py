"""Every Python example of README.md and docs/*.md runs as written, for several turns.

Each fenced ``python`` block of those pages is an example, unless the line
before its fence is ``<!-- fragment: why -->``: a piece of a program that
cannot run alone (a signature, a pattern inside an async function, code that
needs a provider's key or a package headwater does not depend on). The comment
says why, and a fragment must still be valid Python. A new block without the
comment is an example, so it runs here or fails here.

An example is written to a fresh directory as the file its first line names
(``# shop.py``), else ``example.py``, and run the ways the docs use one:

- ``python file.py`` (its ``main()`` when it has ``if __name__ == "__main__":``);
- ``headwater run file.py MESSAGE`` for each of :data:`MESSAGES`, when it
  defines ``agent`` or ``root_agent``;
- ``headwater serve module:attr`` on a free loopback port, for ``app`` and for
  an ``agent`` / ``root_agent`` (an ``Agent`` or a workflow agent), with
  :data:`MESSAGES` sent one after the other in one session over HTTP (the
  bearer token of a ``StaticTokenAuth`` it builds, as the README's ``curl``
  lines send it); each run must end ``done`` with an answer.
"""

from __future__ import annotations

import ast
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from headwater.sse import SSEDecoder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
MESSAGES = ("Where is order 1042?", "And order 2001?", "Thanks. Deploy version 2 to staging")
"""What each example is asked, in one session when served (several turns)."""

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_FRAGMENT = re.compile(r"<!-- fragment: (.*?) -->\n\Z")
_TOKEN = re.compile(r"StaticTokenAuth\(\{\s*[\"']([^\"']+)[\"']")
AGENT_NAMES = ("agent", "root_agent")


@dataclass(frozen=True)
class Block:
    """One fenced ``python`` block of a page."""

    page: str
    line: int
    code: str
    fragment: str | None  # why it cannot run alone; None: an example

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def filename(self) -> str:
        named = re.match(r"# (\w+\.py)\n", self.code)
        return named.group(1) if named else "example.py"

    def names(self) -> dict[str, str]:
        """The module-level names it assigns, each with the callable that built it."""
        built = {}
        for node in ast.parse(self.code).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                callee = func.id if isinstance(func, ast.Name) else ast.unparse(func)
                built.update({t.id: callee for t in node.targets if isinstance(t, ast.Name)})
        return built


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            before = text[:match.start()]
            marker = _FRAGMENT.search(before)
            found.append(Block(str(page.relative_to(ROOT)), before.count("\n") + 1,
                               match.group(1), marker.group(1).strip() if marker else None))
    return found


BLOCKS = blocks()
EXAMPLES = [b for b in BLOCKS if b.fragment is None]
FRAGMENTS = [b for b in BLOCKS if b.fragment is not None]


def test_the_pages_have_examples_and_each_fragment_says_why() -> None:
    assert {b.page for b in EXAMPLES} >= {"README.md", "docs/multi-agent.md"}
    for block in FRAGMENTS:
        assert len(block.fragment or "") > 15, f"{block.id}: say why it cannot run alone"


@pytest.mark.parametrize("block", FRAGMENTS, ids=lambda b: b.id)
def test_a_fragment_is_valid_python(block: Block) -> None:
    compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True)


# -- running an example -----------------------------------------------------------------------


@pytest.fixture
def env(child_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """No HEADWATER_* from outside; the demo model at full speed; sessions in the tmp dir."""
    clean = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    return {**clean, "HEADWATER_DEMO_WORD_DELAY": "0",
            "HEADWATER_DATABASE_URL": f"sqlite:///{tmp_path / 'sessions.db'}"}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=30, check=False)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def served(target: str, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """``headwater serve target`` on a free loopback port: its base URL, once it answers."""
    port = free_port()
    log = cwd / f"serve-{target.replace(':', '-')}.log"
    with log.open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "serve", target, "--port", str(port),
             "--log-level", "warning"], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert child.poll() is None, f"serve {target} exited:\n{log.read_text()}"
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"serve {target} did not come up:\n" \
                                                f"{log.read_text()}"
            time.sleep(0.05)
        yield url
    finally:
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


def converse(url: str, headers: dict[str, str]) -> list[list[tuple[str, str]]]:
    """:data:`MESSAGES` in one new session: each run's frames as (event, data)."""
    runs = []
    with httpx.Client(base_url=url, headers=headers, timeout=20) as client:
        created = client.post("/sessions", json={})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        for message in MESSAGES:
            response = client.post(f"/sessions/{sid}/runs", json={"message": message})
            assert response.status_code == 200, response.text
            decoder = SSEDecoder()
            events = decoder.feed(response.content) + decoder.flush()
            runs.append([(e.event, e.data) for e in events])
    return runs


def ways(block: Block) -> list[str]:
    """How the docs run ``block``: ``script``, ``run`` (``headwater run``), ``serve:<attr>``."""
    names = block.names()
    found = ["script"]
    if names.keys() & set(AGENT_NAMES):
        found.append("run")
    found += [f"serve:{name}" for name in ("app", *AGENT_NAMES)
              if names.get(name) in (("create_app",) if name == "app" else AGENT_KINDS)]
    return found


AGENT_KINDS = ("Agent", "SequentialAgent", "ParallelAgent", "LoopAgent")
"""What an example's ``agent`` / ``root_agent`` is built with, for ``headwater serve``."""

RUNS = [(block, way) for block in EXAMPLES for way in ways(block)]


def test_every_example_is_a_whole_program() -> None:
    for block in EXAMPLES:
        assert ways(block) != ["script"] or "__main__" in block.code, (
            f"{block.id} neither defines an agent or an app nor has a main: as a script it "
            "only defines names, which shows nothing; make it a whole example or mark it "
            "<!-- fragment: why -->")


@pytest.mark.parametrize(("block", "way"), RUNS, ids=[f"{b.id}-{w}" for b, w in RUNS])
def test_the_example_runs_as_written(block: Block, way: str, tmp_path: Path,
                                     env: dict[str, str]) -> None:
    path = tmp_path / block.filename
    path.write_text(block.code, encoding="utf-8")
    if way == "script":
        script = run([sys.executable, path.name], tmp_path, env)
        assert script.returncode == 0, f"python {path.name}:\n{script.stderr}"
        assert "Traceback" not in script.stderr, script.stderr
    elif way == "run":  # a new process and session each time: headwater run has no --session
        for message in MESSAGES[:2]:
            result = run([sys.executable, "-m", "headwater.cli", "run", path.name, message],
                         tmp_path, env)
            assert result.returncode == 0, f"headwater run {message!r}:\n{result.stderr}"
            assert result.stderr == "", result.stderr
            assert result.stdout.strip(), f"headwater run {message!r} wrote nothing"
    else:
        name = way.removeprefix("serve:")
        token = _TOKEN.search(block.code) if name == "app" else None
        headers = {"Authorization": f"Bearer {token.group(1)}"} if token else {}
        target = f"{path.stem}:{name}"
        with served(target, tmp_path, env) as url:
            for index, frames in enumerate(converse(url, headers), start=1):
                kinds = [kind for kind, _ in frames]
                assert kinds[-1] == "done", f"serve {target}, message {index}: {frames}"
                answers = [json.loads(data)["text"] for kind, data in frames
                           if kind == "message"]
                assert any(answers), f"serve {target}, message {index}: no answer: {frames}"
