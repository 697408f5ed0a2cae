"""The chat tools' MCP server: one Streamable HTTP endpoint on 127.0.0.1 for the whole process, each call
authorised by the capability token of the turn it acts for (docs/chat-tools.md says why not stdio).

The token travels as `Authorization: Bearer <token>`; the tools take no conversation or run argument, so
what a call acts on is always the turn the gateway bound its token to (orchestrator/chattools/grants.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gateway.models import IncomingPayload
from orchestrator.chattools.grants import Grant, Grants, TurnBinding
from orchestrator.chattools.tools import ChatTools, ToolRefused

log = logging.getLogger("switchyard.chattools")

SERVER_NAME = "switchyard"  # what each CLI calls the server: claude names the tools mcp__switchyard__send_message
PATH = "/mcp"
TOOL_NAMES = ("send_message", "send_file", "conversation_info")
URL_ENV = "SWITCHYARD_CHAT_TOOLS_URL"  # a turn's process finds its tools here (and a CLI's MCP config reads them)
TOKEN_ENV = "SWITCHYARD_CHAT_TOOLS_TOKEN"  # the token is in the environment, never on a command line (`ps`)


@dataclass(frozen=True)
class ToolEndpoint:
    """Where a turn reaches its chat tools: the server's URL and the token its calls carry."""

    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers of every call (the token)."""
        return {"Authorization": f"Bearer {self.token}"}


class ChatToolServer:
    """Serves the chat tools to the turns it grants (ProviderRunner asks `granted` for each turn)."""

    def __init__(self, tools: ChatTools, *, host: str = "127.0.0.1", port: int = 0):
        self.tools = tools
        self.grants = Grants()
        self._host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url: str | None = None

    async def start(self) -> None:
        """Listens on the loopback interface (a free port unless one is given)."""
        config = uvicorn.Config(self._app(), host=self._host, port=self._port, log_level="warning",
                                lifespan="on", access_log=False)
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(), name="chat-tools-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the chat tools server stopped while starting")
            await asyncio.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}{PATH}"

    async def stop(self) -> None:
        """Stops listening; calls still open are answered first."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.gather(self._task, return_exceptions=True)
        self._server, self._task, self.url = None, None, None

    @contextlib.asynccontextmanager
    async def granted(self, conversation: str, scope: str | None, *, run_id: str, step_id: str | None,
                      reply_to: IncomingPayload, agent: str) -> AsyncIterator[ToolEndpoint | None]:
        """The endpoint one turn reaches its tools at, for as long as the turn runs (None: not serving)."""
        if self.url is None:
            yield None
            return
        binding = TurnBinding(run_id, step_id, reply_to, agent)
        grant = self.grants.bind(conversation, scope, binding)
        try:
            yield ToolEndpoint(self.url, grant.token)
        finally:
            self.grants.unbind(grant, scope, binding)

    def revoke(self, endpoint: ToolEndpoint) -> None:
        """The turn holding `endpoint` was stopped: its token acts for nobody until the scope's next turn."""
        grant = self.grants.get(endpoint.token)
        if grant is not None:
            grant.bound = None

    def _grant(self, ctx: Context) -> Grant:
        headers = ctx.headers or {}
        auth = headers.get("authorization") or ""
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        grant = self.grants.get(token) if token else None
        if grant is None:
            raise ToolError("no valid chat tools token: these tools work only inside a Switchyard turn")
        return grant

    def _app(self) -> Any:
        server: MCPServer = MCPServer(SERVER_NAME, instructions=(
            "Tools of the chat conversation this turn answers: send_message and send_file reach the user "
            "now, before your final answer; conversation_info says who you talk to."), log_level="WARNING")

        @server.tool(description="Send a message into the conversation now (a progress report, a partial "
                                 "result). Your final answer is still sent when you finish.")
        async def send_message(text: str, ctx: Context) -> str:
            return await _answered(self.tools.send_message(self._grant(ctx), text))

        @server.tool(description="Send a file to the conversation, natively (a photo, a document). The path "
                                 "must be absolute and inside this conversation's files or its run's folder.")
        async def send_file(path: str, ctx: Context, caption: str = "") -> str:
            return await _answered(self.tools.send_file(self._grant(ctx), path, caption))

        @server.tool(description="Who is talking to you: sender, channel, conversation and the current run.")
        async def conversation_info(ctx: Context) -> str:
            try:
                return json.dumps(self.tools.conversation_info(self._grant(ctx)), ensure_ascii=False)
            except ToolRefused as exc:
                raise ToolError(str(exc)) from None

        return server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True)


class _QuietServer(uvicorn.Server):
    """uvicorn inside the gateway's loop: the gateway owns SIGINT and SIGTERM, so uvicorn takes none."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _answered(call: Any) -> str:
    """A tool's answer, or its refusal as an MCP tool error (the agent reads it; the turn goes on)."""
    try:
        result: str = await call
        return result
    except ToolRefused as exc:
        raise ToolError(str(exc)) from None
