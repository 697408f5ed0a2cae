"""Provider sessions and conversation history on every backend: each conversation sees only its
own session and exchanges; a second handle (the next message answered on another host, or after a
restart) continues where the first left off."""

from __future__ import annotations

from orchestrator.agents.sessions import HISTORY_EXCHANGES
from tests.contract.backends import Backend

ALICE, BOB = "conv:console/console/alice", "conv:console/console/bob"


def test_each_conversation_continues_its_own_session_on_any_handle(backend: Backend) -> None:
    host, other_host = backend.sessions(), backend.sessions()
    first = host.session("claude", ALICE, assigns_ids=True)
    assert first.id and not first.resume
    host.save("claude", ALICE, first.id)
    again = other_host.session("claude", ALICE, assigns_ids=True)
    assert (again.id, again.resume) == (first.id, True)
    bob = other_host.session("claude", BOB, assigns_ids=True)
    assert bob.id != first.id and not bob.resume, "Bob never continues Alice's session"
    other_provider = other_host.session("codex", ALICE, assigns_ids=True)
    assert other_provider.id != first.id and not other_provider.resume
    fresh = other_host.forget("claude", ALICE, assigns_ids=True)
    assert fresh.id not in (None, first.id) and not fresh.resume
    assert host.session("claude", ALICE, assigns_ids=True).id == fresh.id


def test_turns_of_a_cli_without_sessions_stay_with_their_conversation(backend: Backend) -> None:
    host, other_host = backend.sessions(), backend.sessions()
    host.save("ollama", ALICE, None, {"user": "hi, I am Alice", "assistant": "hello Alice"})
    host.save("ollama", BOB, None, {"user": "hi, I am Bob", "assistant": "hello Bob"})
    alice = other_host.session("ollama", ALICE, assigns_ids=False)
    assert alice.id is None and alice.turns == [{"user": "hi, I am Alice", "assistant": "hello Alice"}]
    assert other_host.session("ollama", BOB, assigns_ids=False).turns == [
        {"user": "hi, I am Bob", "assistant": "hello Bob"}]


def test_each_conversation_sees_only_its_own_recent_exchanges(backend: Backend) -> None:
    host, other_host = backend.history(), backend.history()
    for number in range(HISTORY_EXCHANGES + 2):
        host.add(ALICE, f"alice asks {number}", f"answer {number}")
    other_host.add(BOB, "bob asks", "bob's answer")
    alice = other_host.recent(ALICE)
    assert [exchange["user"] for exchange in alice] == [f"alice asks {n}" for n in range(2, HISTORY_EXCHANGES + 2)]
    assert host.recent(BOB) == [{"user": "bob asks", "assistant": "bob's answer"}]
    assert host.recent("conv:console/console/carol") == []


def test_a_conversation_numbers_its_sessions_and_any_handle_switches_between_them(backend: Backend) -> None:
    host, other_host = backend.sessions(), backend.sessions()
    first = host.session("claude", host.current(ALICE), assigns_ids=True)
    host.save("claude", host.current(ALICE), first.id)
    host.count_turns(ALICE, ["my name is Alice and I like tea"])
    assert other_host.start_new(ALICE) == 2
    assert host.current(ALICE) != ALICE and other_host.current(BOB) == BOB, "Bob's conversation never moves"
    fresh = host.session("claude", host.current(ALICE), assigns_ids=True)
    assert fresh.id != first.id and not fresh.resume, "/new starts a session of its own"
    host.save("claude", host.current(ALICE), fresh.id)
    assert other_host.switch(ALICE, 1) and not other_host.switch(ALICE, 7)
    back = host.session("claude", host.current(ALICE), assigns_ids=True)
    assert (back.id, back.resume) == (first.id, True), "/resume 1 continues the first session"
    listed = other_host.listing(ALICE)
    assert [(info.number, info.current, info.turns) for info in listed] == [(1, True, 1), (2, False, 0)]
    assert listed[0].first_words == "my name is Alice and I like tea" and listed[1].started


def test_an_attached_cli_session_is_the_conversations_next_one_and_every_conversation_is_listed(
        backend: Backend) -> None:
    host, other_host = backend.sessions(), backend.sessions()
    host.save("codex", BOB, "thread-of-bob")  # as a previous version kept it: no index, one session
    assert host.attach(ALICE, "codex", "started-at-a-terminal") == 2
    resumed = other_host.session("codex", other_host.current(ALICE), assigns_ids=False)
    assert (resumed.id, resumed.resume) == ("started-at-a-terminal", True)
    listed = other_host.conversations()
    assert sorted(listed) == [ALICE, BOB]
    assert [(info.number, info.current, info.attached) for info in listed[ALICE]] == [
        (1, False, None), (2, True, "codex")]
    assert [(info.number, info.current, info.started) for info in listed[BOB]] == [(1, True, None)]


def test_the_history_follows_the_session(backend: Backend) -> None:
    host, other_host = backend.history(), backend.history()
    host.add(ALICE, "my name is Alice", "hello Alice")
    host.switch(ALICE, 1, 2)
    assert other_host.recent(ALICE) == [], "a new session starts without the selector's memory of the old"
    other_host.add(ALICE, "second session", "ok")
    other_host.switch(ALICE, 2, 1)
    assert [exchange["user"] for exchange in host.recent(ALICE)] == ["my name is Alice"]
    host.switch(ALICE, 1, 2)
    assert [exchange["user"] for exchange in host.recent(ALICE)] == ["second session"]
