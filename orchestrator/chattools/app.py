"""The MCP app behind ChatToolServer: the tools as the `mcp` SDK serves them (Streamable HTTP, stateless, JSON
answers) and uvicorn running it inside the gateway's loop. Imported only when the server starts."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from orchestrator.chattools.grants import ToolGrant
from orchestrator.chattools.tools import ChatTools, ToolRefused

GRACE_SEC = 5  # a call still open at stop (an `ask` of a turn not stopped yet) does not hold the gateway longer
INSTRUCTIONS = ("Tools of the chat conversation this turn answers: send_message and send_file reach the user now, "
                "before your final answer; conversation_info says who you talk to; remind sets a reminder.")


def _quiet_sdk() -> None:
    """The SDK logs each start of its session manager at INFO: noise on the console channel's terminal."""
    logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)


def serving(tools: ChatTools, grant_of: Callable[[str], ToolGrant | None], *, name: str, path: str, host: str,
            port: int) -> uvicorn.Server:
    """A uvicorn server of the chat tools' app at `path`, not yet started; `grant_of(authorization header)` finds
    the grant a call acts for."""
    _quiet_sdk()
    config = uvicorn.Config(_app(tools, grant_of, name, path), host=host, port=port, log_level="warning",
                            lifespan="on", access_log=False, timeout_graceful_shutdown=GRACE_SEC)
    return _QuietServer(config)


def _app(tools: ChatTools, grant_of: Callable[[str], ToolGrant | None], name: str, path: str) -> Any:
    mcp: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    def grant(ctx: Context) -> ToolGrant:
        found = grant_of((ctx.headers or {}).get("authorization") or "")
        if found is None:
            raise ToolError("no valid chat tools token: these tools work only inside a Switchyard turn")
        return found

    @mcp.tool(description="Send a message into the conversation now (a progress report, a partial result). "
                          "Your final answer is still sent when you finish.")
    async def send_message(text: str, ctx: Context) -> str:
        return await _answered(tools.send_message(grant(ctx), text))

    @mcp.tool(description="Send a file to the conversation, natively (a photo, a document). The path must be "
                          "absolute and inside this conversation's files (conversation_info's filesFolder) or "
                          "its run's folder.")
    async def send_file(path: str, ctx: Context, caption: str = "") -> str:
        return await _answered(tools.send_file(grant(ctx), path, caption))

    @mcp.tool(description="Ask the conversation a question and wait for the answer: the options are one-tap "
                          "buttons (Yes/No when none are given). Returns the option chosen, or 'no answer' when "
                          "nobody answered in time.")
    async def ask(question: str, ctx: Context, options: list[str] | None = None) -> str:
        return await _answered(tools.ask(grant(ctx), question, options or ()))

    @mcp.tool(description="Set a reminder in this conversation. `when`: 'in 2h' (s, m, h, d, w), an ISO time "
                          "(UTC unless it names an offset) or a cron expression ('0 9 * * 1-5', UTC) for a "
                          "recurring one. Give `text` to have it sent as it is, or `prompt` to have it answered "
                          "then as a message of the conversation. The users list and cancel them with /reminders.")
    async def remind(when: str, ctx: Context, text: str = "", prompt: str = "") -> str:
        return await _answered(tools.remind(grant(ctx), when, text, prompt))

    @mcp.tool(description="Who is talking to you: sender, channel, conversation, the current run, and the "
                          "folder where a file you write can be sent from.")
    async def conversation_info(ctx: Context) -> str:
        try:
            return json.dumps(tools.conversation_info(grant(ctx)), ensure_ascii=False)
        except ToolRefused as exc:
            raise ToolError(str(exc)) from None

    return mcp.streamable_http_app(streamable_http_path=path, stateless_http=True, json_response=True)


class _QuietServer(uvicorn.Server):
    """uvicorn inside the gateway's loop: the gateway owns SIGINT and SIGTERM, so uvicorn takes none."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _answered(call: Awaitable[str]) -> str:
    """A tool's answer, or its refusal as an MCP tool error (the agent reads it; the turn goes on)."""
    try:
        return await call
    except ToolRefused as exc:
        raise ToolError(str(exc)) from None
