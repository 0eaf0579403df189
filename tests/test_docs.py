"""The repository carries its own docs, and they agree with the code.

Tests read only files inside the repository: the design's contracts live in
docs/, the license beside pyproject.toml.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from headwater.errors import ERROR_CODES, TOOL_ERROR_CODES
from headwater.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = ("architecture.md", "coming-from-adk.md", "deployment.md", "event-contract.md",
         "frame-protocol.md", "inspector.md", "observability.md", "production.md",
         "public-api.md")

# Codes the docs list before the code has them -> the work that adds them.
PENDING_CODES: dict[str, str] = {}  # codes documented before errors.py has them


def table_codes(markdown: str, heading: str) -> list[str]:
    """The first-column codes of the table under ``## <heading>``."""
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown,
                        re.MULTILINE | re.DOTALL)
    assert section, f"no section '## {heading}'"
    return re.findall(r"^\| `([a-z_]+)` \|", section.group(1), re.MULTILINE)


def test_table_codes_reads_one_section() -> None:
    page = ("## A\n| code | when |\n|---|---|\n| `x_y` | a |\n| `z` | b |\n"
            "## B\n| `w` | c |\n")
    assert table_codes(page, "A") == ["x_y", "z"]
    assert table_codes(page, "B") == ["w"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_exists_and_its_links_resolve(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert text.startswith("# ")
    for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", text):
        assert (DOCS / target).is_file(), f"{page} links to missing {target}"


def test_error_codes_in_the_docs_are_the_code_s() -> None:
    documented = table_codes((DOCS / "event-contract.md").read_text(encoding="utf-8"),
                             "Error codes")
    assert len(documented) == len(set(documented))
    assert set(documented) == ERROR_CODES | set(PENDING_CODES)
    landed = sorted(set(PENDING_CODES) & ERROR_CODES)
    assert not landed, f"remove {landed} from PENDING_CODES: errors.py has them now"


def test_tool_result_codes_are_documented() -> None:
    documented = table_codes((DOCS / "event-contract.md").read_text(encoding="utf-8"),
                             "Tool error results")
    assert len(documented) == len(set(documented))
    assert set(documented) == TOOL_ERROR_CODES


def test_readme_points_at_docs_and_nothing_missing() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "DESIGN.md" not in readme  # not in the repository
    assert "docs/event-contract.md" in readme
    for target in re.findall(r"\]\(([^)#:]+)\)", readme):
        assert (ROOT / target).exists(), f"README links to missing {target}"


def test_references_point_at_documents_the_repository_carries() -> None:
    # The design's conventions live in docs/ (architecture.md and its siblings), not in
    # a CONVENTIONS or DESIGN document the repository does not carry.
    missing = re.compile(r"\b(?:CONVENTIONS|DESIGN)\b")
    found = []
    for folder in ("src", "tests", "benchmarks", "examples", "docs", "scripts"):
        for path in sorted((ROOT / folder).rglob("*")):
            if (path.suffix not in (".py", ".md", ".js", ".mjs", ".html", ".toml")
                    or "node_modules" in path.parts or path == Path(__file__).resolve()):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if missing.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "references to documents not in the repository:\n" + "\n".join(found)


def test_the_license_is_the_one_pyproject_names() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == {"text": "Apache-2.0"}
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_the_readme_says_what_the_tests_need_and_scripts_test_sees_to_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Running the tests"):readme.index("## In code")]
    assert "Debian's `chromium`" in section and "/usr/bin/chromium" in section
    assert "HEADWATER_TEST_POSTGRES_URL" in section and "HEADWATER_TEST_REDIS_URL" in section
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert "apt-get install -y -qq chromium" in script and "browser tests skip:" in script
    assert "PostgreSQL tests skip: set HEADWATER_TEST_POSTGRES_URL" in script
    assert "Redis tests skip: set HEADWATER_TEST_REDIS_URL" in script


def test_the_deployment_page_shows_the_nginx_configuration_the_test_runs() -> None:
    """One source: deploy/nginx.conf is what tests/gateway/test_deployment.py loads, and
    docs/deployment.md shows it whole."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text(encoding="utf-8")
    page = (DOCS / "deployment.md").read_text(encoding="utf-8")
    assert f"```nginx\n{conf}```\n" in page
    for needed in ("proxy_buffering off;", "proxy_http_version 1.1;",
                   "proxy_set_header Upgrade $http_upgrade;", "proxy_read_timeout",
                   "client_header_timeout", "limit_conn "):
        assert needed in conf
    read_timeout = re.search(r"proxy_read_timeout (\d+)s;", conf)
    assert read_timeout, "proxy_read_timeout in seconds"
    heartbeat = Settings.model_fields["heartbeat_interval"].default
    assert int(read_timeout.group(1)) >= 2 * heartbeat  # a quiet stream is never cut


def test_production_page_lists_every_setting_once() -> None:
    page = (DOCS / "production.md").read_text(encoding="utf-8")
    assert page.startswith("# Running it in production\n")
    section = re.search(r"^## Every bound and timeout\n(.*?)(?=^## |\Z)", page,
                        re.MULTILINE | re.DOTALL)
    assert section, "no section '## Every bound and timeout'"
    rows = re.findall(r"^\| (`[a-z_0-9]+`(?: / `[a-z_0-9]+`)*) \|", section.group(1),
                      re.MULTILINE)
    listed = [name for row in rows for name in re.findall(r"`([a-z_0-9]+)`", row)]
    assert len(listed) == len(set(listed)), "a setting is listed twice"
    assert set(listed) == set(Settings.model_fields), (
        f"missing: {sorted(set(Settings.model_fields) - set(listed))}, "
        f"not settings: {sorted(set(listed) - set(Settings.model_fields))}")
