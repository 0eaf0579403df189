"""The front door a new user meets: create_session, text(), run_once, aclose, clear refusals."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.errors import UserError
from headwater.sessions import SqlSessionService
from headwater.testing import ScriptedModel
from headwater.types import Content, Usage

ROOT = Path(__file__).resolve().parents[1]
SSE = RunConfig(streaming_mode=StreamingMode.SSE)


def lookup_order(order_id: str) -> dict[str, str]:
    """Find an order.

    Args:
        order_id: the order number.
    """
    return {"status": "shipped", "due": "Monday"}


def support_model() -> ScriptedModel:
    return (ScriptedModel().call("lookup_order", {"order_id": "1042"})
            .reply("Order 1042 ", "is due ", "Monday."))


def make_runner(model: ScriptedModel | None = None) -> Runner:
    agent = Agent(name="support", model=model or support_model(), tools=[lookup_order])
    return Runner(agent=agent, app_name="shop")


async def test_create_session_uses_the_runners_app() -> None:
    runner = make_runner()
    session = await runner.create_session(user_id="u1", state={"tier": "gold"})
    found = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                     session_id=session.id)
    assert found is not None and found.state == {"tier": "gold"}


@pytest.mark.parametrize("mode", [StreamingMode.SSE, StreamingMode.NONE])
async def test_text_gives_the_answer_once_in_every_mode(mode: StreamingMode) -> None:
    runner = make_runner()
    session = await runner.create_session(user_id="u1")
    stream = runner.run_async(user_id="u1", session_id=session.id,
                              new_message="Where is order 1042?",
                              run_config=RunConfig(streaming_mode=mode))
    pieces = [piece async for piece in stream.text()]
    assert "".join(pieces) == "Order 1042 is due Monday."
    if mode is StreamingMode.SSE:
        assert pieces == ["Order 1042 ", "is due ", "Monday."]
    else:
        assert pieces == ["Order 1042 is due Monday."]


async def test_closing_text_early_closes_the_run() -> None:
    model = ScriptedModel().reply("one ", "two ", "three")
    runner = make_runner(model)
    session = await runner.create_session(user_id="u1")
    stream = runner.run_async(user_id="u1", session_id=session.id, new_message="count",
                              run_config=SSE)
    texts = stream.text()
    assert await anext(texts) == "one "
    await texts.aclose()
    assert model.streams[0].closed and not model.streams[0].completed


async def test_run_once_returns_the_answer_events_and_usage() -> None:
    model = (ScriptedModel().call("lookup_order", {"order_id": "1042"}, usage=Usage(10, 2, 12))
             .reply("Due Monday.", usage=Usage(20, 3, 23)).reply("You're welcome."))
    runner = make_runner(model)
    result = await runner.run_once(user_id="u1", new_message="Where is order 1042?")
    assert result.text == "Due Monday."
    assert result.final is not None and result.final.is_final_response()
    assert result.usage == Usage(30, 5, 35)
    assert result.error_code is None
    assert [e.author for e in result.events] == ["support", "support", "support"]
    again = await runner.run_once(user_id="u1", session_id=result.session_id,
                                  new_message="thanks")
    assert (again.text, again.session_id) == ("You're welcome.", result.session_id)
    contents = model.requests[-1].contents
    assert [c.role for c in contents] == ["user", "model", "user", "model", "user"]


@pytest.mark.parametrize("message", ["", "   ", Content("user", [])])
def test_an_empty_message_is_refused_at_once(message: str | Content) -> None:
    runner = make_runner()
    with pytest.raises(UserError, match="empty"):
        runner.run_async(user_id="u1", session_id="s", new_message=message)


async def test_async_with_runner_releases_the_sqlite_store(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    async with Runner(agent=Agent(name="support", model=support_model(), tools=[lookup_order]),
                      app_name="shop",
                      session_service=SqlSessionService(f"sqlite+aiosqlite:///{db}")) as runner:
        result = await runner.run_once(user_id="u1", new_message="Where is order 1042?")
        assert result.text == "Order 1042 is due Monday."
    assert db.exists()
    assert not (tmp_path / "shop.db-wal").exists()  # the last connection closed, checkpointed


def run_script(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
def test_an_error_in_the_callers_loop_leaves_one_traceback_and_a_sealed_history(
        tmp_path: Path) -> None:
    result = run_script(f"""
        import asyncio
        from headwater import Agent, Runner, RunConfig, StreamingMode
        from headwater.sessions import SqlSessionService
        from headwater.testing import ScriptedModel

        async def slow(x: int) -> int:
            "Takes a while."
            await asyncio.sleep(30)
            return x

        async def main():
            model = ScriptedModel().call("slow", {{"x": 1}}).reply("never")
            service = SqlSessionService("sqlite+aiosqlite:///{tmp_path}/s.db")
            runner = Runner(agent=Agent(name="a", model=model, tools=[slow]), app_name="app",
                            session_service=service, auto_create_session=True)
            async for event in runner.run_async(user_id="u", session_id="s",
                                                new_message="go",
                                                run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
                if event.function_calls:
                    raise ValueError("the caller's own bug")

        asyncio.run(main())
    """, tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("Traceback") == 1, result.stderr
    assert "ValueError: the caller's own bug" in result.stderr
    assert "generator didn't stop" not in result.stderr
    check = run_script(f"""
        import asyncio
        from headwater.sessions import SqlSessionService

        async def main():
            service = SqlSessionService("sqlite+aiosqlite:///{tmp_path}/s.db")
            session = await service.get_session(app_name="app", user_id="u", session_id="s")
            print([r.response.get("code") for e in session.events for r in e.function_responses])
            await service.close()

        asyncio.run(main())
    """, tmp_path)
    assert check.stdout.strip() == "['cancelled']", check.stderr


@pytest.mark.slow
def test_mypy_catches_a_misspelled_callback_parameter(tmp_path: Path) -> None:
    source = tmp_path / "agent_app.py"
    source.write_text(textwrap.dedent("""
        from headwater import Agent
        from headwater.context import CallbackContext
        from headwater.models import LlmRequest, LlmResponse

        def good(*, callback_context: CallbackContext, llm_request: LlmRequest) -> None:
            return None

        def misspelled(*, callback_context: CallbackContext, llm_requests: LlmRequest
                       ) -> LlmResponse | None:
            return None

        Agent(name="a", model="scripted:x", before_model_callback=good)
        Agent(name="a", model="scripted:x", before_model_callback=misspelled)
    """))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), str(source)],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout
    assert "agent_app.py:14" in errors[0] and "before_model_callback" in errors[0]


@pytest.mark.slow
def test_the_readme_example_prints_the_answer_once(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    example = next(b for b in blocks if "asyncio.run(main())" in b)
    result = run_script(example, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("is due Monday") == 1, result.stdout
