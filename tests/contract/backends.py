"""One harness per backend for the contract tests: each gives the stores of gateway/stores.py and
orchestrator/storage/stores.py, several handles on one shared state (two "hosts", or a process and the one that
starts after it); where the memory backend has no such store (an outbox) the test skips with the reason.

A store the composition's Backend opens (gateway.backends.Backend: pairing, approvals, locks, dead letters, and
the orchestrator's runs, sessions, history, schedules and usage through `store`) is opened as `switchyard run`
opens it: gateway.composition.open_backend on a plugin manager as gateway/app.py builds one, a new Backend
per handle (another process), closed after the test. The stores a runtime builds for itself (queue, answered
index, delivery journal, event sink) and the memory backend's orchestrator stores (no plugin declares them)
are made here by hand.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from typing import Any

import psycopg
import pytest

from gateway.backends import Backend as StorageBackend
from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.memory import MemoryAnswered, MemoryEventSink, MemoryJournal, MemoryQueue
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.backends.memory.state import MemoryState
from gateway.channelkit.access import Pairing
from gateway.channelkit.delivery import DeliveryJournal
from gateway.composition import open_backend
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import FileOutbox, conversation_of, outgoing_name
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import QueueSettings, Settings
from gateway.spool.deadletters import move_to_failed
from gateway.spool.queue import FileQueue
from gateway.stores import AnsweredStore, Approvals, DeadLetterStore, DeliveryJournalStore, Locks, QueueStore
from gateway.telemetry.events import EventLog, read_events
from orchestrator.agents.sessions import ConversationHistory, SessionStore
from orchestrator.schedules.records import MemoryScheduleRecords, ScheduleRecords
from orchestrator.schedules.reminders import MemoryReminders, ReminderStore
from orchestrator.storage.memory import MemoryRecords, MemoryRunStore, RunsState
from orchestrator.storage.stores import HISTORY, REMINDERS, RUNS, SCHEDULES, SESSIONS, USAGE, RunRecords
from orchestrator.usage.records import MemoryUsageRecords, Spent, UsageRecords

SETTINGS = Settings(queue=QueueSettings(fsync=False))
PG_DSN_ENV = "SWITCHYARD_CONTRACT_DSN"
"""The variable `queue.dsn_env` names on the postgres harness (tests/contract/conftest.py sets it)."""
REPLY_TEMPLATE = (b'{"channel": "console", "message": "TEXT", "timestamp": 1, "messageId": "m1", '
                  b'"conversationId": "c1"}')

NO_MEMORY_OUTBOX = "the in-memory backend has no outbox: its dead letters are messages only"


class Backend:
    """The stores of one backend; the base class opens those of the composition's Backend (`opened`) and
    says "not on this backend" for the others."""

    name = "?"

    def __init__(self, home: Home, settings: Settings, plugins: Sequence[object] = ()):
        self.home = home
        self.settings = settings
        self.plugins = build_plugin_manager(settings, extra=plugins)  # as gateway/app.py's Gateway is given
        self.backends: list[StorageBackend] = []

    def opened(self) -> StorageBackend:
        """The backend as `switchyard run` opens it (gateway.composition.open_backend): each call another
        process on the same state; `close` closes them all."""
        backend = open_backend(self.home, self.settings, self.plugins)
        self.backends.append(backend)
        return backend

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def queue(self, worker: str) -> QueueStore:
        """A handle on the backend's queue named `worker` (another process, or the next one to start)."""
        raise NotImplementedError

    def dead_letters(self) -> DeadLetterStore:
        return self.opened().dead_letters()

    def make_dead(self, data: bytes, reason: str, conversation: str, hint: str = "dead") -> str:
        """A dead message of these bytes and reason, dead-lettered as this backend does it; its name."""
        queue = self.queue("dead-letterer")
        queue.open()
        queue.enqueue(data, hint=hint)
        queue.rescan()
        claimed = queue.claim()
        assert claimed is not None
        name = queue.dead_letter(claimed, reason, attempts=3, conversation=conversation).name
        queue.close()
        return name

    def make_dead_reply(self, text: str, reason: str) -> str:
        """A reply the delivery gave up on, dead-lettered as this backend does it; its name."""
        pytest.skip(NO_MEMORY_OUTBOX)

    def pending_replies(self) -> list[str]:
        """The texts of the replies waiting to be delivered."""
        pytest.skip(NO_MEMORY_OUTBOX)

    def queued(self) -> list[tuple[bytes, int]]:
        """(bytes, attempts) of every message waiting in the queue, in the order it gives them out: claimed
        by a handle that then stops, so the next handle to open puts them all back."""
        queue = self.queue("reader")
        queue.open()
        queue.rescan()
        found = []
        while (claimed := queue.claim()) is not None:
            found.append((claimed.data, claimed.attempts))
        queue.close()
        return found

    def answered(self, window_sec: float) -> AnsweredStore:
        raise NotImplementedError

    def reply_waiting(self, reply: OutgoingPayload) -> None:
        """Stores `reply` as waiting for delivery where this backend keeps replies its journal records parts
        of (the postgres outbox row); nothing where the journal is a record of its own (files, memory)."""

    def reply_stored(self, job: str, message: IncomingPayload, reply: OutgoingPayload) -> None:
        """`message`, taken in as `job` and gone from the queue, answered with `reply` where this backend
        stores replies: the home's queue/outgoing/ (files, memory)."""
        FileOutbox(self.home, EventLog(self.home.events_file), fsync=False).write(reply)

    def pairing(self) -> Pairing:
        return self.opened().pairing()

    def locks(self, holder: str, ttl_s: float) -> Locks:
        return self.opened().locks(holder=holder, ttl_s=ttl_s)

    def approvals(self) -> Approvals:
        """A new handle on the backend's approvals (another process, or the next one to start)."""
        return self.opened().approvals()

    def journal(self) -> DeliveryJournalStore:
        raise NotImplementedError

    def runs(self) -> RunRecords:
        return self.opened().store(RUNS, fsync=False)

    def sessions(self) -> SessionStore:
        """A handle on the provider sessions (each call: another process or host on the same state)."""
        return self.opened().store(SESSIONS)

    def history(self) -> ConversationHistory:
        """A handle on the conversations' recent exchanges (each call: another process or host)."""
        return self.opened().store(HISTORY)

    def schedules(self) -> ScheduleRecords:
        """A handle on the backend's schedule records (each call: another process or host on the same state)."""
        return self.opened().store(SCHEDULES)

    def reminders(self) -> ReminderStore:
        """A handle on the backend's reminders (each call: another process or host on the same state)."""
        return self.opened().store(REMINDERS)

    def usage(self, holder: str | None = None) -> UsageRecords:
        """A handle on the backend's usage totals (each call: another process or host on the same state), whose
        reservations `holder` makes (`<host>:<pid>:…`; None: this process; the memory backend has none)."""
        return self.opened().store(USAGE, holder=holder)

    def plant_usage(self, day: date, kind: str, key: str, figures: list[float]) -> None:
        """Stores one turn's figures (usd, tokens in, tokens out, turns, seconds) for one key as they are, past every
        check of `add`: what an older version, a torn write or a hand edit may have left."""
        raise NotImplementedError

    def events(self) -> tuple[EventLog, Any]:
        """An EventLog with this backend's sink, and a function giving back what the backend stored."""
        raise NotImplementedError


class MemoryHarness(Backend):
    """The in-memory backend (gateway/backends/memory/backend.py) on one MemoryState; the orchestrator's
    stores, which no plugin declares on it, on states of their own."""

    name = "memory"

    def __init__(self, home: Home):
        self.state = MemoryState()
        super().__init__(home, memory_settings(SETTINGS), [MemoryBackendPlugin(self.state)])
        self.journal_state = MemoryJournal()
        self.runs_state = RunsState()
        self.record_states: dict[str, MemoryRecords] = {}
        self.schedule_state = MemoryScheduleRecords()
        self.reminder_state = MemoryReminders()
        self.usage_state = MemoryUsageRecords()

    def queue(self, worker: str) -> QueueStore:
        return MemoryQueue(self.state.queue, worker=worker)

    def answered(self, window_sec: float) -> AnsweredStore:
        return MemoryAnswered(self.state.answered, window_sec=window_sec)

    def journal(self) -> DeliveryJournalStore:
        return self.journal_state.twin()

    def runs(self) -> RunRecords:
        return MemoryRunStore(self.runs_state)

    def sessions(self) -> SessionStore:
        return SessionStore(self.record_states.setdefault("session", MemoryRecords()).twin())

    def history(self) -> ConversationHistory:
        return ConversationHistory(self.record_states.setdefault("history", MemoryRecords()).twin())

    def schedules(self) -> ScheduleRecords:
        return self.schedule_state.twin()

    def reminders(self) -> ReminderStore:
        return self.reminder_state.twin()

    def usage(self, holder: str | None = None) -> UsageRecords:
        return self.usage_state.twin()

    def plant_usage(self, day: date, kind: str, key: str, figures: list[float]) -> None:
        self.usage_state._days[(day, kind, key)] = Spent(*figures)  # type: ignore[arg-type]

    def events(self) -> tuple[EventLog, Any]:
        log = EventLog(self.home.root / "memory-events.jsonl")
        sink = MemoryEventSink(redact=log.redact)
        log.observe(sink.observe)

        def stored() -> list[dict[str, Any]]:
            sink.close()
            return sink.stored()

        return log, stored


class FilesHarness(Backend):
    name = "files"

    def __init__(self, home: Home):
        super().__init__(home, SETTINGS)

    def queue(self, worker: str) -> QueueStore:
        queue = FileQueue(self.home, fsync=False)
        queue.worker_dir = self.home.processing / f"w-{worker}"  # one processing folder per "process"
        return queue

    def make_dead_reply(self, text: str, reason: str) -> str:
        """As the dispatcher does: the reply's file moved from outgoing/ to failed/ with its report."""
        path = self.home.outgoing / "console_m1_1.json"
        path.write_bytes(REPLY_TEMPLATE.replace(b"TEXT", text.encode()))
        return move_to_failed(self.home, path, fsync=False, reason=reason, attempts=5, source="outgoing").name

    def pending_replies(self) -> list[str]:
        return [json.loads(path.read_bytes())["message"] for path in sorted(self.home.outgoing.glob("*.json"))]

    def answered(self, window_sec: float) -> AnsweredStore:
        index = AnsweredIndex(self.home.state / "answered.jsonl", window_sec=window_sec, fsync=False)
        index.open()  # a second handle is the next process: it reads what the first recorded when it opens
        return index

    def journal(self) -> DeliveryJournalStore:
        return DeliveryJournal(self.home, "profile")

    def plant_usage(self, day: date, kind: str, key: str, figures: list[float]) -> None:
        folder = self.home.state / "usage"
        folder.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"keys": {kind: key}, "spent": figures})  # NaN and Infinity as Python's json writes them
        with open(folder / f"{day.isoformat()}.log", "a", encoding="utf-8") as log:
            log.write(f"\n{line}\n")

    def events(self) -> tuple[EventLog, Any]:
        log = EventLog(self.home.events_file)

        def stored() -> list[dict[str, Any]]:
            log.close()
            return read_events(self.home.events_file)

        return log, stored


class PostgresHarness(Backend):
    """The postgres backend on the database at `dsn`, which the variable `PG_DSN_ENV` names to it."""

    name = "postgres"

    def __init__(self, dsn: str, home: Home):
        self.dsn = dsn
        self.pools: list[Any] = []
        queue = SETTINGS.queue.model_copy(update={"backend": "postgres", "dsn_env": PG_DSN_ENV})
        super().__init__(home, SETTINGS.model_copy(update={"queue": queue}))

    def queue(self, worker: str) -> QueueStore:
        """gateway/backends/postgres/queue.py's PgQueue as the handle `worker` (its holder name) on its own pool."""
        from gateway.backends.postgres.db import SharedPool
        from gateway.backends.postgres.queue import PgQueue

        pool = SharedPool(self.dsn)
        self.pools.append(pool)
        return PgQueue(pool, holder=worker, lease_s=self.settings.queue.lease_sec)

    def close(self) -> None:
        super().close()
        for pool in self.pools:
            pool.close()

    def make_dead_reply(self, text: str, reason: str) -> str:
        """As gateway/backends/postgres/dispatcher.py leaves it: the outbox row in state dead with its reason."""
        with psycopg.connect(self.dsn) as conn:
            conn.execute("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload, state, "
                         "attempts, reason) VALUES ('console_m1_1.json', 'console', 'console', 'c1', %s, 'dead', 5, "
                         "%s)", (REPLY_TEMPLATE.replace(b"TEXT", text.encode()).decode(), reason))
        return "console_m1_1.json"

    def pending_replies(self) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            return [str(row[0]) for row in conn.execute(
                "SELECT payload->>'message' FROM switchyard_outbox WHERE state = 'pending' ORDER BY id")]

    def queued(self) -> list[tuple[bytes, int]]:
        with psycopg.connect(self.dsn) as conn:
            return [(bytes(data), int(attempts)) for data, attempts in conn.execute(
                "SELECT payload, attempts FROM switchyard_messages WHERE state = 'queued' ORDER BY id")]

    def answered(self, window_sec: float) -> AnsweredStore:
        from gateway.backends.postgres.answered import PgAnswered

        return PgAnswered(self.dsn, window_sec=window_sec)

    def reply_waiting(self, reply: OutgoingPayload) -> None:
        """As gateway/backends/postgres/outbox.py PgOutbox leaves it: a pending outbox row."""
        with psycopg.connect(self.dsn) as conn:
            conn.execute("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
                         "VALUES (%s, %s, %s, %s, %s::jsonb)", (outgoing_name(reply), reply.channel, reply.profile,
                                                                 conversation_of(reply), reply.to_json().decode()))

    def reply_stored(self, job: str, message: IncomingPayload, reply: OutgoingPayload) -> None:
        """As PgAnswering leaves a message it answered (its row done) and PgOutbox the reply (a row)."""
        from tests.backends.postgres.helpers import insert_message

        with psycopg.connect(self.dsn) as conn:
            if conn.execute("SELECT 1 FROM switchyard_messages WHERE name = %s", (job,)).fetchone() is None:
                insert_message(conn, job, message.to_json(), state="done")
        self.reply_waiting(reply)

    def journal(self) -> DeliveryJournalStore:
        from gateway.backends.postgres.journal import PgJournal

        return PgJournal(self.dsn)

    def plant_usage(self, day: date, kind: str, key: str, figures: list[float]) -> None:
        with psycopg.connect(self.dsn) as conn:
            conn.execute("INSERT INTO switchyard_usage (day, kind, key, usd, tokens_in, tokens_out, turns, seconds) "
                         "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", (day, kind, key, *figures))

    def events(self) -> tuple[EventLog, Any]:
        from gateway.backends.postgres.events import attach_event_sink

        log = EventLog(self.home.events_file)
        close = attach_event_sink(log, self.dsn)

        def stored() -> list[dict[str, Any]]:
            close()
            with psycopg.connect(self.dsn) as conn:
                return [dict(row[0]) for row in conn.execute("SELECT event FROM switchyard_events ORDER BY id")]

        return log, stored
