"""The console channel against the conformance kit: stdin is a pipe, stdout a buffer."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator

import pytest

from gateway import ChannelContext, ChannelProfile
from gateway.conformance import ChannelConformance, ChannelDriver, SentItem
from plugins.console import ConsoleChannel


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
        lines = self.stdout.getvalue().splitlines()
        return [SentItem(conversation="console", text=line.split("] ", 1)[1]) for line in lines if "] " in line]

    def close(self) -> None:
        os.close(self._write_fd)
        os.close(self._read_fd)


class TestConsoleConformance(ChannelConformance):
    @pytest.fixture
    async def driver(self) -> AsyncIterator[ConsoleDriver]:
        driver = ConsoleDriver()
        yield driver
        driver.close()
