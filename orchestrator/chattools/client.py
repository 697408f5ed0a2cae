"""Calling the chat tools from Python with the `mcp` client, as a CLI's MCP client does (the built-in demo
agent, a script provider reading SWITCHYARD_CHAT_TOOLS_URL and SWITCHYARD_CHAT_TOOLS_TOKEN, the tests)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

from orchestrator.chattools.server import ToolEndpoint


class ToolFailed(Exception):
    """A chat tool answered with an error (an MCP tool error): the refusal's text."""


class ChatToolsClient:
    """One connection to the chat tools with one turn's token."""

    def __init__(self, client: Client):
        self._client = client

    async def call(self, tool: str, **arguments: Any) -> str:
        """Calls a tool; returns its text, raises ToolFailed with the text of an error."""
        result = await self._client.call_tool(tool, arguments)
        text = "\n".join(part.text for part in result.content if isinstance(part, TextContent))
        if result.is_error:
            raise ToolFailed(text)
        return text

    async def names(self) -> list[str]:
        """The tools the server lists."""
        return [tool.name for tool in (await self._client.list_tools()).tools]


@asynccontextmanager
async def connected(endpoint: ToolEndpoint) -> AsyncIterator[ChatToolsClient]:
    """A connection to the chat tools at `endpoint`, closed after the block."""
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # it logs each request at INFO: the console's terminal
    timeout = httpx2.Timeout(30.0, read=None)  # `ask` waits for a person
    async with httpx2.AsyncClient(headers=endpoint.headers, timeout=timeout) as http, \
            Client(streamable_http_client(endpoint.url, http_client=http)) as client:
        yield ChatToolsClient(client)
