# Mirrors google/adk-python contributing/samples/hello_world/main.py (Apache-2.0):
# the same ADK calls, written for these tests. Only the import block is
# headwater's (ADK: `from google.adk.agents.run_config import RunConfig`,
# `from google.adk.runners import InMemoryRunner`, `from google.adk.sessions import
# Session`, `from google.genai import types`; `import agent`).
from headwater import types
from headwater.run_config import RunConfig
from headwater.runner import InMemoryRunner
from headwater.sessions import Session

from . import hello_world as agent


async def main(printed: list[str]) -> None:
    app_name = "my_app"
    user_id_1 = "user1"
    runner = InMemoryRunner(agent=agent.root_agent, app_name=app_name)
    session_11 = await runner.session_service.create_session(app_name=app_name,
                                                             user_id=user_id_1)

    async def run_prompt(session: Session, new_message: str) -> None:
        content = types.Content(role="user", parts=[types.Part.from_text(text=new_message)])
        printed.append(f"** User says: {content.model_dump(exclude_none=True)}")
        async for event in runner.run_async(user_id=user_id_1, session_id=session.id,
                                            new_message=content):
            if event.content.parts and event.content.parts[0].text:
                printed.append(f"** {event.author}: {event.content.parts[0].text}")

    async def run_prompt_bytes(session: Session, new_message: str) -> None:
        content = types.Content(role="user", parts=[
            types.Part.from_bytes(data=str.encode(new_message), mime_type="text/plain")])
        async for event in runner.run_async(
                user_id=user_id_1, session_id=session.id, new_message=content,
                run_config=RunConfig(save_input_blobs_as_artifacts=True)):
            if event.content.parts and event.content.parts[0].text:
                printed.append(f"** {event.author}: {event.content.parts[0].text}")

    async def check_rolls_in_state(rolls_size: int) -> None:
        session = await runner.session_service.get_session(
            app_name=app_name, user_id=user_id_1, session_id=session_11.id)
        assert len(session.state["rolls"]) == rolls_size
        for roll in session.state["rolls"]:
            assert 0 < roll <= 100

    await run_prompt(session_11, "Hi")
    await run_prompt(session_11, "Roll a die with 100 sides")
    await check_rolls_in_state(1)
    await run_prompt(session_11, "Roll a die again with 100 sides.")
    await check_rolls_in_state(2)
    await run_prompt(session_11, "What numbers did I get?")
    await run_prompt_bytes(session_11, "Hi bytes")
    printed.append(str(await runner.artifact_service.list_artifact_keys(
        app_name=app_name, user_id=user_id_1, session_id=session_11.id)))
