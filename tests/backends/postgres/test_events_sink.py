"""The shared event log: events reach switchyard_events in batches with the process holder, secrets
masked; with the database down the caller is never failed, the buffer stays bounded and the drop is said."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.backends.postgres import schema
from gateway.backends.postgres.events import EventSink, attach_event_sink
from gateway.disk.locks import process_instance
from gateway.telemetry.events import EventLog


def _until(check: Callable[[], bool], deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, "condition not met before the deadline"
        time.sleep(0.02)


def _events(dsn: str) -> list[tuple[str, dict[str, Any]]]:
    with psycopg.connect(dsn) as conn:
        return [(holder, event) for holder, event in conn.execute(
            "SELECT holder, event FROM switchyard_events ORDER BY id")]


def test_events_are_stored_with_the_holder_and_secrets_masked(tmp_path: Path, pg_dsn: str) -> None:
    schema.migrate(pg_dsn)
    log = EventLog(tmp_path / "events.jsonl", secrets=["s3cr3t-token"])
    close = attach_event_sink(log, pg_dsn)
    for n in range(250):
        log.emit("message.done", job_id=f"m{n}.json", note="token s3cr3t-token")
    close()
    stored = _events(pg_dsn)
    assert [event["job_id"] for _, event in stored] == [f"m{n}.json" for n in range(250)]  # all, in order
    assert {holder for holder, _ in stored} == {process_instance()}
    assert all("s3cr3t" not in str(event) for _, event in stored)


def test_an_event_quoting_text_no_store_can_hold_is_stored_made_safe_and_the_log_goes_on(
        tmp_path: Path, pg_dsn: str) -> None:
    """An error's text with a NUL, a file name that is not UTF-8: the event is kept (U+FFFD in their place)
    in events.jsonl and in the database, never failing the caller nor holding up the events after it."""
    schema.migrate(pg_dsn)
    log = EventLog(tmp_path / "events.jsonl")
    close = attach_event_sink(log, pg_dsn)
    log.emit("job.failed.retryable", job_id="a.json", reason="provider said \x00")
    log.emit("job.failed.final", job_id="\udcff.json", reason="refused")
    log.emit("job.succeeded", job_id="b.json")
    close()
    assert [(event["job_id"], event.get("reason")) for _, event in _events(pg_dsn)] == [
        ("a.json", "provider said \ufffd"), ("\ufffd.json", "refused"), ("b.json", None)]
    assert (tmp_path / "events.jsonl").read_text().count("\ufffd") == 2


class _Outage:
    """Connects to the real database, except while `down` (as when PostgreSQL restarts)."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.down = True
        self.attempts = 0

    def __call__(self) -> psycopg.Connection[Any]:
        self.attempts += 1
        if self.down:
            raise psycopg.OperationalError("connection refused (test outage)")
        return psycopg.connect(self.dsn, autocommit=True)


def test_a_database_outage_never_fails_the_caller_and_the_drop_is_counted(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    schema.migrate(pg_dsn)
    outage = _Outage(pg_dsn)
    sink = EventSink(pg_dsn, max_buffered=20, connect=outage)
    with caplog.at_level(logging.WARNING, logger="switchyard.pg.events"):
        for n in range(50):
            sink.observe({"ts": "2026-11-24T10:00:00.000Z", "event": "message.done", "n": n})
        _until(lambda: "unreachable" in caplog.text)  # logged once the first attempt has failed
        assert outage.attempts >= 1
        assert sink.dropped_total == 30  # the newest 20 are kept, 30 dropped and counted

        outage.down = False
        _until(lambda: sink.stored >= 21, deadline_s=30)
    sink.close()
    stored = [event for _, event in _events(pg_dsn)]
    assert stored[0]["event"] == "events.dropped" and stored[0]["count"] == 30
    assert [event["n"] for event in stored[1:]] == list(range(30, 50))


def test_a_gateway_on_the_postgres_backend_sends_its_events_to_the_database(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.app import Gateway
    from gateway.home import Home
    from gateway.plugin_manager import build_plugin_manager
    from gateway.settings import Settings

    schema.migrate(pg_dsn)
    monkeypatch.setenv("SWITCHYARD_DSN", pg_dsn)
    settings = Settings.model_validate({"queue": {"backend": "postgres"}})
    gateway = Gateway(Home(tmp_path / "home"), settings, build_plugin_manager(settings))
    gateway.events.emit("gateway.probe", n=1)
    gateway._close_event_sink()
    assert [event["event"] for _, event in _events(pg_dsn)] == ["gateway.probe"]


def test_a_batch_the_database_refuses_is_left_out_and_the_events_after_it_are_stored(
        tmp_path: Path, pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """Only the database away keeps a batch for later; one it refuses would be refused forever and hold
    every later event back (before: given back and retried as "database unreachable", forever)."""
    schema.migrate(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE switchyard_events ADD CONSTRAINT refused CHECK (event->>'event' <> 'refused.one')")
    sink = EventSink(pg_dsn)
    sink.observe({"ts": "2026-01-01T00:00:00Z", "event": "refused.one"})
    _until(lambda: sink.refused == 1)
    sink.observe({"ts": "2026-01-01T00:00:01Z", "event": "after.it"})
    sink.close()
    assert [event["event"] for _, event in _events(pg_dsn)] == ["after.it"]
    assert "the database refused 1 event(s)" in caplog.text
    assert "database is unreachable" not in caplog.text
