"""Test doubles that are part of the product: users test their own agents with them.

``ScriptedModel`` plays scripted turns and records requests and stream fates;
``check_stream_contract`` checks a model's responses against DESIGN.md §1.
"""

from ..models.scripted import ScriptedCall as ScriptedCall
from ..models.scripted import ScriptedModel as ScriptedModel
from ..models.scripted import ScriptedTurn as ScriptedTurn
from ..models.scripted import StreamRecord as StreamRecord
from .contract import StreamContractError as StreamContractError
from .contract import check_stream_contract as check_stream_contract

__all__ = (
    "ScriptedCall",
    "ScriptedModel",
    "ScriptedTurn",
    "StreamContractError",
    "StreamRecord",
    "check_stream_contract",
)
