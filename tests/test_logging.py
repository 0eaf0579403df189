"""The library leaves log output to the application (a NullHandler on "headwater")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

TOOL_RAISES = textwrap.dedent('''
    import asyncio
    import logging
    import sys

    from headwater import Agent, Runner
    from headwater.testing import ScriptedModel


    def explode() -> str:
        """Fail on purpose."""
        raise RuntimeError("boom: secret-in-message")


    async def main() -> None:
        if "--configure-logging" in sys.argv:
            logging.basicConfig(level=logging.WARNING)
        if "--debug" in sys.argv:
            logging.basicConfig(level=logging.DEBUG)
        model = ScriptedModel().call("explode").reply("It failed.")
        runner = Runner(agent=Agent(name="a", model=model, tools=[explode]), app_name="app",
                        auto_create_session=True)
        events = [e async for e in runner.run_async(user_id="u", session_id="s",
                                                    new_message="go")]
        codes = [r.response["code"] for e in events for r in e.function_responses]
        print(codes, events[-1].text)


    asyncio.run(main())
''')


def run_child(child_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", TOOL_RAISES, *args], env=child_env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
def test_a_handled_tool_error_prints_nothing_on_stderr(child_env: dict[str, str]) -> None:
    done = run_child(child_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['tool_error'] It failed.\n"
    assert done.stderr == ""  # no last-resort traceback for an error the model was told


@pytest.mark.slow
def test_an_application_that_configures_logging_sees_the_warning(
        child_env: dict[str, str]) -> None:
    done = run_child(child_env, "--configure-logging")
    assert done.returncode == 0, done.stderr
    assert "tool explode" in done.stderr and "raised RuntimeError" in done.stderr
    # the message (it may hold what the tool was given) and the traceback are DEBUG's
    assert "secret-in-message" not in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_tool_error_message_and_traceback_are_logged_at_debug(
        child_env: dict[str, str]) -> None:
    done = run_child(child_env, "--debug")
    assert done.returncode == 0, done.stderr
    assert "RuntimeError: boom: secret-in-message" in done.stderr
    assert "Traceback" in done.stderr
