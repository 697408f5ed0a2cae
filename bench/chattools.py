"""The chat tools' cost per turn: importing the MCP server, starting it, a turn's connection, one call.

`python -m bench.chattools [calls]` prints one JSON object (medians and p95 in milliseconds). The calls are
`send_message` on the file outbox (fsync off), through the real server and the `mcp` client, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _import_ms() -> float:
    """A fresh interpreter's time to import the MCP app (mcp, uvicorn, starlette), less a bare start."""
    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return (time.perf_counter() - started) * 1000

    bare = min(run("pass") for _ in range(3))
    return min(run("import orchestrator.chattools.app") for _ in range(3)) - bare


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered), 2), "p95_ms": round(ordered[int(len(ordered) * 0.95)], 2)}


async def _measure(calls: int) -> dict[str, Any]:
    from gateway.home import Home
    from gateway.outbox import FileOutbox
    from gateway.settings import ChatToolsSettings
    from gateway.telemetry.events import EventLog
    from gateway.testing import make_incoming
    from orchestrator.chattools.client import connected
    from orchestrator.chattools.server import ChatToolServer
    from orchestrator.chattools.tools import ChatTools

    home = Home(Path(tempfile.mkdtemp(prefix="bench-chattools-")))
    home.create()
    events = EventLog(home.events_file)
    outbox = FileOutbox(home, events, fsync=False)
    server = ChatToolServer(ChatTools(home, ChatToolsSettings(max_messages=calls + 1), outbox, events))
    started = time.perf_counter()
    await server.start()
    start_ms = (time.perf_counter() - started) * 1000
    message = make_incoming("bench", conversationId="bench")
    connects: list[float] = []
    open_calls: list[float] = []
    async with server.granted("conv:console/console/bench", None, run_id="r", step_id="S", reply_to=message,
                              agent="bench") as endpoint:
        assert endpoint is not None
        for _ in range(20):
            began = time.perf_counter()
            async with connected(endpoint) as chat:
                await chat.call("conversation_info")
            connects.append((time.perf_counter() - began) * 1000)
        async with connected(endpoint) as chat:
            for n in range(calls):
                began = time.perf_counter()
                await chat.call("send_message", text=f"message {n}")
                open_calls.append((time.perf_counter() - began) * 1000)
    await server.stop()
    outbox.close()
    events.close()
    return {"server_start_ms": round(start_ms, 1), "connect_and_first_call": _figures(connects),
            "send_message_on_an_open_connection": _figures(open_calls), "calls": calls}


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    figures = {"import_ms": round(_import_ms(), 1), **asyncio.run(_measure(calls))}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
