"""Model adapters and the model interface (docs/architecture.md), exported where users look."""

from .aggregator import StreamAggregator as StreamAggregator
from .anthropic import AnthropicModel as AnthropicModel
from .base import BaseLlm as BaseLlm
from .demo import DemoModel as DemoModel
from .gemini import GeminiModel as GeminiModel
from .gemini_live import GeminiLiveModel as GeminiLiveModel
from .llm_request import LlmRequest as LlmRequest
from .llm_response import LlmResponse as LlmResponse
from .openai import OpenAIChatModel as OpenAIChatModel
from .openai_realtime import OpenAIRealtimeModel as OpenAIRealtimeModel
from .openai_responses import OpenAIResponsesModel as OpenAIResponsesModel
from .registry import get_model as get_model
from .registry import register_model as register_model
from .registry import registered_model as registered_model

__all__ = (
    "AnthropicModel",
    "BaseLlm",
    "DemoModel",
    "GeminiLiveModel",
    "GeminiModel",
    "LlmRequest",
    "LlmResponse",
    "OpenAIChatModel",
    "OpenAIRealtimeModel",
    "OpenAIResponsesModel",
    "StreamAggregator",
    "get_model",
    "register_model",
    "registered_model",
)
