"""Events reach the backend's store (events.jsonl, the database's switchyard_events, the memory sink)
whole, in the order emitted, with secrets masked."""

from __future__ import annotations

from tests.contract.backends import Backend

SECRET = "sk-live-0123456789"


def test_events_are_stored_in_order_with_secrets_masked(backend: Backend) -> None:
    log, stored = backend.events()
    log.add_secret(SECRET)
    for number in range(5):
        log.emit("message.received", job_id=f"m{number}", reason=f"token {SECRET} refused")
    log.emit("message.done", job_id="m4", text="caf\u00e9")
    found = [event for event in stored() if event["event"] in ("message.received", "message.done")]
    assert [(event["event"], event["job_id"]) for event in found] == [
        *(("message.received", f"m{number}") for number in range(5)), ("message.done", "m4")]
    assert all(SECRET not in str(event) for event in found)
    assert found[0]["reason"] == "token *** refused" and found[-1]["text"] == "caf\u00e9"
