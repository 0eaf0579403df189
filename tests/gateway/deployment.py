"""What the deployment tests share: real ``headwater serve`` processes and Debian's nginx.

Not a test module. ``serve`` starts ``python -m headwater.cli serve`` in this
folder (so ``deployed_agent:agent`` imports) and waits for ``/healthz``;
``start_nginx`` runs ``/usr/sbin/nginx`` as the test's own process on the
repository's ``deploy/nginx.conf`` (the file docs/deployment.md documents),
changing only its ``listen`` port and upstream addresses.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.testing import FakeProvider

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX = "/usr/sbin/nginx"
AGENT = "deployed_agent:agent"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def need_nginx() -> str:
    """Debian's nginx; skips locally, fails in CI, when it is missing."""
    found = NGINX if os.access(NGINX, os.X_OK) else shutil.which("nginx")
    if found:
        return found
    if in_ci():
        pytest.fail("CI is set but nginx is missing; scripts/test installs it (apt-get)")
    pytest.skip("nginx is missing (as root: apt-get install nginx)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Served:
    """A ``headwater serve`` child process."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(10)


def serve_args(*args: str, port: int, host: str = "127.0.0.1", target: str = AGENT,
               cli: str = "headwater.cli") -> list[str]:
    """``python -m <cli> serve <target> ...``: the ``headwater`` command, or a module that
    runs it (``slow_worker_cli``)."""
    return [sys.executable, "-m", cli, "serve", target, "--host", host, "--port", str(port),
            *args]


async def serve(*args: str, env: dict[str, str], log: Path, host: str = "127.0.0.1",
                target: str = AGENT, within: float = 60.0, cli: str = "headwater.cli"
                ) -> Served:
    """A ``headwater serve`` child in this folder, up (``/healthz`` 200 on loopback)."""
    port = free_port()
    process = launch(serve_args(*args, port=port, host=host, target=target, cli=cli), env, log)
    served = Served(process, port, log)
    await wait_healthy(served.base_url, served.process, served.output, within)
    return served


def launch(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in this folder; its stdout and stderr go to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=out,
                                stderr=subprocess.STDOUT)


async def wait_healthy(base_url: str, process: subprocess.Popen[bytes], output: Any,
                       within: float) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(base_url=base_url, timeout=2) as client:
        while True:
            if process.poll() is not None:
                pytest.fail(f"{base_url} exited ({process.returncode}):\n{output()}")
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{base_url} did not come up within {within} s:\n{output()}")
            await asyncio.sleep(0.1)


# -- nginx ---------------------------------------------------------------------------------------

ACCESS_FORMAT = "'$request_method $uri $status $upstream_addr'"


def site_config(listen: int, upstreams: Sequence[int]) -> str:
    """deploy/nginx.conf with nginx listening on ``127.0.0.1:listen`` and the replicas at
    ``upstreams``; fails if the file no longer has the lines this changes."""
    text = NGINX_CONF.read_text(encoding="utf-8")
    text, listens = re.subn(r"^(\s*)listen 80;", rf"\1listen 127.0.0.1:{listen};", text,
                            flags=re.MULTILINE)
    assert listens == 1, "deploy/nginx.conf should have one `listen 80;`"
    servers = iter(upstreams)
    text, count = re.subn(r"^(\s*)server 127\.0\.0\.1:\d+;",
                          lambda m: f"{m.group(1)}server 127.0.0.1:{next(servers)};", text,
                          flags=re.MULTILINE)
    assert count == len(upstreams), f"deploy/nginx.conf should list {len(upstreams)} replicas"
    return text


@dataclass
class Nginx:
    """nginx run by the test (``daemon off``), its files in ``prefix``."""

    process: subprocess.Popen[bytes]
    port: int
    prefix: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return (self.prefix / "stderr.log").read_text(errors="replace")

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def access(self) -> list[list[str]]:
        """The access log: method, path, status, upstream address(es) per request."""
        path = self.prefix / "access.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [line.split(" ", 3) for line in lines]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: workers finish, then exit
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(10)


def launch_nginx(binary: str, prefix: Path, upstreams: Sequence[int]) -> Nginx:
    """nginx (``daemon off``) on a free loopback port in front of the replicas at
    ``upstreams``, its pid, logs and temporary files in ``prefix``."""
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (prefix / "headwater.conf").write_text(site_config(port, upstreams), encoding="utf-8")
    temp = {name: prefix / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(exist_ok=True)
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""  # root: stay root
    main = f"""{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format upstreams {ACCESS_FORMAT};
    access_log {prefix}/access.log upstreams;
    client_body_temp_path {temp['body']};
    proxy_temp_path {temp['proxy']};
    fastcgi_temp_path {temp['fastcgi']};
    uwsgi_temp_path {temp['uwsgi']};
    scgi_temp_path {temp['scgi']};
    include {prefix}/headwater.conf;
}}
"""
    (prefix / "nginx.conf").write_text(main, encoding="utf-8")
    with (prefix / "stderr.log").open("wb") as out:
        process = subprocess.Popen([binary, "-c", str(prefix / "nginx.conf"), "-p",
                                    str(prefix), "-g", "daemon off;"], stdout=out,
                                   stderr=subprocess.STDOUT)
    return Nginx(process, port, prefix)


async def start_nginx(binary: str, prefix: Path, upstreams: Sequence[int]) -> Nginx:
    """:func:`launch_nginx`, listening."""
    nginx = launch_nginx(binary, prefix, upstreams)
    process, port = nginx.process, nginx.port
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            pytest.fail(f"nginx exited ({process.returncode}): "
                        f"{nginx.output()}{nginx.error_log()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return nginx
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"nginx did not listen within 30 s: {nginx.error_log()}")
        await asyncio.sleep(0.05)


# -- the model's side ----------------------------------------------------------------------------


def sent_tool_results(provider: FakeProvider, request: int) -> list[Any]:
    """The tool results the model was sent in ``provider.requests[request]``."""
    messages = provider.requests[request].json()["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
