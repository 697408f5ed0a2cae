"""`switchyard approvals` as a process, on both backends: lists the pending tool approvals, allows or denies
one for the waiting turn (which reads the store), and refuses an unknown or already answered one."""

from __future__ import annotations

import json
import time

import pytest

from gateway.approvals import ANSWERED, Approval
from gateway.scope import ConversationScope
from tests.e2e.conftest import PgSwitchyard, Switchyard, both_backends

OPTIONS = [{"id": "allow-1", "name": "Allow once", "kind": "allow_once"},
           {"id": "reject-1", "name": "Reject", "kind": "reject_once"}]


def _store(switchyard: Switchyard) -> object:
    if isinstance(switchyard, PgSwitchyard):
        from gateway.backends.postgres.approvals import PgApprovals

        return PgApprovals.direct(switchyard.dsn)
    from gateway.approvals import FileApprovals

    return FileApprovals(switchyard.home)


def _pending(store: object, approval_id: str, title: str) -> None:
    now = time.time()
    store.request(Approval(  # type: ignore[attr-defined]
        id=approval_id, scope=ConversationScope("console", "console", "desk").key, title=title, options=OPTIONS,
        address={"channel": "console", "conversationId": "desk", "messageId": "m1"}, owner="host:1:1",
        created_at=now, expires_at=now + 600))


pytestmark = [pytest.mark.e2e, both_backends]


def test_approvals_lists_allows_and_denies_once(switchyard: Switchyard) -> None:
    switchyard.configure()
    store = _store(switchyard)
    assert switchyard.cli("approvals").stdout.strip() == "no pending approvals"
    _pending(store, "aaa111", "Run: make deploy")
    _pending(store, "bbb222", "Edit: /etc/hosts")
    listed = switchyard.cli("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["title"], r["conversation"]) for r in rows] == [
        ("aaa111", "Run: make deploy", "console/console/desk"), ("bbb222", "Edit: /etc/hosts", "console/console/desk")]
    table = switchyard.cli("approvals").stdout
    assert "aaa111" in table and "Run: make deploy" in table and "Allow once, Reject" in table
    allowed = switchyard.cli("approvals", "allow", "aaa111")
    assert allowed.returncode == 0 and "allowed: Run: make deploy" in allowed.stdout, allowed
    denied = switchyard.cli("approvals", "deny", "bbb222")
    assert denied.returncode == 0 and "denied: Edit: /etc/hosts" in denied.stdout, denied
    again = switchyard.cli("approvals", "deny", "aaa111")
    assert again.returncode == 1 and "answered already" in again.stderr, again
    stored = store.get("aaa111")  # type: ignore[attr-defined]
    assert stored.state == ANSWERED and stored.choice == "allow-1" and stored.answered_by.startswith("cli:")
    assert store.get("bbb222").choice == "reject-1"  # type: ignore[attr-defined]
    unknown = switchyard.cli("approvals", "allow", "nosuch")
    assert unknown.returncode == 1 and "no approval 'nosuch'" in unknown.stderr
    assert switchyard.cli("approvals").stdout.strip() == "no pending approvals"
