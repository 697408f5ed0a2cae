"""A conversation's several sessions through its chat commands (orchestrator/agents/conversations.py): `/new`
starts afresh and keeps the old one, `/sessions` lists them, `/resume N` goes back; a home of the previous
version keeps its one session as session 1."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from gateway.disk import writes
from gateway.testing import async_wait_until
from orchestrator.agents.conversations import ConversationSessions
from orchestrator.agents.sessions import ConversationHistory, FileRecords, SessionStore
from orchestrator.storage.memory import MemoryRecords

CHAT = "conv:telegram/tg/42"
TOPIC = "conv:telegram/tg/42/7"  # a forum topic of that chat: a conversation of its own


def _stores() -> tuple[SessionStore, ConversationHistory, ConversationSessions]:
    sessions, history = SessionStore(MemoryRecords()), ConversationHistory(MemoryRecords())
    return sessions, history, ConversationSessions(sessions, history)


async def _answered(sessions: SessionStore, chat: ConversationSessions, scope: str, text: str) -> str | None:
    """What one answered message does to the stores, as the handler and the CLI runner do it: the session it
    continues (its id, claude-like: ids of our own), saved, and counted."""
    current = sessions.current(scope)
    session = sessions.session("claude", current, assigns_ids=True)
    sessions.save("claude", current, session.id)
    await chat.count(scope, text)
    return session.id


async def test_new_starts_afresh_and_resume_goes_back_to_the_first_session() -> None:
    sessions, history, chat = _stores()
    first = await _answered(sessions, chat, CHAT, "my name is Ada")
    history.add(CHAT, "my name is Ada", "hello Ada")
    assert await _answered(sessions, chat, CHAT, "what is my name?") == first

    said = chat.answer("/new", "/new", CHAT)
    assert said.startswith("Started session 2") and "/resume 1" in said
    fresh = await _answered(sessions, chat, CHAT, "a new topic")
    assert fresh != first and history.recent(CHAT) == []

    said = chat.answer("/resume", "/resume 1", CHAT)
    assert said.startswith("Back to session 1") and "2 turns" in said and "my name is Ada" in said
    assert await _answered(sessions, chat, CHAT, "and now?") == first
    assert [exchange["user"] for exchange in history.recent(CHAT)] == ["my name is Ada"]


async def test_sessions_lists_when_first_words_and_turns_with_the_current_one_marked() -> None:
    sessions, _, chat = _stores()
    for text in ("plan the trip to Lisbon", "book the hotel", "and the train"):
        await _answered(sessions, chat, CHAT, text)
    chat.answer("/new", "/new", CHAT)
    await _answered(sessions, chat, CHAT, "review my CV please")
    lines = chat.answer("/sessions", "/sessions", CHAT).splitlines()
    assert lines[0] == "Sessions of this conversation:"
    assert "  1. " in lines[1] and "3 turns" in lines[1] and "“plan the trip to Lisbon”" in lines[1]
    assert lines[2].startswith("▶ 2. ") and "1 turn ·" in lines[2] and "“review my CV please”" in lines[2]
    assert " UTC · " in lines[2]


async def test_resume_needs_a_session_that_exists() -> None:
    sessions, _, chat = _stores()
    await _answered(sessions, chat, CHAT, "hello")
    assert chat.answer("/resume", "/resume", CHAT) == "Say which session: /resume N (/sessions lists them)."
    assert chat.answer("/resume", "/resume 5", CHAT).startswith("There is no session 5")
    assert sessions.current(CHAT) == CHAT


async def test_a_forum_topic_keeps_its_own_sessions() -> None:
    sessions, _, chat = _stores()
    in_chat = await _answered(sessions, chat, CHAT, "in the chat")
    in_topic = await _answered(sessions, chat, TOPIC, "in the topic")
    chat.answer("/new", "/new", TOPIC)
    assert await _answered(sessions, chat, CHAT, "still the chat") == in_chat, "/new in a topic leaves the chat alone"
    assert await _answered(sessions, chat, TOPIC, "new in the topic") not in (in_topic, in_chat)


def test_a_home_of_the_previous_version_keeps_its_session_as_session_1(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "sessions"
    folder.mkdir(parents=True)
    old = {"provider": "claude", "scope": CHAT, "createdAt": "2026-11-30T10:00:00.000Z", "started": True,
           "updatedAt": "2026-11-30T10:05:00.000Z", "sessionId": "the-old-claude-session"}
    name = hashlib.sha256("\x00".join(("claude", CHAT)).encode()).hexdigest()[:32] + ".json"
    (folder / name).write_text(json.dumps(old))  # byte for byte what the previous version wrote
    history = ConversationHistory(FileRecords(folder / "history", fsync=False))
    history.add(CHAT, "my name is Ada", "hello Ada")
    sessions = SessionStore(FileRecords(folder, fsync=False))
    chat = ConversationSessions(sessions, history)

    assert sessions.session("claude", sessions.current(CHAT), assigns_ids=True).id == "the-old-claude-session"
    [first] = sessions.conversations()[CHAT]
    assert (first.number, first.current, first.started) == (1, True, None)
    assert "1 turn · “my name is Ada”" in chat.answer("/sessions", "/sessions", CHAT)

    chat.answer("/new", "/new", CHAT)
    assert not sessions.session("claude", sessions.current(CHAT), assigns_ids=True).resume
    chat.answer("/resume", "/resume 1", CHAT)
    resumed = sessions.session("claude", sessions.current(CHAT), assigns_ids=True)
    assert (resumed.id, resumed.resume) == ("the-old-claude-session", True)


async def test_a_count_is_synced_without_its_folder_and_the_session_commands_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn counted is one fsync of the index (its contents, never an empty file after a power cut), not two:
    a crash may bring back the index before the count; `/new` and `/resume` sync the folder too."""
    folder_syncs: list[str] = []
    real_fsync_dir = writes.fsync_dir
    monkeypatch.setattr(writes, "fsync_dir", lambda folder: (folder_syncs.append(folder), real_fsync_dir(folder)))
    syncs = 0  # every os.fsync: of a file, or of a folder (fsync_dir)
    real_fsync = os.fsync

    def counted_fsync(fd: int) -> None:
        nonlocal syncs
        syncs += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    sessions = SessionStore(FileRecords(tmp_path / "sessions", fsync=True))
    chat = ConversationSessions(sessions, ConversationHistory(FileRecords(tmp_path / "history", fsync=False)))
    chat.answer("/new", "/new", CHAT)
    assert (syncs, len(folder_syncs)) == (2, 1), "/new is written durably: the index, then its folder"
    await chat.count(CHAT, "what is the weather")
    assert (syncs, len(folder_syncs)) == (3, 1), "a count syncs the index's contents, not its folder"
    chat.answer("/resume", "/resume 1", CHAT)
    assert (syncs, len(folder_syncs)) == (5, 2)
    assert [(info.number, info.turns) for info in sessions.listing(CHAT)] == [(1, 0), (2, 1)]


class CountedRecords(MemoryRecords):
    """Memory records that count the writes of turn counts (the not-durable updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.count_writes = 0

    def update(self, key, change, *, durable: bool = True) -> None:
        self.count_writes += 0 if durable else 1
        super().update(key, change, durable=durable)


def _turns(sessions: SessionStore, scope: str = CHAT) -> list[tuple[int, int]]:
    return [(info.number, info.turns) for info in sessions.listing(scope)]


async def test_a_conversations_counts_after_its_first_are_written_together() -> None:
    """A write of the index per chat message was a tenth of the gateway's CPU a message (bench P6)."""
    records = CountedRecords()
    sessions = SessionStore(records)
    chat = ConversationSessions(sessions, ConversationHistory(MemoryRecords()), flush_sec=0.05)
    for n in range(6):
        await chat.count(CHAT, f"message {n}")
    assert (records.count_writes, _turns(sessions)) == (1, [(1, 1)]), "the first count is written at once"
    await async_wait_until(lambda: _turns(sessions) == [(1, 6)])
    assert records.count_writes == 2
    assert sessions.listing(CHAT)[0].first_words == "message 0"


async def test_a_session_command_writes_its_conversations_counts_first_and_the_stop_writes_the_rest() -> None:
    sessions = SessionStore(MemoryRecords())
    chat = ConversationSessions(sessions, ConversationHistory(MemoryRecords()), flush_sec=3600)
    for text in ("one", "two", "three"):
        await chat.count(CHAT, text)
        await chat.count(TOPIC, text)
    chat.answer("/new", "/new", CHAT)
    assert _turns(sessions) == [(1, 3), (2, 0)], "counted in the session they were answered in"
    await chat.count(CHAT, "four")
    await chat.close()
    assert _turns(sessions) == [(1, 3), (2, 1)] and _turns(sessions, TOPIC) == [(1, 3)]


class HeldRecords(MemoryRecords):
    """Memory records whose writes of counts, once `held`, stop between reading the index and writing it back."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.reading = threading.Event()
        self.go_on = threading.Event()

    def update(self, key, change, *, durable: bool = True) -> None:
        if durable or not self.held:
            return super().update(key, change, durable=durable)
        before = copy.deepcopy(self.read(key))
        self.reading.set()
        self.go_on.wait(10)
        super().update(key, lambda _: change(before), durable=durable)


async def test_a_write_of_counts_never_undoes_a_new_session_made_meanwhile() -> None:
    records = HeldRecords()
    sessions = SessionStore(records)
    chat = ConversationSessions(sessions, ConversationHistory(MemoryRecords()), flush_sec=3600)
    for text in ("one", "two"):  # the first is written at once, the second kept in memory
        await chat.count(CHAT, text)
    records.held = True
    flushing = asyncio.create_task(asyncio.to_thread(chat.flush))
    await asyncio.to_thread(records.reading.wait, 10)
    new = asyncio.create_task(asyncio.to_thread(chat.answer, "/new", "/new", CHAT))
    await asyncio.wait([new], timeout=0.5)  # without the lock, /new is written now, under the held write
    records.go_on.set()
    await asyncio.gather(flushing, new)
    assert sessions.current_number(CHAT) == 2 and _turns(sessions) == [(1, 2), (2, 0)]
