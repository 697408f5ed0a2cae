"""`network:` in the sandbox: `model-only` reaches the provider's API host and port (through the relay) and nothing
else, `none` reaches nothing, `full` both; a missing bwrap is a permanent failure, never a run without it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.agents.sandbox import Sandbox, SandboxUnavailable
from orchestrator.agents.spawn import run_process

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

PROBE = """
import socket, sys
for port in sys.argv[1:]:
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=3) as s:
            print(port, s.recv(16).decode())
    except OSError as exc:
        print(port, "refused", type(exc).__name__)
"""


async def _server(word: bytes) -> AsyncIterator[int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(word)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def _reached(tmp_path: Path, network: str) -> list[str]:
    async for model in _server(b"model"):
        async for other in _server(b"other"):
            sandbox = Sandbox(tmp_path, network=network).for_provider(
                "claude", {"HOME": str(tmp_path / "home")}, base_url=f"http://127.0.0.1:{model}/v1")
            result = await run_process(["/usr/bin/python3", "-c", PROBE, str(model), str(other)], stdin=None,
                                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}, cwd=tmp_path,
                                       timeout_sec=30, max_output=4096, sandbox=sandbox)
            assert result.exit_code == 0, result.stderr_tail
            return [line.split(" ", 1)[1] for line in result.stdout.splitlines()]
    raise AssertionError("unreachable")


async def test_model_only_reaches_the_model_and_nothing_else(tmp_path: Path) -> None:
    model, other = await _reached(tmp_path, "model-only")
    assert model == "model" and other.startswith("refused")


async def test_none_reaches_nothing_and_full_reaches_both(tmp_path: Path) -> None:
    assert all(seen.startswith("refused") for seen in await _reached(tmp_path, "none"))
    assert await _reached(tmp_path, "full") == ["model", "other"]


async def test_a_missing_bwrap_is_permanent_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable, match="not on PATH"):
        await run_process(["/usr/bin/touch", str(marker)], stdin=None, env={}, cwd=tmp_path, timeout_sec=5,
                          max_output=1024, sandbox=Sandbox(tmp_path, binary="bwrap-not-installed"))
    assert not marker.exists()
