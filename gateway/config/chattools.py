"""`chat_tools:` in settings.yaml: the MCP tools an agent turn gets, and how much one turn may send with them."""

from __future__ import annotations

from pydantic import Field

from gateway.config.strict import Strict


class ChatToolsSettings(Strict):
    """The chat tools an agent turn gets (docs/chat-tools.md): on or off, and what one turn may send."""

    enabled: bool = True
    max_messages: int = Field(default=20, ge=0)  # send_message + send_file calls per turn
    max_file_bytes: int = Field(default=52_428_800, ge=0)  # the bytes of files one turn may send (all together)
    ask_timeout_sec: float = Field(default=600, gt=0)  # `ask` returns "no answer" after this
    max_reminders: int = Field(default=20, ge=0)  # `remind`: how many reminders one conversation may hold
