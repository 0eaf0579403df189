"""Shared test setup: a no-network guard, the PostgreSQL and Redis URLs, child-process fixtures,
headwater's spans in memory, the slow tests' timeout.

Tests never reach the network (docs/architecture.md): from `pytest_configure` on,
connecting a socket, or resolving a name, outside loopback raises
`RuntimeError` before any packet is sent. Loopback and unix sockets stay open,
so `FakeProvider`, local PostgreSQL and Redis work.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import headwater
from headwater.testing import FakeProvider

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_patches: list[tuple[Any, str, Any]] = []


def _is_local(host: object, *, unspecified_ok: bool = False) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOCAL_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a real host name: resolving it would already reach a DNS server
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or (unspecified_ok and ip.is_unspecified)


def _refuse(target: object) -> RuntimeError:
    return RuntimeError(
        f"tests never reach the network: refused {target!r}; "
        "use loopback (127.0.0.1, ::1, localhost), e.g. headwater.testing.FakeProvider"
    )


def _guard_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(self: socket.socket, address: Any, *args: Any) -> Any:
        inet = self.family in (socket.AF_INET, socket.AF_INET6)
        if inet and not (isinstance(address, tuple) and _is_local(address[0])):
            raise _refuse(address)
        return original(self, address, *args)

    return connect


def _guard_getaddrinfo(original: Callable[..., Any]) -> Callable[..., Any]:
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "", b"") and not _is_local(host, unspecified_ok=True):
            raise _refuse(host)
        return original(host, *args, **kwargs)

    return getaddrinfo


def pytest_configure(config: pytest.Config) -> None:
    for owner, name, guard in (
        (socket.socket, "connect", _guard_connect),
        (socket.socket, "connect_ex", _guard_connect),
        (socket, "getaddrinfo", _guard_getaddrinfo),
    ):
        original = getattr(owner, name)
        _patches.append((owner, name, original))
        setattr(owner, name, guard(original))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


SLOW_TIMEOUT = 180.0
"""The per-test timeout of a test marked ``slow`` (it starts processes or runs long) that
sets none of its own: three times pyproject's 60 s. Such a test takes that much longer on
a busy machine (a ``headwater`` child takes seconds to start there, and tests start many):
a timeout guards against a hang, not against a slow machine."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The PostgreSQL URL to test against; skips locally, fails in CI, when unset."""
    url = os.environ.get("HEADWATER_TEST_POSTGRES_URL")
    if url:
        return url
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail("CI is set but HEADWATER_TEST_POSTGRES_URL is not; .ci/run exports it")
    pytest.skip("set HEADWATER_TEST_POSTGRES_URL to run against PostgreSQL")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis URL to test against; skips locally, fails in CI, when unset."""
    url = os.environ.get("HEADWATER_TEST_REDIS_URL")
    if url:
        return url
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail("CI is set but HEADWATER_TEST_REDIS_URL is not; .ci/run exports it")
    pytest.skip("set HEADWATER_TEST_REDIS_URL to run against Redis")


@pytest.fixture
def child_env() -> dict[str, str]:
    """The environment for a child Python: it imports the headwater under test.

    ``PYTHONPATH`` starts with the absolute directory this process imported
    headwater from, so a child started in another directory does not fall
    back to some other installed copy.
    """
    src = str(Path(headwater.__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, rest) if p)}


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    """A loopback FakeProvider, closed after the test."""
    async with FakeProvider() as fake:
        yield fake


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """headwater's spans, recorded in memory for this test only (through a provider given to
    headwater alone; the OpenTelemetry SDK is imported only by the tests that use this)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from headwater import telemetry

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.set_tracer_provider(provider)
    yield spans
    telemetry.set_tracer_provider(None)
    provider.shutdown()
