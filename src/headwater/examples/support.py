"""The support agent (seed 004): a shop's orders, looked up with ``lookup_order``.

Run it::

    python -m headwater.examples.support ["Where is order 1042?"]

It prints the streamed answer once; the model is the offline demo model unless
``HEADWATER_MODEL`` names another.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from ..agents.agent import Agent
from ..models.base import BaseLlm
from ._console import example_model, parse_args, run_turns

PROMPT = "Where is order 1042?"
DESCRIPTION = "A shop's orders: where an order is, looked up with lookup_order."
INSTRUCTION = "You are a shop's support agent. Look orders up with lookup_order."
ORDERS = {
    "1042": {"status": "shipped", "shipped_on": "30 September", "due": "Monday"},
    "2001": {"status": "packing", "due": "Thursday"},
}


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order in the shop's records.

    Args:
        order_id: the order number, digits only.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    return {"order_id": order_id, **order}


def build_agent(model: str | BaseLlm) -> Agent:
    """The ``support`` agent on ``model``."""
    return Agent(name="support", model=model, tools=[lookup_order], instruction=INSTRUCTION,
                 description=DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> int:
    """Ask the support agent one question and print the streamed answer."""
    args = parse_args("support", "Ask the support agent about an order.", PROMPT, argv)
    return asyncio.run(run_turns(build_agent(example_model()), args.message, sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
