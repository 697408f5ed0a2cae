"""Helpers for the outbound tests on PostgreSQL: a recording channel, a stand-in Gateway, rows, a cuttable proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gateway.api import DeliveryError, DeliveryRecord, PermanentError
from gateway.channelkit.delivery import DeliveryJournal, Part, deliver_parts
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.runtime.supervision import ChannelSupervisor
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog

CHANNEL = "fake"


class RecordingChannel:
    """A channel that records what it sends: each `|`-separated piece of a reply is one part."""

    name = CHANNEL

    def __init__(self, profile_id: str, home: Home, owner: str = "") -> None:
        self.profile_id = profile_id
        self.owner = owner
        self.sent: list[tuple[str, str]] = []  # (conversation, part text), in sending order
        self.failures: dict[str, int] = {}  # part text -> failures still to give
        self.errors: dict[str, str] = {}  # part text -> what its failures say (else "<text> failed on purpose")
        self.gates: dict[str, asyncio.Event] = {}  # part text -> held until set
        self.refused: set[str] = set()  # part texts the platform refuses for good (PermanentError)
        self.hang_on: set[str] = set()  # part texts whose send never returns (a process killed mid-reply)
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.journal = DeliveryJournal(home, profile_id)

    async def start(self, sink: Any) -> None:
        self.started_at = time.monotonic()

    async def stop(self) -> None:
        self.stopped_at = time.monotonic()

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        parts = [Part(i, text=text) for i, text in enumerate(outgoing.message.split("|"))]
        conversation = outgoing.conversationId or ""

        async def send_part(part: Part) -> str:
            text = part.text or ""
            if text in self.hang_on:
                await asyncio.Event().wait()
            if text in self.gates:
                await self.gates[text].wait()
            if text in self.refused:
                raise PermanentError(f"{text} refused for good")
            if self.failures.get(text, 0) > 0:
                self.failures[text] -= 1
                raise DeliveryError(self.errors.get(text, f"{text} failed on purpose"))
            self.sent.append((conversation, text))
            return f"{self.owner}:{text}"

        return await deliver_parts(outgoing, parts, send_part, self.journal)

    def texts(self, conversation: str | None = None) -> list[str]:
        return [text for conv, text in self.sent if conversation is None or conv == conversation]


def insert_reply(dsn: str, conversation: str, message: str, *, profile: str = "p", name: str | None = None,
                 channel: str = CHANNEL, **extra: Any) -> int:
    """Inserts one pending row as the pgqueue side would (contract columns only; `extra` keys such as
    `progressKey` go into the payload); returns its id."""
    payload = OutgoingPayload(channel=channel, channelProfileId=profile, conversationId=conversation,
                              messageId=f"m-{time.time_ns()}", timestamp=int(time.time() * 1000), message=message,
                              sender="switchyard", senderId="switchyard", **extra)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
                           "VALUES (%s, %s, %s, %s, %s::jsonb) RETURNING id",
                           (name or f"{channel}_{payload.messageId}_{payload.timestamp}.json", channel, profile,
                            conversation, json.dumps(json.loads(payload.to_json())))).fetchone()
    assert row is not None
    return int(row[0])


def rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        return list(cursor.execute("SELECT * FROM switchyard_outbox ORDER BY id"))


class StubGateway:
    """What a Gateway gives PgOutbound: its ChannelSupervisor (starting channels with `_start_channel`,
    writing the status with `_write_status`), home, settings and events."""

    def __init__(self, home: Home, settings: Settings, owner: str) -> None:
        self.home = home
        self.settings = settings
        self.owner = owner
        home.create()
        self.events = EventLog(home.events_file)
        self.started: list[RecordingChannel] = []
        self.status_history: list[dict[str, dict[str, Any]]] = []  # each status written, in order
        self.supervisor = ChannelSupervisor(self._start_channel, self.events, on_change=self._write_status,
                                            spawn=lambda work, name: None)
        self.channels: list[Any] = self.supervisor.channels
        self.channel_status: dict[str, dict[str, Any]] = self.supervisor.status
        self._stopping = self.supervisor.stopping

    async def _start_channel(self, profile: ChannelProfile) -> RecordingChannel:
        channel = RecordingChannel(profile.id, self.home, self.owner)
        await channel.start(None)
        self.started.append(channel)
        return channel

    def _write_status(self) -> None:
        self.status_history.append({k: dict(v) for k, v in self.channel_status.items()})

    def event_names(self) -> list[str]:
        from gateway.telemetry.events import read_events

        return [str(e.get("event")) for e in read_events(self.home.events_file)]


def settings_for(dsn_env: str, lease_sec: float, **queue: Any) -> Settings:
    return Settings.model_validate({
        "queue": {"backend": "postgres", "dsn_env": dsn_env, "lease_sec": lease_sec, "backoff_initial_ms": 20,
                  "backoff_max_ms": 100, "fsync": False, **queue},
        "channels": [{"id": "p", "type": CHANNEL}],
    })


def new_home(root: Path) -> Home:
    home = Home(root)
    home.create()
    return home


class CuttableProxy:
    """A TCP proxy to PostgreSQL on 127.0.0.1 whose `cut()` makes the database unreachable through it."""

    def __init__(self, dsn: str) -> None:
        self.target = conninfo_to_dict(dsn)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    def dsn(self, dsn: str) -> str:
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()

    def cut(self) -> None:
        """Closes the listening socket and every connection through it."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()

    async def restore(self) -> None:
        """Listens again on the same port (the database is back, as after a restart)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(str(self.target.get("host") or "127.0.0.1"),
                                                                 int(self.target.get("port") or 5432))
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
