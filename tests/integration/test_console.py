"""The console channel against the conformance kit: stdin is a pipe, stdout a buffer."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator

import pytest

from gateway import ChannelContext, ChannelProfile, OutgoingPayload
from gateway.testing.conformance import ChannelConformance, ChannelDriver, SentItem
from plugins.console.channel import ConsoleChannel


class ConsoleDriver(ChannelDriver):
    type = "console"
    conversation = "console"
    supports_files = False
    supports_rate_limit = False
    supports_own_messages = False
    supports_access_control = False
    splits_text = False
    supports_refusal = False

    def __init__(self) -> None:
        self.stdout = io.StringIO()
        self._read_fd, self._write_fd = os.pipe()

    def build_channel(self, profile: ChannelProfile, context: ChannelContext) -> ConsoleChannel:
        stdin = os.fdopen(os.dup(self._read_fd), "r")
        return ConsoleChannel(profile.model_copy(update={"sender": "1001"}), stdin=stdin, stdout=self.stdout)

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        os.write(self._write_fd, f"{text}\n".encode())

    def sent(self) -> list[SentItem]:
        """Each printed reply: a line `[agent] text` and the lines after it up to the next reply."""
        items: list[SentItem] = []
        for line in self.stdout.getvalue().splitlines():
            if line.startswith("[") and "] " in line:
                items.append(SentItem(conversation="console", text=line.split("] ", 1)[1]))
            elif items:
                items[-1].text = f"{items[-1].text}\n{line}"
        return items

    def close(self) -> None:
        os.close(self._write_fd)
        os.close(self._read_fd)


class TestConsoleConformance(ChannelConformance):
    @pytest.fixture
    async def driver(self) -> AsyncIterator[ConsoleDriver]:
        driver = ConsoleDriver()
        yield driver
        driver.close()


async def test_without_a_terminal_replies_are_plain_lines_and_other_conversations_are_not_shown() -> None:
    stdout = io.StringIO()
    console = ConsoleChannel(ChannelProfile(id="console", type="console"), stdin=io.StringIO(), stdout=stdout)
    for text, conversation, fields in (("from a run", "console", {"agent": "writer", "workflowRunId": "r-7"}),
                                       ("for switchyard send", "cli", {}), ("plain", "console", {})):
        await console.send(OutgoingPayload(channel="console", sender="Ada", message=text, originalMessage="q",
                                           timestamp=1, messageId="m1", conversationId=conversation, **fields))
    assert stdout.getvalue() == "[writer, run r-7] from a run\n[switchyard] plain\n"
