"""The research pipeline (issue 21): several agents, one stream.

A ``SequentialAgent`` named ``research`` runs two stages:

1. ``searchers``, a ``ParallelAgent``: ``web`` (``search_web``, which reports its
   progress) and ``papers`` (``search_papers``) search at the same time, each on
   its own branch (``searchers.web``, ``searchers.papers``); each saves its
   answer into the session's state with ``output_key``.
2. ``writer``: its instruction reads both notes (``{web}`` and ``{papers}``); it
   checks the first with ``fact_checker``, an agent used as a tool
   (``AgentTool``), whose own tool call and answer reach the same stream on the
   call's branch; the checker's answer is the call's one result, and the writer
   writes the report from the notes and the check.

Every event names its author (and branch); the stream holds one final answer
per agent. Run it::

    python -m headwater.examples.research ["Research rivers"]

It prints one line per stored event, ``author> …`` (``author [branch]> …`` off
the main line); the two searchers' lines may interleave.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TextIO

from ..agents.agent import Agent
from ..agents.agent_tool import AgentTool
from ..agents.base import BaseAgent
from ..agents.workflow import ParallelAgent, SequentialAgent
from ..core.events import Event, ToolStreamEvent
from ..core.run_config import RunConfig, StreamingMode
from ..models.base import BaseLlm
from ..runner import Runner
from ..tools.context import ToolContext
from ..tools.function_tool import tool
from ._console import example_model, parse_args, step_pause

PROMPT = "Research rivers"
WEB = {"rivers": ["Rivers carry sediment to the sea", "The Nile is about 6,650 km long"],
       "streaming": ["Streaming shows words as they arrive"]}
PAPERS = {"rivers": ["Meandering rivers migrate over decades (2019)"],
          "streaming": ["Incremental rendering lowers perceived latency (2021)"]}
SOURCES = 2
"""How many sources the fact checker finds for any claim (it is a demo)."""

WRITER_INSTRUCTION = ("Write a short report from these notes; check the first with "
                      "fact_checker before you write.\n- {web}\n- {papers?}")


@tool(streaming=True)
async def search_web(query: str,
                     tool_context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
    """Search the web; reports its progress.

    Args:
        query: what to look for.
    """
    pages = ("encyclopedia", "news", "blogs")
    for index, where in enumerate(pages, start=1):
        await tool_context.clock.sleep(step_pause())
        yield ToolStreamEvent(type="part_delta", index=0,
                              delta=f"{index}/{len(pages)} searched {where}")
    yield ToolStreamEvent(type="done", response={"query": query,
                                                 "results": _found(WEB, query)})


def search_papers(query: str) -> dict[str, object]:
    """Search papers.

    Args:
        query: what to look for.
    """
    return {"query": query, "results": _found(PAPERS, query)}


def check_claim(claim: str) -> dict[str, object]:
    """Check a claim against sources.

    Args:
        claim: the claim to check.
    """
    return {"claim": claim, "verdict": "supported", "sources": SOURCES}


def _found(index: dict[str, list[str]], query: str) -> list[str]:
    words = query.lower().split()
    return [hit for topic, hits in index.items() if topic in words for hit in hits]


def build_agent(model: str | BaseLlm) -> SequentialAgent:
    """The ``research`` pipeline on ``model``: two searchers in parallel, then the writer."""
    web = Agent(name="web", model=model, tools=[search_web], output_key="web",
                description="Searches the web with search_web.",
                instruction="Search the web for the user's topic; answer with what you found.")
    papers = Agent(name="papers", model=model, tools=[search_papers], output_key="papers",
                   description="Searches papers with search_papers.",
                   instruction="Search papers for the user's topic; answer with what you found.")
    checker = Agent(name="fact_checker", model=model, tools=[check_claim],
                    description="Checks a claim against sources with check_claim.",
                    instruction="Check the claim you are given with check_claim.")
    writer = Agent(name="writer", model=model, tools=[AgentTool(checker)],
                   instruction=WRITER_INSTRUCTION)
    return SequentialAgent(name="research", sub_agents=[
        ParallelAgent(name="searchers", sub_agents=[web, papers]), writer])


def line(event: Event) -> str | None:
    """One stored event as a line (``None`` for nothing to show)."""
    who = f"{event.author} [{event.branch}]" if event.branch else event.author
    if event.error_code is not None:
        return f"{who}> [error] {event.error_code}: {event.error_message}"
    calls = ", ".join(f"{c.name}({json.dumps(c.args)})" for c in event.function_calls)
    if calls:
        return f"{who}> [call] {calls}"
    results = ", ".join(f"{r.name} -> {json.dumps(r.response)}" for r in event.function_responses)
    if results:
        return f"{who}> [result] {results}"
    return f"{who}> {event.text}" if event.text else None


async def research(agent: BaseAgent, message: str, out: TextIO) -> int:
    """Run ``message`` through ``agent`` (SSE, in memory); print each stored event and the
    progress. Returns 0, or 1 when an event was an error."""
    failed = False
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        session = await runner.create_session(user_id="you")
        out.write(f"you> {message}\n")
        async with runner.run_async(user_id="you", session_id=session.id, new_message=message,
                                    run_config=RunConfig(
                                        streaming_mode=StreamingMode.SSE)) as stream:
            async for event in stream:
                progress = event.tool_progress
                if progress is not None and progress.event.delta:
                    out.write(f"[{progress.tool_name}] {progress.event.delta}\n")
                if event.partial:
                    continue
                failed = failed or event.error_code is not None
                shown = line(event)
                if shown is not None:
                    out.write(shown + "\n")
        state = (await runner.session_service.get_session(
            app_name=agent.name, user_id="you", session_id=session.id))
        notes = {key: state.state[key] for key in ("web", "papers")
                 if state is not None and key in state.state}
        out.write(f"[state] {json.dumps(notes)}\n")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Research a topic with the pipeline and print the whole stream, agent by agent."""
    args = parse_args("research", "Research a topic: two searchers, a fact checker, a writer.",
                      PROMPT, argv)
    return asyncio.run(research(build_agent(example_model()), args.message, sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
