"""The web chat channel: the bot in a browser tab, served by the gateway itself (no build step, no CDN).

Decisions (docs/channels.md, "Web chat", says the same for users):

- **Its own aiohttp server on its own port** (`port`, default 8787, on 127.0.0.1), started by the channel like
  any plugin's connection. The dashboard's server belongs to the gateway's machinery, which a plugin may not
  reach, and the dashboard is off unless `dashboard.port` is set; the chat must work without it. What both
  need to be safe (security headers, the connection cap, the bounded listener, the same-origin check) is
  written once in gateway/channelkit/web.py and used by both.
- **WebSocket** for what the tab receives (one per open conversation), plain JSON POSTs for what it sends
  (messages, taps, files). A WebSocket needs no polling and closes at once when the tab goes; POSTs keep
  uploads simple and each action answerable with a status.
- **Resume from the log, not from memory.** Every conversation has an append-only log in the home
  (`queue/state/web/<profile>/log/`): the user's messages, each delivered reply part, edits of notes and
  streamed previews, taps. A tab asks for the entries after the last `seq` it saw, after a reload, a dropped
  connection or a gateway restart alike. A reply part's entry carries its delivery key, so a delivery the
  dispatcher retries (its per-part journal had not recorded the part when the gateway died) appends nothing:
  no message is lost or shown twice.
- **Who may use it**: a one-time login link (`chat: http://127.0.0.1:PORT/?t=…`, printed by `switchyard run`
  for `user` — default the login name — and made for anyone with `switchyard web link --user NAME`) becomes an
  HttpOnly, SameSite=Strict session cookie. The named user is the sender id, so `allow_from` and `pairing: true`
  work as on every channel. POSTs and the WebSocket handshake must carry this server's Origin, and POSTs the
  page's own header; a user reaches only their own conversations (`<user>:<n>`) and the shared `room` when
  `room: true`. Sign out (a POST) ends the session on the server; `switchyard web revoke` removes the session's
  file from another process, and the running channel closes that session's tabs within a second (it looks).
- **Bounded**: log entries older than `log_retention_days` are dropped (a `pruned` marker keeps the numbering
  going), `cache_conversations` logs at most are held in memory, `max_tabs_per_user` WebSockets a user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.web.channel import WebChannel

CHANNEL_TYPE = "web"


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: web` profile may carry."""
    from plugins.web.profile import WebProfileOptions

    return {CHANNEL_TYPE: WebProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> WebChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.web.channel import WebChannel

    return WebChannel(profile, context)
