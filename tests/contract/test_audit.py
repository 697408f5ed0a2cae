"""The audit log (gateway.stores.AuditLog): append-only, a record kept once by its id whichever handle (host)
appends it again, every handle listing the same records oldest first, filtered by time and by who."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from gateway.audit import OPERATOR, AuditRecord
from gateway.stores import AUDIT, AuditLog
from tests.contract.backends import Backend


def _log(backend: Backend) -> AuditLog:
    return backend.opened().store(AUDIT)


def test_a_record_is_kept_once_and_listed_from_every_handle(backend: Backend) -> None:
    host, other = _log(backend), _log(backend)
    assert isinstance(host, AuditLog)
    first = AuditRecord.new(by="console/c/ada", where="console/c/room", action="workflow.start_edit",
                            what="started fix", key="console/c/m1", workflow="fix")
    assert host.append(first)
    again = AuditRecord.new(by="console/c/ada", where="console/c/room", action="workflow.start_edit",
                            what="started fix", key="console/c/m1", workflow="fix")
    assert not other.append(again), "the retried message's record is the same record"
    listed = other.records()
    assert [r.id for r in listed] == [first.id]
    assert listed[0].details == {"workflow": "fix"} and listed[0].by == "console/c/ada"


def test_records_are_listed_oldest_first_and_filtered_by_time_and_who(backend: Backend) -> None:
    log = _log(backend)
    now = datetime.now(UTC)
    old = AuditRecord.new(by=OPERATOR, where="cli", action="dead.drop", what="dropped m1", at=now - timedelta(days=2))
    new = AuditRecord.new(by="tg/tg/42", where="tg/tg/42", action="approval.answer", what="allowed Bash", at=now)
    assert log.append(new) and log.append(old)
    assert [r.action for r in _log(backend).records()] == ["dead.drop", "approval.answer"]
    assert [r.action for r in log.records(since=now - timedelta(hours=1))] == ["approval.answer"]
    assert [r.action for r in log.records(by="42")] == ["approval.answer"], "a bare sender id matches"
    assert [r.action for r in log.records(by=OPERATOR)] == ["dead.drop"]


def test_hosts_appending_one_record_at_once_keep_it_once(backend: Backend) -> None:
    record = AuditRecord.new(by="tg/tg/42", where="tg/tg/42", action="turn.stop_other", what="stopped", key="k")
    start = threading.Barrier(4)
    kept: list[bool] = []
    logs = [_log(backend) for _ in range(4)]

    def append(log: AuditLog) -> None:
        start.wait()
        kept.append(log.append(record))

    threads = [threading.Thread(target=append, args=(log,)) for log in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(kept) == [False, False, False, True]
    assert len(_log(backend).records()) == 1
