"""The public names of docs/public-api.md exist.

The names are read from the python code blocks of docs/public-api.md (the
repository's copy of the design's public names), so the docs and the code
cannot drift apart silently. Names that later work delivers are listed in
`PENDING` and expected to fail; once one exists its test fails (strict xfail)
until its entry is removed.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

PUBLIC_API = Path(__file__).resolve().parents[1] / "docs" / "public-api.md"

# module, or (module, name) -> the issue that delivers it
PENDING: dict[str | tuple[str, str], str] = {}

ALL_MODULES = (
    "headwater",
    "headwater.models",
    "headwater.sessions",
    "headwater.testing",
    "headwater.tools",
    "headwater.agents",
    "headwater.gateway",
    "headwater.sse",
)


def design_imports(markdown: str) -> list[tuple[str, str]]:
    """(module, name) for every `from headwater... import` in the page's python blocks."""
    blocks = re.findall(r"^```python\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    assert blocks, "docs/public-api.md has no python code block"
    found = []
    for block in blocks:
        tree = ast.parse(block)  # top-level `await` is only rejected by the compiler
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("headwater"):
                found += [(node.module or "", alias.name) for alias in node.names]
    return found


def _cases() -> list[object]:
    cases: list[object] = []
    for module, name in design_imports(PUBLIC_API.read_text(encoding="utf-8")):
        issue = PENDING.get((module, name)) or PENDING.get(module)
        marks = []
        if issue:
            reason = f"pending ({issue}); remove it from PENDING once it exists"
            marks.append(
                pytest.mark.xfail(strict=True, raises=(ImportError, AssertionError), reason=reason)
            )
        cases.append(pytest.param(module, name, marks=marks, id=f"{module}.{name}"))
    return cases


def isort_key(name: str) -> tuple[int, list[str | int]]:
    """The order ruff's RUF022 keeps `__all__` in: CONSTANTS, Classes, rest; digits numeric."""
    kind = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    return kind, [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def test_isort_key_matches_ruff() -> None:
    names = ["tool", "Agent", "item10", "MAX", "RunConfig", "item2", "Runner"]
    assert sorted(names, key=isort_key) == [
        "MAX",
        "Agent",
        "RunConfig",
        "Runner",
        "item2",
        "item10",
        "tool",
    ]


def _import_if_present(module: str) -> ModuleType:
    """Import `module`; skip if the subpackage itself does not exist yet."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module or module == "headwater":
            raise  # the package, or something the module imports, is missing: a real failure
        pytest.skip(f"{module} does not exist yet")


def test_docs_list_public_names() -> None:
    found = design_imports(PUBLIC_API.read_text(encoding="utf-8"))
    assert ("headwater", "Runner") in found
    assert ("headwater.models", "get_model") in found  # multi-line and commented imports
    assert ("headwater.models", "AnthropicModel") in found
    keys = {*found, *(module for module, _ in found)}
    stale = [key for key in PENDING if key not in keys]
    assert not stale, f"PENDING names entries docs/public-api.md no longer lists: {stale}"


def test_design_imports_reads_every_python_block() -> None:
    page = ("# T\n```python\nfrom headwater import (A,\n    B)  # c\nx = 1\n```\n"
            "text\n```python\nfrom headwater.models import C\nimport os\n```\n"
            "```bash\nfrom headwater import D\n```\n")
    assert design_imports(page) == [("headwater", "A"), ("headwater", "B"),
                                    ("headwater.models", "C")]


@pytest.mark.parametrize(("module", "name"), _cases())
def test_design_name_is_importable(module: str, name: str) -> None:
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module} has no attribute {name!r} (docs/public-api.md)"
    exported = getattr(mod, "__all__", None)
    if exported is not None:
        assert name in exported, f"{name!r} missing from {module}.__all__"


@pytest.mark.parametrize("module", ALL_MODULES)
def test_all_is_a_sorted_tuple_of_real_names(module: str) -> None:
    mod = _import_if_present(module)
    exported = getattr(mod, "__all__", None)
    if exported is None:
        if module == "headwater":
            pytest.fail("headwater/__init__.py must define __all__ (docs/architecture.md, "
                        "\"Layers\")")
        pytest.skip(f"{module} does not define __all__")
    assert isinstance(exported, tuple), f"{module}.__all__ must be a tuple"
    expected = sorted(exported, key=isort_key)
    assert list(exported) == expected, f"{module}.__all__ must be sorted as ruff does: {expected}"
    assert len(set(exported)) == len(exported), f"{module}.__all__ has duplicates"
    missing = [name for name in exported if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"


def test_names_exported_in_two_places_are_the_same_objects() -> None:
    from headwater.models import (
        AnthropicModel,
        LlmRequest,
        LlmResponse,
        OpenAIChatModel,
        OpenAIResponsesModel,
    )
    from headwater.models.anthropic import AnthropicModel as FromAnthropic
    from headwater.models.base import LlmRequest as BaseRequest
    from headwater.models.base import LlmResponse as BaseResponse
    from headwater.models.openai import OpenAIChatModel as FromOpenai
    from headwater.models.openai import OpenAIResponsesModel as ResponsesFromOpenai
    from headwater.models.openai_responses import OpenAIResponsesModel as FromResponses

    assert (AnthropicModel, OpenAIChatModel) == (FromAnthropic, FromOpenai)
    assert OpenAIResponsesModel is ResponsesFromOpenai is FromResponses
    assert (LlmRequest, LlmResponse) == (BaseRequest, BaseResponse)


def test_native_live_names_are_the_same_objects_everywhere() -> None:
    from headwater.models import GeminiLiveModel, OpenAIRealtimeModel
    from headwater.models.gemini_live import GeminiLiveModel as FromGemini
    from headwater.models.openai_realtime import OpenAIRealtimeModel as FromRealtime
    from headwater.testing import FakeLiveProvider, LiveTurn
    from headwater.testing.live_fake import FakeLiveProvider as FromFake
    from headwater.testing.live_fake import LiveTurn as FromFakeTurn

    assert (GeminiLiveModel, OpenAIRealtimeModel) == (FromGemini, FromRealtime)
    assert (FakeLiveProvider, LiveTurn) == (FromFake, FromFakeTurn)
