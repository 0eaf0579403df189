"""Model adapters and the model interface (DESIGN.md §3)."""

from .aggregator import StreamAggregator as StreamAggregator
from .base import BaseLlm as BaseLlm
from .llm_request import LlmRequest as LlmRequest
from .llm_response import LlmResponse as LlmResponse
from .registry import get_model as get_model
from .registry import register_model as register_model
from .registry import registered_model as registered_model

__all__ = (
    "BaseLlm",
    "LlmRequest",
    "LlmResponse",
    "StreamAggregator",
    "get_model",
    "register_model",
    "registered_model",
)
