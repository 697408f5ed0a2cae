"""Tool approvals asked in chat (gateway.stores.Approvals): a request is listed as pending by every handle,
settled once (an answer, an expiry, a close as abandoned), the first settlement kept against a second, on
every backend; the file and database stores keep them for the next process."""

from __future__ import annotations

import threading
import time

from gateway.approvals import ABANDONED, ANSWERED, EXPIRED, Approval, new_id
from gateway.scope import ConversationScope
from tests.contract.backends import Backend


def _approval(title: str = "Run: rm -rf build", *, conversation: str = "c1", ttl_s: float = 600) -> Approval:
    now = time.time()
    return Approval(id=new_id(), scope=ConversationScope("console", "console", conversation).key,
                    address={"channel": "console", "conversationId": conversation, "messageId": "m1"},
                    title=title, detail="deletes the build folder",
                    options=[{"id": "allow", "name": "Allow once", "kind": "allow_once"},
                             {"id": "reject", "name": "Reject", "kind": "reject_once"}],
                    owner="host:1:1", created_at=now, expires_at=now + ttl_s)


def test_a_request_is_listed_pending_by_another_handle_until_answered(backend: Backend) -> None:
    asker, other = backend.approvals(), backend.approvals()
    first, second = _approval("first"), _approval("second", conversation="c2")
    asker.request(first)
    asker.request(second)
    assert [a.title for a in other.pending()] == ["first", "second"], "oldest first, seen by another handle"
    found = other.get(first.id)
    assert found is not None and found.pending and found.options == first.options and found.detail == first.detail
    assert found.address == first.address and found.scope == first.scope
    assert other.get("nosuchid") is None


def test_an_answer_settles_once_and_a_second_answer_keeps_the_first(backend: Backend) -> None:
    store = backend.approvals()
    approval = _approval()
    store.request(approval)
    done, won = backend.approvals().settle(approval.id, ANSWERED, choice="allow", by="telegram:42")
    assert won and done is not None and done.state == ANSWERED and done.allowed()
    again, won_again = store.settle(approval.id, ANSWERED, choice="reject", by="cli")
    assert not won_again, "a second answer is refused"
    assert again is not None and (again.choice, again.answered_by) == ("allow", "telegram:42"), "the first is kept"
    assert store.get(approval.id) == done and store.pending() == []
    assert store.settle("nosuchid", ANSWERED, choice="allow") == (None, False)


def test_expired_and_abandoned_are_closed_without_a_choice_and_refuse_a_late_answer(backend: Backend) -> None:
    store = backend.approvals()
    expiring, orphan = _approval("expiring", ttl_s=0), _approval("orphan")
    store.request(expiring)
    store.request(orphan)
    closed, won = store.settle(expiring.id, EXPIRED, reason="no answer within 600s")
    assert won and closed is not None and closed.state == EXPIRED and closed.choice is None and not closed.allowed()
    gone, won = backend.approvals().settle(orphan.id, ABANDONED, reason="the gateway restarted")
    assert won and gone is not None and gone.reason == "the gateway restarted"
    late, won = store.settle(expiring.id, ANSWERED, choice="allow", by="telegram:42")
    assert not won and late is not None and late.state == EXPIRED, "a late tap does not revive it"
    assert store.pending() == []


def test_pending_approvals_survive_a_new_handle(backend: Backend) -> None:
    """The next process (a new handle; the file and database stores read what is durable) still lists it
    and can answer it."""
    approval = _approval()
    backend.approvals().request(approval)
    reopened = backend.approvals()
    assert [a.id for a in reopened.pending()] == [approval.id]
    assert reopened.settle(approval.id, ANSWERED, choice="reject", by="dashboard")[1]
    assert backend.approvals().get(approval.id).choice == "reject"  # type: ignore[union-attr]


def test_answerers_at_once_on_separate_handles_one_wins(backend: Backend) -> None:
    approval = _approval()
    backend.approvals().request(approval)
    start = threading.Barrier(6)
    results: list[tuple[str, bool]] = []

    def answer(index: int) -> None:
        store = backend.approvals()
        start.wait()
        done, won = store.settle(approval.id, ANSWERED, choice="allow" if index % 2 else "reject", by=f"s{index}")
        assert done is not None
        results.append((done.answered_by or "", won))

    threads = [threading.Thread(target=answer, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [by for by, won in results if won]
    assert len(winners) == 1, f"exactly one answer wins: {results}"
    assert {by for by, _ in results} == set(winners), "every answerer is told the winner's answer"
    stored = backend.approvals().get(approval.id)
    assert stored is not None and stored.answered_by == winners[0]
