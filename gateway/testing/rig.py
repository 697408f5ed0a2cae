"""The conformance kit's harness (gateway/testing/conformance.py runs its checks with it): the driver a plugin's tests
implement for its fake platform, a channel started in a throwaway home with a real queue as its sink, and
helpers to send a reply as the dispatcher does."""

from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.api import Channel, ChannelContext, DeliveryError
from gateway.channelkit.access import PairingStore
from gateway.channelkit.edits import to_queue
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import FileOutbox
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, FileSettings, Settings
from gateway.spool.queue import FileQueue
from gateway.telemetry.events import EventLog, now_ms


@dataclass
class SentItem:
    """One message the fake platform received from the bot."""

    conversation: str
    text: str | None = None
    filename: str | None = None
    data: bytes | None = None
    reply_to: str | None = None
    buttons: list[tuple[str, str]] = field(default_factory=list)  # (id, label) of each button shown under it


class ChannelDriver:
    """What a plugin's tests implement to drive its fake platform server."""

    type: str = ""
    limit: int = 2000
    conversation: str = "c1"  # the platform id of the chat the checks use
    supports_files: bool = True
    supports_rate_limit: bool = True
    supports_own_messages: bool = True
    supports_access_control: bool = True
    splits_text: bool = True
    redelivers_refused_messages: bool = False  # True: the platform sends a message again when the sink failed
    supports_refusal: bool = True  # the platform can refuse a send for good (blocked, removed, gone)
    supports_buttons: bool = False  # the fake delivers taps on the buttons the bot showed
    supports_edits: bool = False  # the platform reports a user's edits (gateway/testing/conformance_edits.py)

    def profile_options(self) -> dict[str, Any]:
        """Type-specific profile keys pointing the plugin at the fake (base URLs, token_env, …)."""
        return {}

    def build_channel(self, profile: ChannelProfile, context: ChannelContext) -> Channel:
        """Builds the channel the way the gateway does: through the plugin hook."""
        channel: Channel | None = build_plugin_manager(context.settings).hook.switchyard_channels(
            profile=profile, context=context)
        assert channel is not None, f"no plugin builds channel type {profile.type!r}"
        return channel

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        """Makes the fake platform deliver a user's message (optionally with one file) to the bot."""
        raise NotImplementedError

    async def bot_says(self, text: str) -> None:
        """Makes the fake platform deliver a message authored by the bot itself."""
        raise NotImplementedError

    def sent(self) -> list[SentItem]:
        """Everything the bot sent to the fake platform so far, in order."""
        raise NotImplementedError

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        """Answers the next `times` send calls with HTTP 429 and this retry-after."""
        raise NotImplementedError

    def fail_next(self, times: int, after: int = 0) -> None:
        """Answers `times` send calls with a server error, after letting `after` calls succeed."""
        raise NotImplementedError

    def refuse_next(self) -> None:
        """Answers the next send call with the platform's permanent refusal (the bot was blocked or
        removed from the chat, or the chat is gone), as the real API words it."""
        raise NotImplementedError

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> Any:
        """Makes the fake platform deliver a tap on the button with this id under the bot's latest message
        showing it, as the platform does; returns what `tap_again` needs to deliver the same tap again."""
        raise NotImplementedError

    async def user_edits_last(self, text: str, *, sender_id: str = "1001", sender: str = "Ada") -> Any:
        """Makes the fake platform report that the user edited their latest message to `text`; returns what
        `edit_again` needs to report the same edit again."""
        raise NotImplementedError

    async def edit_again(self, edit: Any) -> None:
        """Reports an edit once more, as the platform does when it is not sure the first delivery arrived."""
        raise NotImplementedError

    async def tap_again(self, tap: Any) -> None:
        """Delivers a tap once more, as the platform does when it is not sure the first delivery arrived."""
        raise NotImplementedError


@dataclass
class ChannelRig:
    """A channel of the driver's type started in a throwaway home, with a real queue as its sink."""

    driver: ChannelDriver
    root: Path
    allow_from: list[str] | None = None
    refuse_intake: bool = False  # the sink fails as a full disk would (after the gateway's own retries)
    channel: Channel | None = None
    context: ChannelContext | None = None
    queue: FileQueue | None = None
    paths: list[Path] = field(default_factory=list)

    async def start(self) -> Channel:
        home = Home(self.root)
        home.create()
        access: dict[str, Any] = {} if self.allow_from is None else {"allow_from": self.allow_from}  # absent: all
        profile = ChannelProfile(id="conformance", type=self.driver.type, **access, **self.driver.profile_options())
        settings = Settings(channels=[profile], files=FileSettings(extra_roots=[str(self.root.parent)]))
        events = EventLog(home.events_file)
        outbox = FileOutbox(home, events, extra_roots=[self.root.parent], fsync=False)
        self.context = ChannelContext(home=home, settings=settings, profile=profile, events=events,
                                      outbox=outbox, pairing=PairingStore(home))  # the file backend's, as a `run`
        self.queue = FileQueue(home, fsync=False)
        self.queue.open()
        self.channel = self.driver.build_channel(profile, self.context)

        async def sink(payload: IncomingPayload) -> Path:
            assert self.queue is not None
            if self.refuse_intake:
                raise OSError(errno.ENOSPC, "No space left on device")
            queued = to_queue(self.queue.fold_edit, payload)
            if queued is None:  # as the gateway's sink: an edit, folded into its waiting original
                return self.context.home.incoming if self.context else self.root
            path = self.queue.enqueue(queued.to_json(), hint=queued.messageId)
            self.paths.append(path)
            return path

        try:
            await self.channel.start(sink)
        except BaseException:
            self.queue.close()  # (a start that fails is never stopped)
            raise
        return self.channel

    def incoming(self) -> list[dict[str, Any]]:
        """The payloads the channel wrote into incoming/, oldest first."""
        assert self.context is not None
        files = sorted(self.context.home.incoming.glob("*.json"))
        return [json.loads(p.read_bytes()) for p in files]

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.stop()
        if self.queue is not None:
            self.queue.close()


async def send_like_the_dispatcher(channel: Channel, outgoing: OutgoingPayload, attempts: int = 5) -> None:
    """Sends one payload, retrying DeliveryError after its retry_after, as the dispatcher does."""
    for attempt in range(attempts):
        try:
            await channel.send(outgoing)
            return
        except DeliveryError as exc:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(exc.retry_after if exc.retry_after is not None else 0.05)


BUTTONS = [{"id": "ap:k3j9x2:0", "label": "Allow"}, {"id": "ap:k3j9x2:1", "label": "Deny"}]


def reply(text: str, conversation: str, **fields: Any) -> OutgoingPayload:
    """An outgoing payload for the conformance profile."""
    return OutgoingPayload(channel=fields.pop("channel", "x"), channelProfileId="conformance", sender="Ada",
                           message=text, originalMessage="q", timestamp=now_ms(),
                           messageId=f"m{time.time_ns()}", agent="conformance",
                           conversationId=conversation, **fields)
