"""Attachments carried between two homes (two hosts) through the database or a shared folder, written
back safely; and retention of the shared tables."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.backends.postgres import files, maintenance, schema
from gateway.backends.postgres.maintenance import prune
from gateway.channelkit.attachments import attachment_folder
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.settings import Settings
from gateway.telemetry.events import EventLog
from tests.backends.postgres.helpers import insert_message, insert_reply, payload, worker_parts


@pytest.fixture
def hosts(tmp_path: Path, pg_dsn: str) -> tuple[Home, Home]:
    schema.migrate(pg_dsn)
    return Home(tmp_path / "alpha"), Home(tmp_path / "beta")


def _downloaded(home: Home, name: str, data: bytes) -> Path:
    folder = attachment_folder(home, "tg", "chat-1")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder / name


def _incoming(path: Path) -> IncomingPayload:
    return IncomingPayload.model_validate({"channel": "telegram", "channelProfileId": "tg", "message":
                                           f"see [file: {path}]", "timestamp": 1, "messageId": "m1",
                                           "conversationId": "chat-1", "files": [str(path)]})


def _settings(**queue: object) -> Settings:
    return Settings.model_validate({"queue": {"backend": "postgres", **queue}})


def test_a_file_taken_in_on_one_host_is_written_back_on_another(hosts: tuple[Home, Home], pg_dsn: str) -> None:
    alpha, beta = hosts
    original = _downloaded(alpha, "photo.jpg", b"\xff\xd8 jpeg bytes")
    message = _incoming(original)
    with psycopg.connect(pg_dsn) as conn:
        stored = files.store(conn, "m1.json", message, alpha)  # before the message row: checked at commit
        insert_message(conn, "m1.json", message.to_json())
        conn.commit()
        assert stored == [original.relative_to(alpha.root).as_posix()]

        local = files.materialize(conn, "m1.json", message, beta)
        again = files.materialize(conn, "m1.json", message, beta)  # a retry on the same host: same file, kept
    copy = beta.root / stored[0]
    assert copy.read_bytes() == b"\xff\xd8 jpeg bytes"
    assert local.files == [str(copy)] and f"[file: {copy}]" in local.message
    assert again.files == local.files

    with psycopg.connect(pg_dsn) as conn:  # the raw bytes too, as the queue holds them
        rewritten = json.loads(files.materialize(conn, "m1.json", message.to_json(), beta))
    assert rewritten["files"] == [str(copy)]


def test_storing_goes_with_the_transaction_of_the_message(hosts: tuple[Home, Home], pg_dsn: str) -> None:
    alpha, _ = hosts
    message = _incoming(_downloaded(alpha, "a.txt", b"a"))
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", message.to_json())
        files.store(conn, "m1.json", message, alpha)
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM switchyard_files").fetchone() == (0,)
        files.store(conn, "nobody.json", message, alpha)
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.commit()  # no message row: refused at commit


def test_over_the_cap_needs_a_shared_folder(hosts: tuple[Home, Home], pg_dsn: str, tmp_path: Path) -> None:
    alpha, beta = hosts
    message = _incoming(_downloaded(alpha, "big.bin", b"x" * 2048))
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", message.to_json())
        with pytest.raises(files.AttachmentTooLarge, match=r"big\.bin is 2048 bytes.*files\.shared_dir"):
            files.store(conn, "m1.json", message, alpha, settings=_settings(db_files_max_bytes=1024))
        conn.rollback()

        shared = _settings(db_files_max_bytes=1024)
        shared.files.shared_dir = str(tmp_path / "shared")
        insert_message(conn, "m1.json", message.to_json())
        [relative] = files.store(conn, "m1.json", message, alpha, settings=shared)
        conn.commit()
        assert conn.execute("SELECT data IS NULL, size FROM switchyard_files").fetchone() == (True, 2048)
        assert (tmp_path / "shared" / relative).read_bytes() == b"x" * 2048
        local = files.materialize(conn, "m1.json", message, beta, settings=shared)
    assert Path(local.files[0]).read_bytes() == b"x" * 2048


def test_writing_back_never_escapes_files_nor_overwrites_another_file(
        hosts: tuple[Home, Home], pg_dsn: str, tmp_path: Path) -> None:
    alpha, beta = hosts
    original = _downloaded(alpha, "note.txt", b"from alpha")
    message = _incoming(original)
    relative = original.relative_to(alpha.root)
    (beta.root / relative).parent.mkdir(parents=True)
    (beta.root / relative).write_bytes(b"beta's own file")
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", message.to_json())
        files.store(conn, "m1.json", message, alpha)
        conn.commit()
        with pytest.raises(files.FileConflict, match="different file"):
            files.materialize(conn, "m1.json", message, beta)
        assert (beta.root / relative).read_bytes() == b"beta's own file"

        for bad in ("files/../settings.yaml", "/etc/passwd", "settings.yaml", "files/x/../../y"):
            conn.execute("DELETE FROM switchyard_files")
            conn.execute("INSERT INTO switchyard_files (message_name, path, original, size, sha256, data) "
                         "VALUES ('m1.json', %s, '/x', 1, 'x', 'x')", (bad,))
            with pytest.raises(files.FileConflict, match="not a path under files/"):
                files.materialize(conn, "m1.json", message, beta)

        outside = tmp_path / "outside"
        outside.mkdir()
        os.symlink(outside, beta.files / "tg" / "escape")
        conn.execute("DELETE FROM switchyard_files")
        conn.execute("INSERT INTO switchyard_files (message_name, path, original, size, sha256, data) "
                     "VALUES ('m1.json', 'files/tg/escape/evil.txt', '/x', 1, 'x', 'x')")
        with pytest.raises(files.FileConflict, match="link leads out"):
            files.materialize(conn, "m1.json", message, beta)
    assert list(outside.iterdir()) == []


def test_a_file_outside_the_homes_files_is_left_alone(hosts: tuple[Home, Home], pg_dsn: str, tmp_path: Path) -> None:
    alpha, _ = hosts
    (alpha.root).mkdir(parents=True, exist_ok=True)
    (alpha.root / "settings.yaml").write_text("secret: no")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("x")
    message = _incoming(alpha.root / "settings.yaml").model_copy(update={"files": [str(elsewhere)]})
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", message.to_json())
        assert files.store(conn, "m1.json", message, alpha) == []


def test_prune_deletes_what_retention_allows_and_nothing_else(pg_dsn: str) -> None:
    schema.migrate(pg_dsn)
    settings = _settings(duplicate_window_sec=3600, sent_retention_days=1, events_retention_days=2)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO switchyard_answered (identity, answered_at) VALUES "
                     "('old', now() - interval '2 hours'), ('new', now())")
        conn.execute("INSERT INTO switchyard_events (at, holder, event) VALUES "
                     "(now() - interval '3 days', 'h', '{}'), (now(), 'h', '{}')")
        for name, state in (("done-old", "done"), ("dead-old", "dead"), ("queued-old", "queued"), ("done-new", "done")):
            insert_message(conn, name, payload(name), state=state)
        conn.execute("UPDATE switchyard_messages SET updated_at = now() - interval '2 days' WHERE name LIKE '%-old'")
        insert_reply(conn, "sent-old", state="sent")
        insert_reply(conn, "pending-old")
        conn.execute("UPDATE switchyard_outbox SET sent_at = now() - interval '2 days', "
                     "created_at = now() - interval '2 days'")
        conn.commit()
        counts = prune(conn, settings)
        assert counts == {"events": 1, "answered": 1, "sent": 1, "done": 1, "shared_files": 0}
        assert {r[0] for r in conn.execute("SELECT name FROM switchyard_messages")} == {
            "dead-old", "queued-old", "done-new"}
        assert [r[0] for r in conn.execute("SELECT name FROM switchyard_outbox")] == ["pending-old"]
        assert [r[0] for r in conn.execute("SELECT identity FROM switchyard_answered")] == ["new"]


def test_prune_removes_the_shared_copies_of_finished_messages_only(
        hosts: tuple[Home, Home], pg_dsn: str, tmp_path: Path) -> None:
    alpha, _ = hosts
    settings = _settings(db_files_max_bytes=1, sent_retention_days=0, duplicate_window_sec=0)
    settings.files.shared_dir = str(tmp_path / "shared")
    old = _incoming(_downloaded(alpha, "old.bin", b"old bytes"))
    kept = _incoming(_downloaded(alpha, "kept.bin", b"kept bytes"))
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "old.json", old.to_json(), state="done")
        [old_path] = files.store(conn, "old.json", old, alpha, settings=settings)
        insert_message(conn, "dead.json", kept.to_json(), state="dead")
        [kept_path] = files.store(conn, "dead.json", kept, alpha, settings=settings)
        conn.commit()
        assert prune(conn, settings, alpha)["shared_files"] == 1
        assert conn.execute("SELECT message_name FROM switchyard_files").fetchall() == [("dead.json",)]
    assert not (tmp_path / "shared" / old_path).exists()
    assert (tmp_path / "shared" / kept_path).read_bytes() == b"kept bytes"


def _backend(tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, EventLog]:
    from gateway.backends.postgres.processing import PgProcessing
    from gateway.spool.queue import FileQueue

    schema.migrate(pg_dsn)
    monkeypatch.setenv("SWITCHYARD_DSN", pg_dsn)
    home = Home(tmp_path / "home")
    home.create()
    events = EventLog(home.events_file)
    settings = _settings(events_retention_days=2)
    parts = worker_parts(home, settings, events, FileQueue(home, fsync=False))
    return PgProcessing(parts), events


def _old_event(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO switchyard_events (at, holder, event) VALUES (now() - interval '3 days', 'h', '{}')")


def _events(pg_dsn: str) -> int:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM switchyard_events").fetchone()
    assert row is not None
    return int(row[0])


async def test_the_backend_prunes_the_database_and_survives_an_unreachable_one(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the gateway's maintenance loop calls on the postgres backend, whatever the process's role; a
    database it could not reach is tried again at the next call, not an interval later."""
    backend, events = _backend(tmp_path, pg_dsn, monkeypatch)
    _old_event(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO switchyard_events (at, holder, event) VALUES (now(), 'h', '{}')")
    dsn, backend.dsn = backend.dsn, "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    await backend.prune()  # logged, tried again at the next maintenance: never raises into the loop
    backend.dsn = dsn
    await backend.prune()
    assert _events(pg_dsn) == 1
    events.close()


async def test_each_process_prunes_once_an_interval(tmp_path: Path, pg_dsn: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The maintenance loop calls prune every minute on every process; the deleting runs hourly."""
    backend, events = _backend(tmp_path, pg_dsn, monkeypatch)
    _old_event(pg_dsn)
    await backend.prune()
    _old_event(pg_dsn)
    await backend.prune()
    assert _events(pg_dsn) == 1
    monkeypatch.setattr(maintenance, "PRUNE_INTERVAL_S", 0.0)
    await backend.prune()
    assert _events(pg_dsn) == 0
    events.close()


def test_only_one_process_prunes_a_schema_at_a_time(pg_dsn: str) -> None:
    schema.migrate(pg_dsn)
    _old_event(pg_dsn)
    settings = _settings(events_retention_days=2)
    with psycopg.connect(pg_dsn) as holder, psycopg.connect(pg_dsn, autocommit=True) as conn:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (maintenance.PRUNE_LOCK_CLASS,))
        assert maintenance.prune_alone(conn, settings) is None  # another process is pruning: skipped
        assert _events(pg_dsn) == 1
        holder.rollback()
        assert maintenance.prune_alone(conn, settings) == {"events": 1, "answered": 0, "sent": 0, "done": 0,
                                                            "shared_files": 0}
