"""The chat tools' MCP server: one Streamable HTTP endpoint on 127.0.0.1 for the whole process, each call
authorised by the capability token of the turn it acts for (docs/chat-tools.md says why not stdio).

The token travels as `Authorization: Bearer <token>`; the tools take no conversation or run argument, so
what a call acts on is always the turn the gateway bound its token to (orchestrator/chattools/grants.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.models import IncomingPayload
from orchestrator.chattools.grants import ToolGrant, ToolGrants, TurnBinding
from orchestrator.chattools.names import PATH, SERVER_NAME
from orchestrator.chattools.tools import ChatTools

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("switchyard.chattools")
READY_WAIT_S = 30.0  # how long a turn waits for a server still starting before it runs without tools


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
        self.grants = ToolGrants()
        self._host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # set when started, or when starting failed
        self.url: str | None = None

    def start_soon(self) -> None:
        """Starts listening in the background, so the gateway's first answers do not wait for mcp and uvicorn
        to import (0.5 s of a 1.0 s start to the first reply, measured); a turn granted tools meanwhile waits
        for it (`granted`). A server that cannot start is logged and its turns run without tools."""
        self._starting = asyncio.create_task(self._start_logged(), name="chat-tools-start")

    async def _start_logged(self) -> None:
        try:
            await self.start()
        except Exception as exc:  # a port refused, a broken install: the agents still answer, without tools
            log.warning("the chat tools server did not start (%s): agent turns run without chat tools", exc)
        finally:
            self._ready.set()

    async def started(self) -> None:
        """Waits until a server started with `start_soon` listens, or failed to start (at once without one)."""
        if self._starting is not None:
            await self._ready.wait()

    async def start(self) -> None:
        """Listens on the loopback interface (a free port unless one is given)."""
        # mcp and uvicorn take ~0.6 s to import, paid only here, in a thread: the event loop goes on meanwhile
        app = await asyncio.to_thread(importlib.import_module, "orchestrator.chattools.app")
        self._server = app.serving(self.tools, self.grant_of, name=SERVER_NAME, path=PATH, host=self._host,
                               port=self._port)
        self._task = asyncio.create_task(self._serve(self._server), name="chat-tools-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the chat tools server stopped while starting")
            await asyncio.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}{PATH}"

    async def _serve(self, server: uvicorn.Server) -> None:
        try:
            await server.serve()
        except SystemExit as exc:  # uvicorn's way of saying it could not listen: it must not end the gateway
            raise RuntimeError(f"cannot listen on {self._host}:{self._port} (logged above)") from exc

    async def stop(self) -> None:
        """Stops listening; calls still open get a few seconds to end (app.GRACE_SEC; the handler stops its
        turns first)."""
        if self._starting is not None and not self._starting.done():
            await asyncio.gather(self._starting, return_exceptions=True)  # then stopped as a started one
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.gather(self._task, return_exceptions=True)
        self._server, self._task, self.url = None, None, None

    @contextlib.asynccontextmanager
    async def granted(self, conversation: str, scope: str | None, *, run_id: str, step_id: str | None,
                      reply_to: IncomingPayload, agent: str, prompt: str = "") -> AsyncIterator[ToolEndpoint | None]:
        """The endpoint one turn reaches its tools at, for as long as the turn runs (None: not serving)."""
        if self._starting is not None and not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), READY_WAIT_S)
        if self.url is None:
            yield None
            return
        binding = TurnBinding(run_id, step_id, reply_to, agent, hashlib.sha256(prompt.encode()).hexdigest()[:12])
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

    def grant_of(self, authorization: str) -> ToolGrant | None:
        """The grant an `Authorization: Bearer <token>` header names, or None."""
        token = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else ""
        return self.grants.get(token) if token else None
