"""Platform groups a sender is in (Telegram chat administrators, Slack user groups, Discord roles), put on the
incoming payload's `senderGroups` so that `group:<id>` in a profile's `roles:` matches them (gateway/roles.py,
docs/roles.md). A channel asks its platform only when the profile's `roles:` names a `group:` at all, through a
short-lived cache, and never waits on it longer than LOOKUP_TIMEOUT_S: a lookup that fails or is slow leaves the
sender with what the rest of their grant gives (said once in the log until the platform answers again)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

from gateway.models import IncomingPayload
from gateway.roles import GROUP_PREFIX, GROUPS_FIELD
from gateway.settings import ChannelProfile

log = logging.getLogger("switchyard.groups")

LOOKUP_TIMEOUT_S = 2.0
"""The longest a message waits for its platform to say which groups its sender is in."""
CACHE_TTL_S = 60.0
"""How long an answer is used: a member made (or no longer) an administrator is seen within this long."""
CACHE_KEYS = 1024
"""Past this many keys (chats) cached, the expired answers are forgotten."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def names_groups(profile: ChannelProfile) -> bool:
    """Whether the profile's `roles:` gives a role to a platform group (`group:<id>`): only then is it looked up."""
    assigned = profile.option("roles") or {}
    return any(str(member).startswith(GROUP_PREFIX) for members in assigned.values() for member in members)


def with_groups(payload: IncomingPayload, groups: Iterable[str]) -> IncomingPayload:
    """The payload with its sender's platform groups as `senderGroups` (the payload itself when none)."""
    listed = sorted(set(groups))
    return payload.model_copy(update={GROUPS_FIELD: listed}) if listed else payload


class GroupLookup(Generic[K, V]):
    """A platform call answering which groups (V) belong to a key (K: a chat, a workspace), cached CACHE_TTL_S,
    named in the log by `what` (`{key}` in it is replaced by the key),
    bounded by LOOKUP_TIMEOUT_S; a failure answers None and is logged once until a lookup succeeds again.
    Two messages asking for one key at once share one call."""

    def __init__(self, what: str, fetch: Callable[[K], Awaitable[V]], *, ttl_s: float | None = None,
                 timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self._what = what
        self._fetch = fetch
        self._ttl_s = CACHE_TTL_S if ttl_s is None else ttl_s
        self._timeout_s = LOOKUP_TIMEOUT_S if timeout_s is None else timeout_s
        self._clock = clock
        self._cached: dict[K, tuple[float, V]] = {}
        self._pending: dict[K, asyncio.Future[V]] = {}
        self._failing = False

    async def get(self, key: K) -> V | None:
        """The groups of `key`: cached, else fetched; None when the platform did not answer in time."""
        cached = self._cached.get(key)
        if cached is not None and self._clock() - cached[0] < self._ttl_s:
            return cached[1]
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(self._fetch(key))
            pending.add_done_callback(lambda done: self._settled(key, done))
        try:
            value = await asyncio.wait_for(asyncio.shield(pending), self._timeout_s)
        except Exception as exc:
            if not self._failing:
                log.warning("cannot look up %s (%s: %s): senders hold only what the rest of their grant gives "
                            "until it answers", self._named(key), type(exc).__name__, exc or "timed out")
            self._failing = True
            return None
        if self._failing:
            log.info("%s answers again", self._named(key))
        self._failing = False
        return value

    def _named(self, key: K) -> str:
        return self._what.replace("{key}", str(key))

    def _settled(self, key: K, done: asyncio.Future[V]) -> None:
        """Caches what a call answered, even after the message that asked stopped waiting for it."""
        self._pending.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            now = self._clock()
            self._cached[key] = (now, done.result())
            if len(self._cached) > CACHE_KEYS:
                self._cached = {k: v for k, v in self._cached.items() if now - v[0] < self._ttl_s}
