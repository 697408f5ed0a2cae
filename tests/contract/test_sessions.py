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
