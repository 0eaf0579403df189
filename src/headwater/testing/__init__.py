"""Test doubles that are part of the product: users test their own agents with them.

``ScriptedModel`` plays scripted turns and records requests and stream fates;
``check_stream_contract`` checks a model's responses against docs/event-contract.md;
``FakeProvider`` is a loopback HTTP server that speaks OpenAI (Chat Completions
and Responses), Anthropic and Gemini SSE at the byte level (and can stall, cut,
reset and trickle), with renderers that build provider streams from an abstract
turn; ``FakeLiveProvider`` is a loopback WebSocket server that speaks Gemini
Live and OpenAI Realtime, scripted by :class:`LiveTurn` s; ``VirtualClock`` and
``LiveHarness`` test live runs and time-based tools in virtual time;
``wait_until`` waits on a condition instead of a count of event-loop turns;
``SSEParser`` and ``aiter_sse`` read an event stream as a browser does.
"""

from ..models.scripted import ScriptedCall as ScriptedCall
from ..models.scripted import ScriptedModel as ScriptedModel
from ..models.scripted import ScriptedTurn as ScriptedTurn
from ..models.scripted import StreamRecord as StreamRecord
from ._render import ToolCallSpec as ToolCallSpec
from ._render import cut_inside_utf8 as cut_inside_utf8
from ._render import load_transcript as load_transcript
from ._render import render_anthropic as render_anthropic
from ._render import render_openai as render_openai
from ._render import split_events as split_events
from ._render import split_inside_characters as split_inside_characters
from ._render_gemini import render_gemini as render_gemini
from ._render_responses import render_openai_responses as render_openai_responses
from .clock import VirtualClock as VirtualClock
from .contract import StreamContractError as StreamContractError
from .contract import check_stream_contract as check_stream_contract
from .fake_provider import Close as Close
from .fake_provider import ConnectionRecord as ConnectionRecord
from .fake_provider import FakeProvider as FakeProvider
from .fake_provider import RecordedRequest as RecordedRequest
from .fake_provider import Reset as Reset
from .fake_provider import Scenario as Scenario
from .fake_provider import Sleep as Sleep
from .fake_provider import Stall as Stall
from .fake_provider import Trickle as Trickle
from .harness import LiveHarness as LiveHarness
from .live_fake import FakeLiveProvider as FakeLiveProvider
from .live_fake import LiveResponder as LiveResponder
from .live_fake import LiveSocketRecord as LiveSocketRecord
from .live_fake import LiveTurn as LiveTurn
from .sse import SSEMessage as SSEMessage
from .sse import SSEParser as SSEParser
from .sse import aiter_sse as aiter_sse
from .waiting import wait_until as wait_until

__all__ = (
    "Close",
    "ConnectionRecord",
    "FakeLiveProvider",
    "FakeProvider",
    "LiveHarness",
    "LiveResponder",
    "LiveSocketRecord",
    "LiveTurn",
    "RecordedRequest",
    "Reset",
    "SSEMessage",
    "SSEParser",
    "Scenario",
    "ScriptedCall",
    "ScriptedModel",
    "ScriptedTurn",
    "Sleep",
    "Stall",
    "StreamContractError",
    "StreamRecord",
    "ToolCallSpec",
    "Trickle",
    "VirtualClock",
    "aiter_sse",
    "check_stream_contract",
    "cut_inside_utf8",
    "load_transcript",
    "render_anthropic",
    "render_gemini",
    "render_openai",
    "render_openai_responses",
    "split_events",
    "split_inside_characters",
    "wait_until",
)
