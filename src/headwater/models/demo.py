"""``DemoModel``: the offline model of ``headwater demo``, keyword-driven and deterministic.

It is a :class:`~headwater.models.scripted.ScriptedModel` whose responder reads
the last message and plays a turn: a tool call when the message asks for one
and the agent has that tool, an answer built from a tool's result, one sentence
for each value a live tool emits (``Function x returned: …``: a price and its
move, a count of people), a long story, or a short help text. An agent that
lacks the tool but is offered ``transfer_to_agent`` transfers to the agent whose
description (in that tool's declaration) names the tool; it names no tool the
agent does not have. A request of several parts ("Check where order 1042 is,
then deploy version 2 to staging") is done part by part: each agent does the
first part not yet done in the conversation since the request and, once its
tool has answered, hands the next part on the same way. A live tool asked for
outside a live run (no ``stop_streaming`` offered) is answered in words; a
research question is searched with the agent's ``search_*`` tool, and an agent
without one writes from the notes its instruction holds. Text streams word
by word, ``Settings.demo_word_delay`` seconds apart (a human reading pace; tests
set 0). It is always labelled a scripted model: no network, no key, no
intelligence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from ..core.settings import Settings, settings_or_default
from ..core.types import Usage
from .llm_request import LlmRequest
from .scripted import ScriptedCall, ScriptedModel, ScriptedTurn

Call = tuple[str, dict[str, Any]]
"""A tool call the demo model makes: a name and its arguments (raw JSON)."""


PROMPTS = (
    "Where is order 1042?",
    "Search the docs for streaming",
    "Deploy version 2 to staging",
    "Release version 3 to staging",
    "Watch GOOG",
    "Count the people",
    "Index the docs",
    "Tell me a long story",
)
"""The prompts the demo model understands (the page shows them as suggestions)."""

HELP = ("I am the demo model: scripted, offline, keyword-driven. Try one of these: "
        + "; ".join(f'"{p}"' for p in PROMPTS) + ".")

_CONTEXT = "For context:"  # another agent's turn, as the ledger re-casts it
_TARGET = re.compile(r"^- (\w[\w-]*)(?: \(your parent\))?: (.*)$", re.M)
_RETURNED = re.compile(r"^Function (\w+) returned: (.*)$", re.S)
_ENDED = re.compile(r"^Function (\w+) (?:finished streaming|stopped streaming|failed)\b")
_LIVE_TOOLS = ("count_people", "watch_price")  # the demo's live tools, for "stop"
_ENDED_WORDS = {"watch_price": "The price watch has ended.",
                "count_people": "I've stopped counting."}
_PENDING_WORDS = {"watch_price": "Watching. I'll mention significant moves.",
                  "count_people": "Counting. I'll tell you when the number changes."}
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
        settings: where that default comes from (the process-wide settings
            when omitted).
    """

    def __init__(self, model: str = "demo", *, word_delay: float | None = None,
                 settings: Settings | None = None) -> None:
        super().__init__(model=model, responder=self.respond, record=False)  # serves for days
        if word_delay is None:
            word_delay = settings_or_default(settings).demo_word_delay
        self.word_delay = word_delay

    def respond(self, request: LlmRequest) -> ScriptedTurn:
        """The turn for ``request``: a tool call, an answer from a result, a story or help."""
        tools = {declaration.name for declaration in request.tools}
        last = request.contents[-1] if request.contents else None
        if last is not None and last.function_responses:
            response = last.function_responses[-1]
            said = answer_from_result(response.name, response.response)
            if (response.name in _agent_tools(request)
                    and _notes(request.system_instruction or "")):  # a writer's notes first
                said = f"{write_from_notes(request.system_instruction or '')} {said}"
            return self._then(request, tools, said)
        text = _asked(request)
        if match := _RETURNED.match(text.strip()):
            earlier = [c.text for c in request.contents[:-1]]
            return self._say(answer_from_emission(match.group(1), match.group(2), earlier))
        if match := _ENDED.match(text.strip()):  # a live tool's stream is over
            name = match.group(1)
            return self._say(_ENDED_WORDS.get(name, f"The {name} stream has ended."))
        if "research" in text.lower():  # a searcher searches; a writer writes from notes
            wanted = _research(text, tools)
            notes = _notes(request.system_instruction or "")
            helpers = _agent_tools(request)
            if wanted is None and helpers and notes:  # check the first note with an agent
                wanted = helpers[0], {"request": f"Check: {notes[0]}"}
            elif wanted is None:
                return self._say(write_from_notes(request.system_instruction or ""))
        else:
            wanted = next_part(request, text, tools)
        if wanted is None:
            story = "story" in text.lower()
            return self._say("".join(_STORY_PARTS) * 4 if story else HELP)
        return self._do(request, tools, wanted, text)

    def _do(self, request: LlmRequest, tools: Collection[str], wanted: Call, text: str,
            said: str = "", part: str = "") -> ScriptedTurn:
        """The turn that does ``wanted``: its call, a transfer to the agent whose
        description names its tool, or words saying why not; ``said`` (what the last
        result told) first, and ``part`` (the words asking for ``wanted``) named when
        handed on."""
        name, args = wanted
        if name not in tools:
            target = transfer_target(request, name)
            if target is not None:
                handing = f"{said} Next, {part[:1].lower()}{part[1:]}: over to {target}."
                return self._call(TRANSFER, {"agent_name": target}, text,
                                  handing if said else "")
            return self._say(f"{said} {cannot(tools)}".strip())
        if name in _LIVE_TOOLS and "stop_streaming" not in tools:  # not a live run
            return self._say(f"{said} {_NOT_LIVE[name]}".strip())
        return self._call(name, args, text, said)

    def _then(self, request: LlmRequest, tools: Collection[str], said: str) -> ScriptedTurn:
        """After a tool answered: ``said``, then the request's next part when one is left."""
        text = _request_text(request)
        pending = pending_parts(request, text, tools)
        if len(parts(text)) == 1 or not pending:  # a request of one part is done
            return self._say(said)
        part, wanted = pending[0]
        return self._do(request, tools, wanted, text, said, part)

    def _call(self, name: str, args: dict[str, Any], text: str,
              said: str = "") -> ScriptedTurn:
        words = re.findall(r"\S+\s*", said)
        return ScriptedTurn(text=words, calls=[ScriptedCall(name, args, fragments=3)],
                            usage=Usage(24 + len(text) // 4, 12 + len(words),
                                        36 + len(text) // 4 + len(words)),
                            finish_reason="tool_calls", delay=self.word_delay)

    def _say(self, text: str) -> ScriptedTurn:
        words = re.findall(r"\S+\s*", text)
        return ScriptedTurn(text=words, usage=Usage(40, len(words), 40 + len(words)),
                            delay=self.word_delay)


TRANSFER = "transfer_to_agent"
_NOT_LIVE = {"watch_price": "Watching a price is a live stream: it runs in a live session.",
             "count_people": "Counting people reads the camera live: it runs in a live "
                             "session."}


def _asked(request: LlmRequest) -> str:
    """The text the turn answers: the last message, or, when the last messages are
    another agent's turn (``For context: …``, after a transfer), the user's before them."""
    for content in reversed(request.contents):
        first = content.parts[0].text if content.parts else None
        if content.role != "user" or first != _CONTEXT:
            return content.text
    return ""


def _request_text(request: LlmRequest) -> str:
    """The user's request the conversation is on: the last user text that is not
    another agent's turn (``For context: …``) nor a tool's result."""
    for content in reversed(request.contents):
        first = content.parts[0].text if content.parts else None
        if content.role == "user" and first is not None and first != _CONTEXT:
            return content.text
    return ""


_THEN = re.compile(r"\s*(?:[,;]\s*(?:and\s+)?then\b|\band\s+then\b|\bthen\b|;)\s*", re.I)
_CALLED = re.compile(r"^\[[\w-]+\] called tool `(\w+)` with parameters: (.*)$", re.S)


def parts(text: str) -> list[str]:
    """The parts of a request, in order: split at "then" and ";" (one part when none)."""
    found = [part.strip(" ,.;") for part in _THEN.split(text)]
    return [part for part in found if part] or [text]


def _calls_since_request(request: LlmRequest) -> list[Call]:
    """The calls made since the user's request, by any agent (its own, and others' as the
    ``For context:`` lines tell them): the parts of it already done."""
    made: list[Call] = []
    for content in reversed(request.contents):
        first = content.parts[0].text if content.parts else None
        if content.role == "user" and first is not None and first != _CONTEXT:
            break  # the request itself
        made += [(call.name, call.args) for call in content.function_calls]
        for part in content.parts:
            match = _CALLED.match(part.text or "")
            if match is None:
                continue
            try:
                args = json.loads(match.group(2))
            except ValueError:
                continue
            made.append((match.group(1), args if isinstance(args, dict) else {}))
    return made


def pending_parts(request: LlmRequest, text: str, tools: Collection[str]) -> list[tuple[str, Call]]:
    """The parts of ``text`` not yet done, each with the call it asks for.

    A part is done when its call (name and arguments) was made since the request,
    by this agent or another. ``check …`` is a claim to check only where an agent can
    check claims (it has ``check_claim``, or may transfer to one that has).
    """
    checks = "check_claim" in tools or transfer_target(request, "check_claim") is not None
    done = _calls_since_request(request)
    asked = [text] if checks and text.lower().startswith("check") else parts(text)  # a claim
    found = [(part, choose_call(part, tools, checks=checks)) for part in asked]
    return [(part, wanted) for part, wanted in found if wanted is not None and wanted not in done]


def next_part(request: LlmRequest, text: str, tools: Collection[str]) -> Call | None:
    """The call of the first part of ``text`` not yet done (:func:`pending_parts`)."""
    pending = pending_parts(request, text, tools)
    return pending[0][1] if pending else None


def cannot(tools: Collection[str]) -> str:
    """Words for a request no tool of this agent (nor any agent it may go to) fits; they
    name only the agent's own tools."""
    own = sorted(name for name in tools if name not in (TRANSFER, "stop_streaming"))
    if not own:
        return "I cannot do that here: I have no tool for it, nor an agent to hand it to."
    return f"I cannot do that here: my tools are {', '.join(own)}."


def transfer_target(request: LlmRequest, tool_name: str) -> str | None:
    """The agent to transfer to for ``tool_name``: the first agent that the request's
    ``transfer_to_agent`` declaration lists with a description naming that tool."""
    for declaration in request.tools:
        if declaration.name != TRANSFER:
            continue
        for match in _TARGET.finditer(declaration.description):
            if re.search(rf"\b{re.escape(tool_name)}\b", match.group(2)):
                return match.group(1)
    return None


def _research(text: str, tools: Collection[str]) -> Call | None:
    searches = sorted(name for name in tools if name.startswith("search_"))
    if not searches:
        return None
    topic = re.search(r"\bresearch\s+(?:on\s+|about\s+)?(.+?)[.?!]*$", text.strip(), re.I)
    return searches[0], {"query": topic.group(1) if topic else text.strip()}


def _agent_tools(request: LlmRequest) -> list[str]:
    """The request's tools that are agents (``AgentTool``: one ``request`` parameter)."""
    return [d.name for d in request.tools
            if set(d.parameters.get("properties", {})) == {"request"}]


def _notes(instruction: str) -> list[str]:
    return [line[2:].strip() for line in instruction.splitlines()
            if line.startswith("- ") and line[2:].strip()]


def write_from_notes(instruction: str) -> str:
    """A short report from the notes an instruction holds (its lines ``- …``), or help."""
    notes = _notes(instruction)
    if not notes:
        return HELP
    return "Here is what the research found. " + " ".join(notes)


def choose_call(text: str, tools: Collection[str] = (), *,
                checks: bool = False) -> Call | None:
    """The tool call a message asks for, by keyword, or ``None``.

    ``tools`` (the agent's tool names) picks which live tool a "stop" stops.
    ``checks``: a message starting "check" is a claim to check (``check_claim``);
    otherwise the rest of it says what to do ("Check where order 1042 is").
    """
    lower = text.lower()
    if "story" in lower:
        return None
    if lower.startswith("check"):
        rest = re.sub(r"^check\W*", "", text.strip(), flags=re.I)
        if checks or "check_claim" in tools:
            return "check_claim", {"claim": rest}
        text, lower = rest, rest.lower()
    if lower.startswith("stop"):
        mine = [name for name in _LIVE_TOOLS if name in tools]
        wanted = "count_people" if "count" in lower or "people" in lower else "watch_price"
        return "stop_streaming", {"function_name": mine[0] if len(mine) == 1 else wanted}
    if "deploy" in lower or "release" in lower:
        version = re.search(r"version\s+(\S+)", lower)
        env = "production" if "prod" in lower else "staging"
        number = version.group(1) if version else "1"
        if "release" in lower and "deploy" not in lower:  # the release agent's deployer ships it
            return "deployer", {"request": f"Deploy version {number} to {env}"}
        return "deploy", {"version": number, "environment": env}
    if "index" in lower:
        return "index_docs", {}
    if "search" in lower or "docs" in lower:
        query = re.search(r"\bfor\s+(.+?)[.?!]*$", text.strip())
        return "search_docs", {"query": query.group(1) if query else text.strip()}
    if "people" in lower and ("count" in lower or "how many" in lower):
        return "count_people", {}
    if "watch" in lower:
        symbol = re.search(r"\bwatch\s+([A-Za-z]{1,5})\b", text, re.I)
        move = re.search(r"(\d+(?:\.\d+)?)\s*(?:%|percent)", lower)
        return "watch_price", {"symbol": (symbol.group(1) if symbol else "GOOG").upper(),
                               "min_move_pct": float(move.group(1)) if move else 0.5}
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
    if name.startswith("search_") and isinstance(result.get("results"), list):
        found = [str(hit) for hit in result["results"]]
        where = name[len("search_"):]
        if not found:
            return f"Nothing in {where} about {result.get('query', 'that')}."
        return f"From {where} on {result.get('query')}: " + "; ".join(found) + "."
    if name == "index_docs":
        return (f"I indexed {result.get('pages', 0)} pages of the docs "
                f"({result.get('words', 0):,} words).")
    if name == "check_claim":
        return (f"The claim is {result.get('verdict', 'unchecked')} "
                f"({result.get('sources', 0)} sources).")
    if set(result) == {"result"} and isinstance(result["result"], str):  # an agent's answer
        return f"{name} says: {result['result']}"
    if name == "deploy":  # "live" already says it; another status is named
        status = result.get("status", "live")
        return (f"Version {result.get('version')} is {status} on {result.get('environment')}."
                if status == "live" else f"Version {result.get('version')} on "
                f"{result.get('environment')}: {status}.")
    if name in _PENDING_WORDS and "pending" in str(result.get("status", "")):
        return _PENDING_WORDS[name]  # a live call: answered at once, its values follow
    if name in _PENDING_WORDS:
        return answer_from_emission(name, json.dumps(result))
    if name == "stop_streaming":
        said = str(result.get("result", ""))
        if not result.get("stopped"):
            return "Nothing was running, so there was nothing to stop."
        return "Stopped counting." if "count_people" in said else "Stopped watching."
    return f"The {name} tool answered: {json.dumps(result)[:200]}"


def answer_from_emission(name: str, payload: str, earlier: Sequence[str] = ()) -> str:
    """A sentence about one value a live tool emitted (``Function x returned: {...}``).

    ``earlier`` (the texts before it in the conversation) gives a price its
    change since the last price of the same symbol.
    """
    try:
        emitted = json.loads(payload)
    except ValueError:
        return f"The {name} tool said: {payload[:200]}"
    if not isinstance(emitted, dict):
        return f"The {name} tool said: {payload[:200]}"
    if "error" in emitted:
        if "symbol" in emitted:
            return f"I can no longer watch {emitted['symbol']}: {emitted['error']}."
        return f"The {name} tool stopped: {emitted['error']}"
    if "price" in emitted:
        return _price_sentence(emitted, name, earlier)
    if "people" in emitted:
        people = int(emitted["people"])
        if people == 0:
            return "Nobody is in view."
        return f"I can see {people} {'person' if people == 1 else 'people'}."
    return f"The {name} tool said: {payload[:200]}"


def _price_sentence(emitted: dict[str, Any], name: str,  # raw tool JSON
                    earlier: Sequence[str]) -> str:
    symbol = str(emitted.get("symbol", "The stock"))
    price = float(emitted["price"])
    before: float | None = None
    for text in earlier:
        match = _RETURNED.match(text.strip())
        if match is None or match.group(1) != name:
            continue
        try:
            value = json.loads(match.group(2))
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("symbol") == symbol and "price" in value:
            before = float(value["price"])
    if not before:
        return f"{symbol} is at {price:.2f}."
    change = (price - before) / before * 100
    return f"{symbol} {'rose' if change > 0 else 'fell'} {abs(change):.1f}% to {price:.2f}."


def from_spec(name: str) -> DemoModel:
    """Factory for ``"demo:<name>"``."""
    return DemoModel(model=name or "demo")
