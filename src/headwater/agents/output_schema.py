"""An agent's ``output_schema``: the model is asked for JSON of a pydantic model, and the
final answer is validated against it (ADK's ``output_schema``).

The request's instruction ends with the schema (providers' native JSON modes are
not switched on: pass them in ``generate_config`` if you want them). A final
answer (text, no calls, no error) is read as JSON — one surrounding Markdown
code fence is allowed — and validated; with ``output_key`` the state holds
``model_dump(exclude_none=True)`` of it, as ADK stores it. An answer that does
not validate is kept as it is (without the state delta) and the run ends with
an ``output_invalid`` error event.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

_FENCE = "```"


def schema_instruction(schema: type[BaseModel]) -> str:
    """What the model is told about the answer's shape."""
    shape = json.dumps(schema.model_json_schema(), ensure_ascii=False)
    return ("Reply with only a JSON object (no other text) that matches this JSON schema:\n"
            f"{shape}")


def append_schema(instruction: str, schema: type[BaseModel]) -> str:
    """``instruction`` followed by :func:`schema_instruction`."""
    told = schema_instruction(schema)
    return f"{instruction}\n\n{told}" if instruction else told


def _unfenced(text: str) -> str:
    text = text.strip()
    if text.startswith(_FENCE) and text.endswith(_FENCE) and len(text) >= 6:
        text = text[len(_FENCE):-len(_FENCE)]
        first, _, rest = text.partition("\n")
        return (rest if first.strip().isalpha() or not first.strip() else text).strip()
    return text


def parse_output(schema: type[BaseModel], text: str) -> dict[str, Any]:  # raw JSON object
    """The answer ``text`` validated against ``schema``, as ADK stores it
    (``model_dump(exclude_none=True)``).

    Raises:
        ValueError: not JSON of the schema (the message says what is wrong).
    """
    try:
        return schema.model_validate_json(_unfenced(text)).model_dump(exclude_none=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise ValueError(problems) from None
