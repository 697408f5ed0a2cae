"""The spec-002 `queue/outgoing/` folder on the postgres backend: a reply file is taken into
`switchyard_outbox` and removed (a FileOutbox's reply, or a file another program dropped there)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.backends.postgres.errors import worth_waiting
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home, scan_mtimes
from gateway.models import OutgoingPayload
from gateway.spool.deadletters import move_to_failed
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog

RECONNECT_MAX_S = 10.0
INSERT = ("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
          "VALUES (%s, %s, %s, %s, %s::jsonb) ON CONFLICT (name) DO NOTHING RETURNING id")
SAME = "SELECT payload = %s::jsonb FROM switchyard_outbox WHERE name = %s"


def oldest_first(home: Home) -> list[str]:
    """The payload files waiting in `queue/outgoing/`, oldest first, as the file backend sends them
    (gateway/runtime/dispatcher.py): by mtime, then by the timestamp the outbox stamped each with (the order it
    wrote them, which one tick of the file clock does not tell), then by name."""
    found = scan_mtimes(home.outgoing, lambda name: name.endswith(".json"))
    keyed = [(mtime, _stamp(home.outgoing / name), name) for name, mtime in found]
    return [name for _, _, name in sorted(keyed)]


def _stamp(path: Path) -> int:
    """The payload's `timestamp`; 0 for a file that cannot be read as one (taking it in sends it to failed/)."""
    try:
        stamp = json.loads(path.read_bytes()).get("timestamp")
    except (OSError, ValueError, AttributeError):
        return 0
    return stamp if isinstance(stamp, int) else 0


async def take_in_file(home: Home, name: str, pool: Any, events: EventLog, *, fsync: bool,
                       on_database_error: Callable[[BaseException], None]) -> None:
    """Moves one `queue/outgoing/` file into the table, then removes it; the file name is the row's
    name (as PgOutbox names rows) unless another host used it. An invalid file goes to failed/;
    while the database is away it is retried with backoff; one the database refuses goes to failed/ too
    (only a lost connection means the database is away: gateway.backends.postgres.errors)."""
    path = home.outgoing / name
    try:
        payload = OutgoingPayload.model_validate(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return
    except (ValueError, ValidationError) as exc:
        with suppress(FileNotFoundError):
            move_to_failed(home, path, fsync=fsync, reason=f"invalid outgoing payload: {exc}", attempts=0,
                           source="outgoing")
        events.emit("outgoing.failed", file=name, reason="invalid outgoing payload", attempts=0)
        return
    conversation = payload.conversationId or payload.senderId or payload.sender
    columns = made_safe([payload.channel, payload.profile, conversation])  # as to_json makes the payload
    document = json.dumps(json.loads(payload.to_json()))
    failures = 0
    row_name = name
    while True:
        try:
            async with pool.connection(timeout=5.0) as conn:
                cursor = await conn.execute(INSERT, (made_safe(row_name), *columns, document))
                if await cursor.fetchone() is None:
                    same = await (await conn.execute(SAME, (document, row_name))).fetchone()
                    if not (same and same[0]):  # another reply has this name: take the next one
                        row_name = f"{Path(name).stem}-{time.time_ns()}.json"
                        continue
                    # else taken in before a crash: only the file was left
        except Exception as exc:
            if not worth_waiting(exc):  # refused: that file's failure, never the queue's
                reason = made_safe(f"cannot be stored in the database: {type(exc).__name__}: {exc}".strip())
                with suppress(FileNotFoundError):
                    move_to_failed(home, path, fsync=fsync, reason=reason, attempts=0, source="outgoing")
                events.emit("outgoing.failed", file=name, reason=reason, attempts=0)
                return
            failures += 1
            on_database_error(exc)
            await asyncio.sleep(backoff_delay(failures, 0.5, RECONNECT_MAX_S))
            continue
        path.unlink(missing_ok=True)
        return
