"""schemathesis over the served OpenAPI schema, with known ids seeded: whatever it
sends (inside the schema and outside it), the gateway never answers 5xx."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from headwater.testing import FakeProvider

from .conftest import A, Served, new_session, text

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(240)]

EXAMPLES = 25  # per operation and mode; derandomized, so every run sends the same cases


async def test_no_generated_request_gets_a_5xx(server: Served, provider: FakeProvider) -> None:
    async with server.client() as client:
        raw_schema = (await client.get("/openapi.json")).json()
        sid = await new_session(client)
        provider.enqueue(text("seeded"))
        response = await client.post(f"/sessions/{sid}/runs", headers=A,
                                     json={"message": "seed", "resumable": True})
        assert response.status_code == 200
        known = {"session_id": sid, "run_id": response.headers["x-run-id"], "agent": "bot"}
    provider.enqueue(*(text("fuzzed") for _ in range(2000)))  # runs it starts end normally
    schema = schemathesis.openapi.from_dict(raw_schema)
    failures: list[str] = []
    checked: list[str] = []

    def fuzz() -> None:
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                checked.append(f"{operation.label} {mode.value}")

                @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
                @given(case=operation.as_strategy(mode), seeded=st.booleans(),
                       authed=st.booleans())
                def check(case: Any, seeded: bool, authed: bool) -> None:
                    if seeded and case.path_parameters:
                        case.path_parameters = {k: known.get(k, v)
                                                for k, v in case.path_parameters.items()}
                    if authed:
                        case.headers = {**(case.headers or {}), **A}
                    response = case.call(base_url=server.base_url, timeout=30)
                    if response.status_code >= 500:
                        failures.append(f"{case.method} {case.formatted_path} "
                                        f"-> {response.status_code} {response.text[:200]}")

                try:
                    check()
                except Unsatisfiable:  # nothing to break: no parameters, no body
                    assert mode is GenerationMode.NEGATIVE, operation.label
                    checked.pop()

    await asyncio.to_thread(fuzz)
    assert len(checked) >= 14, checked
    assert failures == [], failures[:10]
    assert "Traceback" not in server.text()
