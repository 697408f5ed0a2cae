"""The small interfaces between the gateway, channel plugins and the orchestrator."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gateway.channelkit.attachments import AttachmentPolicy, AttachmentRefused, attachment_folder, read_attachment
from gateway.home import Home, safe_name
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.seams import Channel as Channel
from gateway.seams import DeliveryRecord as DeliveryRecord
from gateway.seams import Handler as Handler
from gateway.seams import PermanentError as PermanentError
from gateway.seams import Sink as Sink
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog

if TYPE_CHECKING:
    import asyncio

    from gateway.backends import Backend
    from gateway.channelkit.access import AccessPolicy
    from gateway.channelkit.pairing import Pairing

log = logging.getLogger("switchyard")
T = TypeVar("T")

BuiltinProvider = Callable[[str, dict[str, Any]], Awaitable[str]]
"""An in-process provider: `async (prompt, request) -> answer` (from the `switchyard_providers` hook)."""

LateDeadLetter = Callable[[IncomingPayload, str, list[str]], str | None]
"""Dead-letters a message already answered (acknowledged) whose work then failed permanently:
`(message, reason, errors) -> the dead letter's name`, None while the message is still being answered
(call again shortly). Its original bytes when the queue still holds them, else `message` itself
(the report says `source: run`); it is no longer counted as answered, so `dead retry` runs it again.
Idempotent: a message already dead-lettered so gives the same name."""


INTAKE_FAILED_REPLY = ("Sorry, I could not take in your message: the gateway could not store it. "
                       "Please send it again in a few minutes.")
"""What a channel whose platform will not redeliver a message tells its sender when the sink failed
(the gateway already retried the write for a minute), sent directly, not through the outbox."""


class ConfigurationError(PermanentError, RuntimeError):
    """A setting, environment variable or library a plugin needs is missing: retrying cannot help."""


class DeliveryError(Exception):
    """A channel could not deliver an outgoing payload; the dispatcher retries it with backoff."""

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Outbox(Protocol):
    """Stores outgoing payloads for delivery (used for replies pushed later, e.g. run results): files in
    `queue/outgoing/` on the file backend, rows of the database's outbox on PostgreSQL."""

    def write(self, payload: OutgoingPayload) -> Path | str:
        """Stores one payload atomically under its spec-002 name; returns where: the file's path, or the
        name of the row (no file exists then)."""

    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        """Whether it holds (waiting, sent or dead) a reply to `channel`'s message `message_id` carrying
        run `run_id` in `run_state`: a result written just before a crash is then not pushed again."""


class StatusCache(Protocol):
    """What a `switchyard_status` hook may keep between runs of `switchyard status` (the CLI's StatusFileCache,
    gateway/cli/statuscache.py): a value derived from configuration files, computed again only when
    settings.yaml, one of `files` or the validating code changed."""

    def remember(self, key: str, compute: Callable[[], T], files: Callable[[], Iterable[Path]] = tuple) -> T:
        """The value remembered under `key`, or `compute()` (remembered with `files`) when one changed."""


@dataclass
class ChannelContext:
    """What the gateway gives a channel plugin: its home, settings, event log and delivery state."""

    home: Home
    settings: Settings
    profile: ChannelProfile
    events: EventLog
    outbox: Outbox
    on_state: Callable[[str, str | None], None] | None = None
    """Set by the gateway: records this channel's own report (`note`, `ended`) for `switchyard status`."""
    pairing: Pairing | None = None
    """Set by the gateway: its backend's pairing store, opened once for every channel (`access` uses it)."""
    tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    """The tasks `supervise` started that are still running."""

    @cached_property
    def access(self) -> AccessPolicy:
        """Who may talk to this profile: `allow_from`, and pairing with the backend's store (`pairing`: a
        profile with `pairing: true` in a context built without one raises ValueError)."""
        from gateway.channelkit.access import AccessPolicy

        return AccessPolicy(self.home, self.profile, self.settings, store=self.pairing)

    def reconfigure(self, profile: ChannelProfile, settings: Settings) -> None:
        """Takes this profile as settings.yaml was reloaded while the channel runs: `access` admits its new
        `allow_from` (the only key of a running profile applied without a restart)."""
        self.profile, self.settings = profile, settings
        if "access" in self.__dict__:  # built already: the channel holds it
            self.access.reconfigure(profile)

    def note(self, text: str | None) -> None:
        """Shows `text` beside this running channel's state in `switchyard status` (None clears it)."""
        if self.on_state is not None:
            self.on_state("running", text)

    def ended(self, reason: str) -> None:
        """Tells the gateway this channel stopped by itself (e.g. its user closed its input): `status` shows
        it stopped with `reason`, and the gateway stops when no other channel is left running.
        Call it on the event loop's thread."""
        if self.on_state is not None:
            self.on_state("stopped", reason)

    def supervise(self, work: Callable[[], Awaitable[None]], name: str, *,
                  retry_s: tuple[float, float] | None = None) -> asyncio.Task[None]:
        """Runs `work()` (an intake loop the plugin starts itself) in a task named `<profile>:<name>` that starts
        it again after a pause, 1 s doubling to 5 min (or `retry_s`: first, cap), each time it raises, with one
        log line and a `channel.task_failed` event a failure; the task ends when `work()` returns or `stop_tasks`
        cancels it (the gateway does after the channel's `stop()`). Call it on the event loop's thread."""
        import asyncio

        from gateway.channelkit.backoff import RETRY_INITIAL_S, RETRY_MAX_S

        pauses = retry_s or (RETRY_INITIAL_S, RETRY_MAX_S)
        task = asyncio.create_task(_keep_running(work, name, self.profile, self.events, pauses),
                                   name=f"{self.profile.id}:{name}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def stop_tasks(self) -> None:
        """Cancels the tasks `supervise` started and waits for them to end."""
        import asyncio

        running = list(self.tasks)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    @property
    def files_dir(self) -> Path:
        """Where downloaded attachments go (`<home>/files/<profile>/`)."""
        return self.home.files / safe_name(self.profile.id)

    async def save_attachment(self, filename: str, data: bytes, *, conversation: str | None = None) -> Path:
        """Stores a downloaded attachment with a unique, safe name in the folder of `conversation` (the
        conversationId of the message that brought it), so replies to that conversation, and only
        those, may send it back; without a conversation it lands in `files/<profile>/`, never sent back."""
        folder = attachment_folder(self.home, self.profile.id, conversation) if conversation else self.files_dir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.time_ns()}-{safe_name(filename)}"
        import aiofiles  # here: it loads asyncio, which `switchyard status` does without

        async with aiofiles.open(path, "wb") as handle:
            await handle.write(data)
        return path.resolve()

    @cached_property
    def attachments(self) -> AttachmentPolicy:
        """Which files replies may carry (their conversation's own, and `files.extra_roots`)."""
        return AttachmentPolicy(self.home, [self.home.resolve(root) for root in self.settings.files.extra_roots])

    async def read_attachment(self, outgoing: OutgoingPayload, path: str | os.PathLike[str]) -> bytes:
        """The bytes to upload for one of `outgoing`'s files: the file the dispatcher opened and
        checked at delivery, else opened and checked now. Every channel uploads through this.

        Raises PermanentError when the file may not be sent (a link, not a regular file, or outside
        the folders of the reply's conversation).
        """
        try:
            return await read_attachment(outgoing, path, self.attachments)
        except AttachmentRefused as exc:
            raise PermanentError(f"attachment refused: {exc}") from None
        except OSError as exc:
            raise DeliveryError(f"cannot read attachment {os.fspath(path)}: {exc.strerror}") from None


async def _keep_running(work: Callable[[], Awaitable[None]], name: str, profile: ChannelProfile, events: EventLog,
                        retry_s: tuple[float, float]) -> None:
    """Runs `work()` until it returns (or the task is cancelled), starting it again after a jittered backoff each
    time it raises: one log line and a `channel.task_failed` event a failure (ChannelContext.supervise). A run
    that lasted longer than the cap counts as recovered: the next failure waits the first pause again."""
    import asyncio

    from gateway.channelkit.backoff import delay

    initial_s, max_s = retry_s
    failures = 0
    while True:
        started = time.monotonic()
        try:
            await work()
            return
        except Exception as exc:
            failures = 1 if time.monotonic() - started > max_s else failures + 1
            pause = delay(failures, initial_s, max_s, jitter=(0.5, 1.0))
            reason = events.redact(f"{type(exc).__name__}: {exc}")
            log.error("channel %s (%s): task %s failed (%s); started again in %.1fs", profile.id, profile.type,
                      name, reason, pause)
            events.emit("channel.task_failed", channel=profile.type, profile=profile.id, task=name, reason=reason,
                        attempt=failures, delay_ms=int(pause * 1000))
        await asyncio.sleep(pause)


@dataclass(frozen=True)
class FunctionSpec:
    """A function the selector may call through `command_invoke`, with a JSON-Schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    call: Callable[[dict[str, Any]], Awaitable[str] | str]


@dataclass
class HandlerContext:
    """What the gateway gives the handler it builds: home, settings, events, outbox, queue figures."""

    home: Home
    settings: Settings
    events: EventLog
    outbox: Outbox
    queue_stats: Callable[[], dict[str, Any]]
    functions: list[FunctionSpec] = field(default_factory=list)
    builtin_providers: dict[str, BuiltinProvider] = field(default_factory=dict)
    dead_letter: LateDeadLetter | None = None
    backend: Backend | None = None
    """The storage backend the gateway composed (gateway/composition.py), whose stores the handler opens;
    the gateway always gives it (None only where a test builds a handler on stores of its own)."""
    enqueue: Sink | None = None
    """Posts a message through the gateway's intake, as a channel's sink does (scheduled prompts); None in a
    process that takes no messages in (a postgres `worker`)."""
    file_limits: dict[str, int] = field(default_factory=dict)
    """The largest file (bytes) each channel type takes from a bot, as its plugin declares it (the hook
    `switchyard_file_limits`); a type not named has no limit of its own."""
