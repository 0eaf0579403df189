"""The deploy (seed 001): an approval gate, then a progress bar.

``deploy`` is a progress tool with ``requires_approval=True``: the run stops
with an approval request before the tool runs — the approver reads its
``approval_summary``, "deploy version 2 to staging" — and the answer (bound to
a hash of the arguments) resumes it; the deploy reports "1/5 build" … "5/5
verify".
Run it::

    python -m headwater.examples.deploy ["Deploy version 2 to staging"] [--approve | --deny]

Without ``--approve`` or ``--deny`` it asks on standard input (no answer: denied).

:func:`build_release_agent` is the same deploy one level down: a ``release`` agent
that calls a ``deployer`` agent as a tool (the demo's "Release version 3 to
staging").
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Sequence

from ..agents.agent import Agent
from ..agents.agent_tool import AgentTool
from ..core.events import ApprovalRequest, ToolStreamEvent
from ..models.base import BaseLlm
from ..tools.context import ToolContext
from ..tools.function_tool import tool
from ._console import example_model, parse_args, run_turns, step_pause

PROMPT = "Deploy version 2 to staging"
DESCRIPTION = "Deploys a version of the app with deploy, once a human approves."
INSTRUCTION = "Deploy versions when asked; deploy needs a human's approval."
STEPS = ("build", "upload", "migrate", "switch traffic", "verify")


@tool(streaming=True, requires_approval=True,
      approval_summary="deploy version {version} to {environment}")
async def deploy(version: str, environment: str,
                 tool_context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
    """Deploy a version of the app; a human approves first, then progress is reported.

    Args:
        version: the version to deploy.
        environment: staging or production.
    """
    for index, step in enumerate(STEPS, start=1):
        await tool_context.clock.sleep(step_pause())
        yield ToolStreamEvent(type="part_delta", index=0,
                              delta=f"{index}/{len(STEPS)} {step}")
    yield ToolStreamEvent(type="done", response={"version": version, "environment": environment,
                                                 "status": "live"})


def build_agent(model: str | BaseLlm) -> Agent:
    """The ``deploy`` agent on ``model``."""
    return Agent(name="deploy", model=model, tools=[deploy], instruction=INSTRUCTION,
                 description=DESCRIPTION)


RELEASE_PROMPT = "Release version 3 to staging"
RELEASE_DESCRIPTION = ("Releases a version of the app: its deployer agent (a tool, deployer) "
                       "ships it once a human approves.")


def build_release_agent(model: str | BaseLlm) -> Agent:
    """The ``release`` agent on ``model``: it calls a ``deployer`` agent as a tool, whose
    ``deploy`` needs approval, so the run pauses inside the agent it called and the
    answer resumes it there (docs/multi-agent.md, "A pause inside a tree")."""
    deployer = Agent(name="deployer", model=model, tools=[deploy], instruction=INSTRUCTION,
                     description=DESCRIPTION)
    return Agent(name="release", model=model, tools=[AgentTool(deployer)],
                 instruction="Release versions when asked: the deployer agent ships them.",
                 description=RELEASE_DESCRIPTION)


def _options(parser: argparse.ArgumentParser) -> None:
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument("--approve", action="store_true", help="approve the deploy")
    answer.add_argument("--deny", action="store_true", help="deny the deploy")


def ask(request: ApprovalRequest) -> bool:
    """Ask on standard input whether to run ``request``; end of input is a no."""
    sys.stdout.write(f"Approve {request.display}? [y/N] ")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line.endswith("\n"):
        sys.stdout.write("\n")
    return line.strip().lower() in ("y", "yes")


def main(argv: Sequence[str] | None = None) -> int:
    """Ask for a deploy, answer its approval, print the progress and the answer."""
    args = parse_args("deploy", "Deploy a version, behind an approval gate.", PROMPT, argv,
                      _options)
    decide = (lambda _: True) if args.approve else (lambda _: False) if args.deny else ask
    return asyncio.run(run_turns(build_agent(example_model()), args.message, sys.stdout,
                                 decide))


if __name__ == "__main__":
    sys.exit(main())
