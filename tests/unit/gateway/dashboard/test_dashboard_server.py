"""gateway/dashboard/server.py against raw sockets on 127.0.0.1 (its listener and headers: gateway/channelkit/web.py,
shared with the web chat): the connection cap, the header and body timeouts, malformed requests and accept errors
logged one line at a time, security headers on every answer."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.channelkit.web import ACCEPT_ERROR, SECURITY_HEADERS
from gateway.dashboard.server import Server, build_app
from gateway.settings import DashboardSettings
from gateway.testing import async_wait_until

TOKEN = "server-test-token-1"


class FakeSource:
    """The Source protocol with fixed answers (what the dashboard's service would read)."""

    async def state(self) -> dict[str, Any]:
        return {"queue": [], "in_flight": [], "dead_total": 0, "dead_letters": [], "runs": [], "channels": [],
                "heartbeats": {}, "events": []}

    async def metrics(self) -> bytes:
        return b""

    async def retry(self, names: list[str]) -> list[str]:
        return names

    async def answer(self, approval_id: str, verdict: str) -> dict[str, Any]:
        return {"id": approval_id, "won": True, "state": "answered", "allowed": verdict == "allow", "by": "dashboard"}

    def redact(self, text: str) -> str:
        return text


@contextlib.asynccontextmanager
async def serving(token: str | None = None, **limits: Any) -> AsyncIterator[tuple[Server, int]]:
    settings = DashboardSettings(port=0)
    body_timeout = limits.pop("body_timeout_s", 10.0)
    server = Server(build_app(FakeSource(), settings, token, body_timeout_s=body_timeout), settings, **limits)
    await server.start()
    assert server.port is not None
    try:
        yield server, server.port
    finally:
        await server.stop()


def _get(port: int, path: str = "/", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def _closed_by_peer(connection: socket.socket) -> bool:
    """Whether the server closed this connection (it never sent us anything else)."""
    connection.setblocking(False)
    try:
        return connection.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


async def _connect(port: int, count: int) -> list[socket.socket]:
    connections = []
    for _ in range(count):
        connections.append(await asyncio.to_thread(socket.create_connection, ("127.0.0.1", port), 5))
    return connections


async def test_a_connection_that_sends_no_request_head_in_time_is_closed() -> None:
    async with serving(header_timeout_s=0.3) as (_, port):
        [silent] = await _connect(port, 1)
        partial = (await _connect(port, 1))[0]
        partial.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head that never ends (slowloris)
        with silent, partial:
            await async_wait_until(lambda: _closed_by_peer(silent) and _closed_by_peer(partial), 10)


async def test_a_body_that_does_not_arrive_in_time_is_answered_408() -> None:
    async with serving(body_timeout_s=0.3) as (_, port):
        [connection] = await _connect(port, 1)
        with connection:
            connection.sendall(b"POST /api/dead-letters/retry HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"names\":")
            connection.settimeout(10)
            answer = await asyncio.to_thread(connection.recv, 4096)
    assert answer.startswith(b"HTTP/1.1 408")


async def test_past_the_cap_new_connections_replace_the_oldest_idle_ones_and_requests_are_answered() -> None:
    async with serving(max_connections=4) as (_, port):
        idle = await _connect(port, 10)
        try:
            await async_wait_until(lambda: sum(_closed_by_peer(c) for c in idle[:6]) == 6, 10)
            assert not any(_closed_by_peer(c) for c in idle[6:])  # the 4 newest stay
            status, _ = await asyncio.to_thread(_get, port)
            assert status == 200
        finally:
            for connection in idle:
                connection.close()


async def test_malformed_requests_are_logged_in_one_line_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as (_, port):
        for _ in range(100):
            [connection] = await _connect(port, 1)
            with connection:
                connection.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\x00: x\r\n\r\n")
                connection.settimeout(10)
                assert b" 400 " in (await asyncio.to_thread(connection.recv, 4096)).split(b"\r\n")[0]
    records = [r for r in caplog.records if "Error handling request" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(records) == 1
    assert records[0].exc_info is None and "BadHttpMessage" in records[0].getMessage()


async def test_accept_errors_of_the_listener_are_logged_one_line_at_a_time(caplog: pytest.LogCaptureFixture) -> None:
    async with serving() as (server, port):
        loop = asyncio.get_running_loop()
        [listener] = server.sockets
        for _ in range(100):  # as asyncio reports each accept() that fails for want of a descriptor
            loop.call_exception_handler({"message": ACCEPT_ERROR, "socket": listener,
                                         "exception": OSError(errno.EMFILE, "Too many open files")})
    records = [r for r in caplog.records if "accept" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is None and "Too many open files" in records[0].getMessage()


@pytest.mark.parametrize(("token", "path", "headers", "status"), [
    (TOKEN, "/", {}, 401),
    (None, "/", {"Host": "attacker.example"}, 403),
    (None, "/nowhere", {}, 404),
    (None, "/", {}, 200),
])
async def test_every_answer_carries_the_security_headers(token: str | None, path: str, headers: dict[str, str],
                                                         status: int) -> None:
    async with serving(token) as (_, port):
        got, answer_headers = await asyncio.to_thread(_get, port, path, headers)
    assert got == status
    for name, value in SECURITY_HEADERS.items():
        assert answer_headers.get(name) == value, name
