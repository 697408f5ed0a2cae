"""gateway/approvals.py: button ids, the owner a restart judges gone, and which option an operator's
allow or deny picks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from gateway.approvals import Approval, button_id, owner_gone, parse_button
from gateway.disk.locks import process_instance
from gateway.scope import ConversationScope


def test_button_ids_round_trip_and_fit_the_platforms_limit() -> None:
    made = button_id("abc123def456", 2)
    assert parse_button(made) == ("abc123def456", 2) and len(made.encode()) <= 64
    for other in ("ap:ABC:1", "ap:abc", "ap:abc:x", "stop", "ap:" + "a" * 17 + ":0", "ap:abc:1:2"):
        assert parse_button(other) is None, other


def test_an_owner_is_gone_when_its_pid_ended_or_is_now_this_process_but_another_host_is_not_judged() -> None:
    me = process_instance()
    host = socket.gethostname()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert owner_gone(f"{host}:{ended.pid}:1", me), "its process ended"
    assert owner_gone(f"{host}:{os.getpid()}:1", me), "a restarted container's gateway has the same pid"
    assert not owner_gone(me, me), "this process is not gone"
    assert not owner_gone(f"{host}:{os.getppid()}:1", me), "a live process on this host"
    assert not owner_gone(f"not-{host}:{ended.pid}:1", me), "another host's process is not judged here"


@pytest.mark.parametrize(("kinds", "allow", "deny"), [
    (["allow_always", "allow_once", "reject_once"], "o1", "o2"),
    (["allow_always", "reject_always"], "o0", "o1"),
    (["allow_once"], "o0", None),
])
def test_an_operators_verdict_picks_the_one_time_option_of_its_kind(kinds: list[str], allow: str,
                                                                    deny: str | None) -> None:
    now = time.time()
    approval = Approval(id="a1", scope=ConversationScope("console", "console", "c1").key, address={}, title="t",
                        options=[{"id": f"o{i}", "name": kind, "kind": kind} for i, kind in enumerate(kinds)],
                        owner="h:1:1", created_at=now, expires_at=now + 60)
    assert approval.choice_for("allow") == allow
    assert approval.choice_for("deny") == deny


def test_an_allow_needs_an_allow_option() -> None:
    now = time.time()
    approval = Approval(id="a1", scope="conv:x/y/z", address={}, title="t",
                        options=[{"id": "r", "name": "Reject", "kind": "reject_once"}], owner="h:1:1",
                        created_at=now, expires_at=now + 60)
    with pytest.raises(ValueError, match="no option that allows"):
        approval.choice_for("allow")
