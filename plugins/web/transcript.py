"""What the web chat showed in each conversation: an ordered, append-only log per conversation, kept in the home,
from which every tab draws its messages and resumes after a reconnect or a gateway restart.

The log is written by the channel as it delivers (the dispatcher's per-part journal then records the part as
sent), and each entry that stands for a delivered part carries that part's key: a delivery retried after a
crash between the two finds its entry already there and appends nothing, so a message appears once. A tab
asks for the entries after the last `seq` it saw and then for each new one as it is appended.

Bounded: `prune` drops the entries older than the profile's `log_retention_days` (the oldest first, so what is
left is the conversation's recent end) and leaves a `pruned` entry in their place whose `seq` is the last one
dropped, so the numbering never goes back and a tab resuming from before the window gets that marker and what
is kept. Only the most recently used conversations stay in memory (`cache_conversations`); another is read
from its file again when asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from gateway import atomic_write

log = logging.getLogger("switchyard.web")

USER = re.compile(r"^[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,63}$")  # no leading dot: never `..`
ROOM = "room"
PRUNED = "pruned"  # the kind of the entry standing for what retention dropped
CACHED_CONVERSATIONS = 256
Entry = dict[str, Any]


def conversation_of(user: str, number: int) -> str:
    """The conversationId of a user's conversation number `number` (`ada:3`)."""
    return f"{user}:{number}"


def owner_of(conversation: str) -> str | None:
    """The user whose conversation this is; None for the room or an id this channel never makes."""
    user, colon, number = conversation.rpartition(":")
    return user if colon and number.isdigit() and USER.match(user) else None


def is_conversation(conversation: str) -> bool:
    return conversation == ROOM or owner_of(conversation) is not None


class Transcript:
    """The logs of every conversation of one web profile, under `folder` (one JSON line an entry)."""

    def __init__(self, folder: Path, *, fsync: bool = True, cached: int = CACHED_CONVERSATIONS):
        self.folder = folder
        self.fsync = fsync
        self.cached = cached
        self.folder.mkdir(parents=True, exist_ok=True)
        self._entries: OrderedDict[str, list[Entry]] = OrderedDict()  # least recently used first
        self._keys: dict[str, dict[str, Entry]] = {}
        self._listeners: dict[str, set[asyncio.Queue[Entry]]] = {}

    def _path(self, conversation: str) -> Path:
        owner = owner_of(conversation)
        if owner is None:
            return self.folder / "room.jsonl"
        return self.folder / owner / f"{conversation.rpartition(':')[2]}.jsonl"

    def _load(self, conversation: str) -> list[Entry]:
        if conversation in self._entries:
            self._entries.move_to_end(conversation)
            return self._entries[conversation]
        entries = _read(self._path(conversation), conversation)
        self._entries[conversation] = entries
        self._keys[conversation] = {entry["key"]: entry for entry in entries if entry.get("key")}
        while len(self._entries) > self.cached:
            oldest, _ = self._entries.popitem(last=False)
            del self._keys[oldest]
        return entries

    def cached_conversations(self) -> list[str]:
        """The conversations held in memory, least recently used first."""
        return list(self._entries)

    def entries(self, conversation: str, after: int = 0) -> list[Entry]:
        """The conversation's entries with a `seq` above `after`, in order."""
        return [entry for entry in self._load(conversation) if entry["seq"] > after]

    def by_key(self, conversation: str, key: str) -> Entry | None:
        self._load(conversation)
        return self._keys[conversation].get(key)

    def message(self, conversation: str, ref: str) -> Entry | None:
        """The message entry `ref` names (`<seq>`), with the edits appended since folded in."""
        found: Entry | None = None
        for entry in self._load(conversation):
            if entry["kind"] == "message" and str(entry["seq"]) == ref:
                found = dict(entry)
            elif found is not None and entry["kind"] == "edit" and entry["target"] == found["seq"]:
                found["text"] = entry["text"]
            elif found is not None and entry["kind"] == "answered" and entry["target"] == found["seq"]:
                found["answered"] = entry["label"]
        return found

    def append(self, conversation: str, fields: Entry, *, key: str | None = None) -> Entry:
        """Appends one entry (durably, before returning) and hands it to the tabs watching; with a `key`
        already in the log, returns that entry and appends nothing."""
        entries = self._load(conversation)
        if key is not None and key in self._keys[conversation]:
            return self._keys[conversation][key]
        entry: Entry = {"seq": (entries[-1]["seq"] if entries else 0) + 1, "ts": int(time.time() * 1000), **fields}
        if key is not None:
            entry["key"] = key
        path = self._path(conversation)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False).encode() + b"\n")
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())
        entries.append(entry)
        if key is not None:
            self._keys[conversation][key] = entry
        for queue in self._listeners.get(conversation, ()):
            queue.put_nowait(entry)
        return entry

    def prune(self, older_than_ms: int) -> int:
        """Drops every conversation's entries written before `older_than_ms` (epoch ms); a user's conversation
        left with nothing is removed, but for their newest (its number is not handed out again) and the
        room, which keep the `pruned` marker. Returns how many entries went."""
        dropped = 0
        for path in [*self.folder.glob("*/*.jsonl"), self.folder / "room.jsonl"]:
            if not path.exists() or not (path.stem.isdigit() or path.name == "room.jsonl"):
                continue
            conversation = ROOM if path.parent == self.folder else conversation_of(path.parent.name, int(path.stem))
            dropped += self._prune_one(conversation, path, older_than_ms)
        return dropped

    def _prune_one(self, conversation: str, path: Path, older_than_ms: int) -> int:
        entries = self._entries.get(conversation) or _read(path, conversation)
        old = next((i for i, entry in enumerate(entries) if entry.get("ts", 0) >= older_than_ms), len(entries))
        if old == 0 or (old == 1 and entries[0]["kind"] == PRUNED):
            return 0
        kept, dropped = entries[old:], sum(1 for entry in entries[:old] if entry["kind"] != PRUNED)
        older = self.conversations_of(owner_of(conversation) or "")[-1:] != [conversation]
        if not kept and conversation != ROOM and older:
            path.unlink(missing_ok=True)
            self._entries.pop(conversation, None)
            self._keys.pop(conversation, None)
            return dropped
        marker: Entry = {"seq": entries[old - 1]["seq"], "ts": older_than_ms, "kind": PRUNED}
        kept = [marker, *kept]
        atomic_write(path, b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in kept),
                     fsync=self.fsync)
        if conversation in self._entries:
            self._entries[conversation][:] = kept
            self._keys[conversation] = {entry["key"]: entry for entry in kept if entry.get("key")}
        return dropped

    def conversations_of(self, user: str) -> list[str]:
        """The user's conversations, oldest first."""
        folder = self.folder / user
        numbers = sorted(int(p.stem) for p in folder.glob("*.jsonl") if p.stem.isdigit()) if folder.is_dir() else []
        return [conversation_of(user, number) for number in numbers]

    def new_conversation(self, user: str) -> str:
        """Opens the user's next conversation (an empty log)."""
        known = self.conversations_of(user)
        number = int(known[-1].rpartition(":")[2]) + 1 if known else 1
        conversation = conversation_of(user, number)
        path = self._path(conversation)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return conversation

    def title(self, conversation: str) -> str:
        """The first thing the user said in it (what the conversation list shows)."""
        for entry in self._load(conversation):
            if entry["kind"] == "message" and entry.get("from") == "user" and entry.get("text"):
                return str(entry["text"])[:60]
        return "new conversation"

    def watch(self, conversation: str) -> asyncio.Queue[Entry]:
        """A queue receiving every entry appended to the conversation from now on."""
        queue: asyncio.Queue[Entry] = asyncio.Queue()
        self._listeners.setdefault(conversation, set()).add(queue)
        return queue

    def signal(self, conversation: str, event: Entry) -> None:
        """Hands `event` (no `seq`: it is not logged, a tab opened later never sees it) to the tabs watching."""
        for queue in self._listeners.get(conversation, ()):
            queue.put_nowait(event)

    def unwatch(self, conversation: str, queue: asyncio.Queue[Entry]) -> None:
        self._listeners.get(conversation, set()).discard(queue)


def _read(path: Path, conversation: str) -> list[Entry]:
    entries: list[Entry] = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_bytes().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:  # the last line of a write cut short by a crash: never acknowledged
                log.warning("web: skipping a cut line in the log of %s", conversation)
    return entries
