"""``--model`` and ``HEADWATER_MODEL``: a model string, or the offline demo model."""

from __future__ import annotations

from ..core.settings import get_settings
from ..models.base import BaseLlm
from ..models.demo import DemoModel
from ..models.registry import get_model


def resolve_model(name: str | None) -> BaseLlm:
    """``name``, else ``HEADWATER_MODEL``, else ``"demo"``, the offline demo model: a model
    string, parsed as every model string is (``headwater.models.registry``).

    Raises:
        UserError: an unknown provider, a malformed string or a missing API key.
    """
    return get_model(name or get_settings().model or "demo")


def describe_model(model: BaseLlm) -> str:
    """How a command names the model it runs on."""
    if isinstance(model, DemoModel):
        return f"'{model.model}' (scripted demo model, offline)"
    return repr(model.model)
