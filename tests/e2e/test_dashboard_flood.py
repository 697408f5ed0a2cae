"""A real `switchyard run` with few file descriptors, its dashboard flooded with idle connections: the queue
keeps answering and the token holder still gets the page."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.dashboard import fetch
from tests.faults.harness import GatewayRun, message

pytestmark = pytest.mark.e2e

FILES = 256  # the process's RLIMIT_NOFILE (so the test needs few sockets)
IDLE = 400  # connections that never send a byte: more than the process may open files
TOKEN = "flood-test-token-123"
# runs the gateway's command with RLIMIT_NOFILE lowered to argv[1]
LIMITED = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
           "os.execv(sys.argv[2], sys.argv[2:])")


class LimitedRun(GatewayRun):
    """`switchyard run` allowed FILES open files."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", LIMITED, str(FILES), *super().command()]


def _dashboard_url(run: GatewayRun) -> str | None:
    try:
        return json.loads((run.home.state / "gateway.json").read_bytes()).get("dashboard")
    except (OSError, ValueError):
        return None


def test_idle_connections_to_the_dashboard_stall_neither_the_queue_nor_the_token_holder(tmp_path: Path) -> None:
    run = LimitedRun(tmp_path / "home", env={"SY_DASH_TOKEN": TOKEN})
    run.configure(dashboard={"port": 0, "token_env": "SY_DASH_TOKEN"})
    idle: list[socket.socket] = []
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: run.kill() if run.alive() else None)
        cleanup.callback(lambda: [connection.close() for connection in idle])
        run.start()
        url = str(wait_until(lambda: _dashboard_url(run), 15))
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        for _ in range(IDLE):
            if time.monotonic() > deadline:
                break
            with contextlib.suppress(OSError):  # a connect the kernel's full backlog timed out: one fewer
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        assert len(idle) > FILES

        sent = message(1, "c-flood")
        run.drop(sent)
        wait_until(lambda: run.replies(sent.messageId), 20)
        page = fetch(url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert page.status == 200 and "Queue" in page.text
        assert "Too many open files" not in run.output()
        for connection in idle:
            connection.close()
        assert run.stop() == 0
