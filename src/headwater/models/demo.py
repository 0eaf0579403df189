"""``DemoModel``: the offline model of ``headwater demo``, keyword-driven and deterministic.

It is a :class:`~headwater.models.scripted.ScriptedModel` whose responder reads
the last message and plays a turn: a tool call when the message asks for one
and the agent has that tool, an answer built from a tool's result, a long story,
or a short help text. Text streams word by word, ``Settings.demo_word_delay``
seconds apart (a human reading pace; tests set 0). It is always labelled a
scripted model: no network, no key, no intelligence.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..settings import get_settings
from ..types import Usage
from .llm_request import LlmRequest
from .scripted import ScriptedCall, ScriptedModel, ScriptedTurn

PROMPTS = (
    "Where is order 1042?",
    "Search the docs for streaming",
    "Deploy version 2 to staging",
    "Watch GOOG",
    "Tell me a long story",
)
"""The prompts the demo model understands (the page shows them as suggestions)."""

HELP = ("I am the demo model: scripted, offline, keyword-driven. Try one of these: "
        + "; ".join(f'"{p}"' for p in PROMPTS) + ".")

_RETURNED = re.compile(r"^Function (\w+) returned: (.*)$", re.S)
_STORY_PARTS = (
    "Once upon a time, at the source of a wide river, there lived a small stream "
    "that could not keep still. ",
    "Every morning it carried a few words down the valley, one at a time, so that the "
    "people waiting by the water could read them as they arrived instead of waiting "
    "for the whole letter. ",
    "The miller liked this very much: he could start grinding as soon as the first "
    "words reached his wheel, and he could stop whenever he had heard enough. ",
    "The ferryman liked it too, because when he fell asleep and woke again, the stream "
    "told him where it had left off, and never the same sentence twice. ",
    "One spring a storm broke the old dam, and for a while the words came out of order. ",
    "The stream wrote everything down in a ledger at the bottom of the valley, one line "
    "per finished thought, so that nobody ever had to guess what had really been said. ",
    "When the water calmed, the ledger and the stream agreed again, word for word. ",
)


class DemoModel(ScriptedModel):
    """The offline demo model (``"demo"`` or ``"demo:<name>"`` as a model string).

    Args:
        model: the name reported in requests.
        word_delay: seconds before each streamed word (default:
            ``Settings.demo_word_delay``).
    """

    def __init__(self, model: str = "demo", *, word_delay: float | None = None) -> None:
        super().__init__(model=model, responder=self.respond)
        self.word_delay = get_settings().demo_word_delay if word_delay is None else word_delay

    def respond(self, request: LlmRequest) -> ScriptedTurn:
        """The turn for ``request``: a tool call, an answer from a result, a story or help."""
        tools = {declaration.name for declaration in request.tools}
        last = request.contents[-1] if request.contents else None
        if last is not None and last.function_responses:
            response = last.function_responses[-1]
            return self._say(answer_from_result(response.name, response.response))
        text = last.text if last is not None else ""
        if match := _RETURNED.match(text.strip()):
            return self._say(answer_from_emission(match.group(1), match.group(2)))
        wanted = choose_call(text)
        if wanted is None:
            story = "story" in text.lower()
            return self._say("".join(_STORY_PARTS) * 4 if story else HELP)
        name, args = wanted
        if name not in tools:
            return self._say(f"That is a job for the {name} tool, which this agent does not "
                             "have. Ask the agent that has it.")
        return ScriptedTurn(calls=[ScriptedCall(name, args, fragments=3)],
                            usage=Usage(24 + len(text) // 4, 12, 36 + len(text) // 4),
                            finish_reason="tool_calls", delay=self.word_delay)

    def _say(self, text: str) -> ScriptedTurn:
        words = re.findall(r"\S+\s*", text)
        return ScriptedTurn(text=words, usage=Usage(40, len(words), 40 + len(words)),
                            delay=self.word_delay)


def choose_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """The tool call a message asks for, by keyword, or ``None``."""
    lower = text.lower()
    if "story" in lower:
        return None
    if "deploy" in lower:
        version = re.search(r"version\s+(\S+)", lower)
        env = "production" if "prod" in lower else "staging"
        return "deploy", {"version": version.group(1) if version else "1", "environment": env}
    if "search" in lower or "docs" in lower:
        query = re.search(r"\bfor\s+(.+?)[.?!]*$", text.strip())
        return "search_docs", {"query": query.group(1) if query else text.strip()}
    if "watch" in lower:
        symbol = re.search(r"\bwatch\s+([A-Za-z]{1,5})\b", text, re.I)
        return "watch_price", {"symbol": (symbol.group(1) if symbol else "GOOG").upper(),
                               "min_move_pct": 0.5}
    if lower.startswith("stop"):
        return "stop_streaming", {"function_name": "watch_price"}
    order = re.search(r"\b(\d{3,})\b", text)
    if order or "order" in lower:
        return "lookup_order", {"order_id": order.group(1) if order else "1042"}
    return None


def answer_from_result(name: str, result: dict[str, Any]) -> str:  # raw tool JSON
    """One or two sentences about a tool's result."""
    if result.get("code") == "denied":
        return f"Understood: the {name} call was denied, so I did not run it. Nothing changed."
    if "error" in result:
        return f"The {name} call failed: {result['error']}"
    if name == "lookup_order":
        if result.get("status") == "shipped":
            return (f"Order {result.get('order_id', '')} shipped on {result.get('shipped_on')} "
                    f"and is due {result.get('due')}.")
        return (f"Order {result.get('order_id', '')} is {result.get('status', 'in progress')} "
                f"and is due {result.get('due', 'soon')}.")
    if name == "search_docs":
        titles = [str(hit.get("title")) for hit in result.get("results", [])]
        if not titles:
            return f"I found nothing about {result.get('query', 'that')}."
        return (f"I found {len(titles)} pages about {result.get('query')}: "
                + ", ".join(titles) + ".")
    if name == "deploy":
        return (f"Version {result.get('version')} is live on {result.get('environment')} "
                f"({result.get('status', 'done')}).")
    if name == "watch_price":
        return answer_from_emission(name, json.dumps(result))
    if name == "stop_streaming":
        return "Stopped watching."
    return f"The {name} tool answered: {json.dumps(result)[:200]}"


def answer_from_emission(name: str, payload: str) -> str:
    """A sentence about one value a live tool emitted (``Function x returned: {...}``)."""
    try:
        emitted = json.loads(payload)
    except ValueError:
        return f"The {name} tool said: {payload[:200]}"
    if isinstance(emitted, dict) and "price" in emitted:
        return f"{emitted.get('symbol', 'The stock')} is at {float(emitted['price']):.2f}."
    if isinstance(emitted, dict) and "error" in emitted:
        return f"The {name} tool stopped: {emitted['error']}"
    return f"The {name} tool said: {payload[:200]}"


def from_spec(name: str) -> DemoModel:
    """Factory for ``"demo:<name>"``."""
    return DemoModel(model=name or "demo")
