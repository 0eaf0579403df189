"""The public names of DESIGN.md §8 exist (CONVENTIONS §3).

The names are read from the python code block of §8, so the design and the code
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

_HERE = Path(__file__).resolve()
DESIGN_CANDIDATES = (
    _HERE.parents[2] / "shared" / "DESIGN.md",  # CI: shared/ is a sibling of the repo
    _HERE.parents[1] / "DESIGN.md",
)

# module, or (module, name) -> the issue that delivers it
PENDING: dict[str | tuple[str, str], str] = {
    "headwater.gateway": "gateway issue",
}

ALL_MODULES = (
    "headwater",
    "headwater.models",
    "headwater.sessions",
    "headwater.testing",
    "headwater.tools",
    "headwater.agents",
)


def _design() -> Path | None:
    return next((path for path in DESIGN_CANDIDATES if path.is_file()), None)


def design_imports(markdown: str) -> list[tuple[str, str]]:
    """(module, name) for every `from headwater... import` in the §8 python blocks."""
    section = re.search(r"^## 8\..*?(?=^## |\Z)", markdown, re.MULTILINE | re.DOTALL)
    assert section, "DESIGN.md has no section '## 8.'"
    blocks = re.findall(r"^```python\n(.*?)^```", section.group(), re.MULTILINE | re.DOTALL)
    assert blocks, "DESIGN.md §8 has no python code block"
    found = []
    for block in blocks:
        tree = ast.parse(block)  # top-level `await` is only rejected by the compiler
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("headwater"):
                found += [(node.module or "", alias.name) for alias in node.names]
    return found


def _cases() -> list[object]:
    design = _design()
    if design is None:
        reason = "DESIGN.md not found at " + " or ".join(map(str, DESIGN_CANDIDATES))
        return [pytest.param("", "", marks=pytest.mark.skip(reason=reason), id="no-design")]
    cases: list[object] = []
    for module, name in design_imports(design.read_text(encoding="utf-8")):
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


def test_design_lists_public_names() -> None:
    design = _design()
    if design is None:
        pytest.skip("DESIGN.md not found at " + " or ".join(map(str, DESIGN_CANDIDATES)))
    found = design_imports(design.read_text(encoding="utf-8"))
    assert ("headwater", "Runner") in found
    assert ("headwater.models", "get_model") in found  # multi-line and commented imports
    keys = {*found, *(module for module, _ in found)}
    stale = [key for key in PENDING if key not in keys]
    assert not stale, f"PENDING names entries DESIGN.md §8 no longer lists: {stale}"


@pytest.mark.parametrize(("module", "name"), _cases())
def test_design_name_is_importable(module: str, name: str) -> None:
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module} has no attribute {name!r} (DESIGN.md §8)"
    exported = getattr(mod, "__all__", None)
    if exported is not None:
        assert name in exported, f"{name!r} missing from {module}.__all__"


@pytest.mark.parametrize("module", ALL_MODULES)
def test_all_is_a_sorted_tuple_of_real_names(module: str) -> None:
    mod = _import_if_present(module)
    exported = getattr(mod, "__all__", None)
    if exported is None:
        if module == "headwater":
            pytest.fail("headwater/__init__.py must define __all__ (CONVENTIONS §3)")
        pytest.skip(f"{module} does not define __all__")
    assert isinstance(exported, tuple), f"{module}.__all__ must be a tuple"
    expected = sorted(exported, key=isort_key)
    assert list(exported) == expected, f"{module}.__all__ must be sorted as ruff does: {expected}"
    assert len(set(exported)) == len(exported), f"{module}.__all__ has duplicates"
    missing = [name for name in exported if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"
