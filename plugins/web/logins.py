"""Who a browser is: one-time login links (`switchyard run` prints one, `switchyard web link` makes more) turned
into a session kept in an HttpOnly cookie. Both live in the home as files named by a hash of the secret, so
the CLI and the running gateway share them and a copy of the folder reveals no usable token."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from gateway import Home, atomic_write, safe_name

COOKIE = "switchyard_chat"
SESSION_TTL_S = 30 * 86400.0
SESSION_ID_CHARS = 12  # of a session's hash: how `switchyard web sessions` names it


def web_state(home: Home, profile_id: str) -> Path:
    """The folder of one web profile's state: links, sessions, the conversation logs, its address."""
    return home.state / "web" / safe_name(profile_id)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Logins:
    """The login links and sessions of one web profile."""

    def __init__(self, folder: Path):
        self.links = folder / "links"
        self.sessions = folder / "sessions"
        self._known: dict[str, str] = {}  # session digest -> user, for sessions seen this run

    def prune(self) -> None:
        """Removes the links and sessions that have expired (called when the channel starts)."""
        now = time.time()
        for folder in (self.links, self.sessions):
            for path in folder.glob("*.json") if folder.is_dir() else ():
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    if float(json.loads(path.read_bytes()).get("expires", 0)) < now:
                        path.unlink()

    def issue(self, user: str, ttl_s: float) -> str:
        """A new one-time login token for `user`, valid for `ttl_s`."""
        self.links.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(24)
        record = {"user": user, "expires": time.time() + ttl_s}
        atomic_write(self.links / f"{_digest(token)}.json", json.dumps(record).encode(), fsync=True)
        return token

    def redeem(self, token: str) -> str | None:
        """The user a login token names, consuming it (a second use, an unknown or expired token: None).
        The rename makes two tabs racing on one link end with one session."""
        if not token or len(token) > 200:
            return None
        path = self.links / f"{_digest(token)}.json"
        taken = path.with_suffix(f".{os.getpid()}.used")
        try:
            path.rename(taken)
        except OSError:
            return None
        try:
            record = json.loads(taken.read_bytes())
        except (OSError, ValueError):
            return None
        finally:
            taken.unlink(missing_ok=True)
        if not isinstance(record, dict) or float(record.get("expires", 0)) < time.time():
            return None
        return str(record["user"])

    def open_session(self, user: str) -> str:
        """A new session for `user`; returns the cookie's value."""
        self.sessions.mkdir(parents=True, exist_ok=True)
        session = secrets.token_urlsafe(32)
        now = time.time()
        record = {"user": user, "created": now, "expires": now + SESSION_TTL_S}
        atomic_write(self.sessions / f"{_digest(session)}.json", json.dumps(record).encode(), fsync=True)
        self._known[_digest(session)] = user
        return session

    def user_of(self, session: str | None) -> str | None:
        """The user of a session cookie; None when it is no session of ours (forged, expired, ended)."""
        if not session or len(session) > 200:
            return None
        digest = _digest(session)
        if digest in self._known:  # still there: `switchyard web revoke` (another process) removes the file
            if (self.sessions / f"{digest}.json").exists():
                return self._known[digest]
            del self._known[digest]
            return None
        try:
            record = json.loads((self.sessions / f"{digest}.json").read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or float(record.get("expires", 0)) < time.time():
            return None
        self._known[digest] = str(record["user"])
        return self._known[digest]

    def end_session(self, session: str) -> None:
        """Signs the cookie's session out (the page's Sign out)."""
        digest = _digest(session)
        self._known.pop(digest, None)
        with contextlib.suppress(OSError):
            (self.sessions / f"{digest}.json").unlink()

    def listed(self) -> list[dict[str, object]]:
        """The sessions not expired, oldest first: `id` (the start of the secret's hash, which names it in
        `switchyard web revoke`), `user`, `created`, `expires` (epoch seconds)."""
        found = []
        for digest, record in _records(self.sessions):
            if float(record.get("expires", 0)) >= time.time():
                found.append({"id": digest[:SESSION_ID_CHARS], "user": str(record.get("user")),
                              "created": float(record.get("created", 0)), "expires": float(record["expires"])})
        return sorted(found, key=lambda session: float(str(session["created"])))

    def revoke(self, name: str) -> tuple[int, int]:
        """Ends every session of the user `name`, or the one session whose id is `name`, and drops the user's
        unused login links; returns how many sessions and links went. The running gateway closes those
        sessions' open tabs within a second (it looks for their files)."""
        sessions = links = 0
        for digest, record in _records(self.sessions):
            if record.get("user") == name or (len(name) >= SESSION_ID_CHARS and digest.startswith(name)):
                (self.sessions / f"{digest}.json").unlink(missing_ok=True)
                sessions += 1
        for digest, record in _records(self.links):
            if record.get("user") == name:
                (self.links / f"{digest}.json").unlink(missing_ok=True)
                links += 1
        return sessions, links


def _records(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """The (digest, record) of each readable `<digest>.json` in `folder`."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_bytes())
            if isinstance(record, dict):
                found.append((path.stem, record))
    return found
