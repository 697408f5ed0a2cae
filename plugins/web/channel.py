"""The web chat channel itself: its own HTTP server, what a browser user says turned into payloads, replies
appended to the conversation's log that every tab reads (imported when a web profile is built)."""

from __future__ import annotations

import asyncio
import errno
import getpass
import logging
import re
import sys
import time
from pathlib import Path

from gateway import (
    INTAKE_FAILED_REPLY,
    ChannelContext,
    ChannelProfile,
    DeliveryJournal,
    DeliveryRecord,
    IncomingPayload,
    NoteMessages,
    OutgoingPayload,
    Part,
    PermanentError,
    Settings,
    Sink,
    atomic_write,
    audio_note,
    clip_note,
    deliver_note,
    deliver_parts,
    delivery_key,
    is_audio,
    now_ms,
    replacing_preview,
    reply_parts,
    with_audio,
)
from gateway.channelkit.web import Listener
from plugins.web import CHANNEL_TYPE
from plugins.web.logins import Logins, web_state
from plugins.web.profile import WebProfileOptions
from plugins.web.server import Refusal, Tabs, build_app
from plugins.web.transcript import USER, Entry, Transcript, is_conversation

log = logging.getLogger("switchyard.web")

TEXT_LIMIT = 64_000  # one bubble; longer answers are split like any channel's (code fences kept whole)
PRUNE_EVERY_S = 3600.0
SESSION_CHECK_S = 1.0
CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NOT_ALLOWED = "You may not use this chat (ask the operator to add you to allow_from, or to approve your pairing)."


class WebChannel:
    """The chat page at `http://<host>:<port>/`: each browser user (a login link turned into a session) has
    their own conversations, and the room when the profile has one.

    What a tab shows is the conversation's log (plugins.web.transcript): the user's messages, the agent's
    replies, progress notes and streamed previews edited in place (an `edit` entry naming the message), the
    buttons under a reply and which one was tapped. The dispatcher's journal decides what was delivered:
    each delivered part's log entry carries the part's key, so a delivery retried after a crash appends
    nothing new, and a tab that reconnects asks for what came after the last entry it saw.
    """

    name = CHANNEL_TYPE
    edits_progress = True
    shows_buttons = True
    edit_interval_sec = 0.25  # a browser takes any pace; this keeps the log (one line an edit) small

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        self.profile_id = profile.id
        self.context = context
        self.options = WebProfileOptions.model_validate(profile.model_extra or {})
        self._port_chosen = "port" in (profile.model_extra or {})  # the default port, when taken: a free one
        self.room = self.options.room
        self.dashboard_url = self.options.dashboard_url or _dashboard_of(context.settings)
        self.max_upload_bytes = self.options.max_upload_bytes
        state = web_state(context.home, profile.id)
        self.state = state
        self.logins = Logins(state)
        self.transcript = Transcript(state / "log", cached=self.options.cache_conversations)
        self.max_tabs_per_user = self.options.max_tabs_per_user
        self.tabs = Tabs()
        self.journal = DeliveryJournal(context.home, profile.id)
        self.notes = NoteMessages.kept_for(context.home, profile.id)
        self._sink: Sink | None = None
        self._listener: Listener | None = None
        self._upkeep: asyncio.Task[None] | None = None
        self.url: str | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, sink: Sink) -> None:
        """Serves the page; prints a login link for the profile's user (`chat: http://…/?t=…`) on stderr."""
        self._sink = sink
        self.logins.prune()
        self.prune()
        try:
            self._listener, self.url = await self._listen(self.options.port)
        except OSError as exc:
            if self._port_chosen or exc.errno != errno.EADDRINUSE:
                raise PermanentError(f"web {self.profile_id}: cannot listen on {self.options.host} port "
                                     f"{self.options.port}: {exc.strerror or exc}") from None
            log.warning("web %s: port %s is taken; the chat listens on a free port instead", self.profile_id,
                        self.options.port)
            self._listener, self.url = await self._listen(0)
        atomic_write(self.state / "url", self.url.encode(), fsync=False)  # where `switchyard web link` points
        token = self.logins.issue(self.options.user or _login_name(), self.options.link_ttl_sec)
        self.context.events.add_secret(token)
        print(f"chat: {self.url}?t={token}", file=sys.stderr, flush=True)
        self.context.note(self.url)  # beside the state in `status` and the dashboard (a link there)
        log.info("web %s: chat at %s", self.profile_id, self.url)
        self._upkeep = asyncio.create_task(self._keep_up(), name=f"web:{self.profile_id}:upkeep")

    async def _listen(self, port: int) -> tuple[Listener, str]:
        app = build_app(self, self.logins, max_upload_bytes=self.options.max_upload_bytes)
        listener = Listener(app, self.options.host, port, max_connections=self.options.max_connections,
                            log=log, what=f"web {self.profile_id}")
        try:
            return listener, await listener.start()
        except OSError:
            await listener.stop()
            raise

    async def stop(self) -> None:
        if self._upkeep is not None:
            self._upkeep.cancel()
            await asyncio.gather(self._upkeep, return_exceptions=True)
            self._upkeep = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None

    def prune(self) -> int:
        """Drops the log entries older than `log_retention_days` (run at start and every PRUNE_EVERY_S)."""
        days = self.options.log_retention_days
        if not days:
            return 0
        dropped = self.transcript.prune(now_ms() - int(days * 86_400_000))
        if dropped:
            log.info("web %s: dropped %d log entries older than %g days", self.profile_id, dropped, days)
        return dropped

    async def _keep_up(self) -> None:
        """The running channel's upkeep: tabs of a session revoked by `switchyard web revoke` (another
        process: it removes the session's file) closed within a second; the log's retention, hourly."""
        pruned = time.monotonic()
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            try:
                await self.tabs.close_signed_out(lambda session: self.logins.user_of(session) is not None)
                if time.monotonic() - pruned >= PRUNE_EVERY_S:
                    pruned = time.monotonic()
                    self.prune()
            except Exception as exc:  # the next turn tries again; the chat itself goes on
                log.warning("web %s: upkeep failed: %s", self.profile_id, exc)

    # --- inbound ----------------------------------------------------------------------------

    def _admit(self, user: str, conversation: str, text: str, message_id: str) -> None:
        """Raises Refusal (403) when the user may not talk here; a pairing reply is queued for them."""
        decision = self.context.access.check(user, user)
        if decision.allowed:
            return
        self.context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 conversation=conversation, senderId=user, reason=decision.reason)
        if decision.reply:
            self.context.outbox.write(OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=user, senderId=user,
                message=decision.reply, originalMessage=text, timestamp=now_ms(), messageId=message_id,
                agent="switchyard", conversationId=conversation))
        raise Refusal(403, decision.reply or NOT_ALLOWED)

    async def _take(self, payload: IncomingPayload, conversation: str, shown: Entry) -> Entry:
        """Queues the payload, then shows it in the log (once: a page sending it again finds it there)."""
        assert self._sink is not None
        key = f"in:{payload.messageId}"
        already = self.transcript.by_key(conversation, key)
        if already is not None:
            return already
        try:
            await self._sink(payload)
        except Exception as exc:
            log.error("web %s: could not queue a message: %s", self.profile_id, exc)
            self.transcript.append(conversation, {"kind": "message", "from": "switchyard",
                                                  "sender": "switchyard", "text": INTAKE_FAILED_REPLY})
            raise Refusal(503, INTAKE_FAILED_REPLY) from exc
        return self.transcript.append(conversation, shown, key=key)

    def _payload(self, user: str, conversation: str, text: str, message_id: str, **fields: object) -> IncomingPayload:
        return IncomingPayload.model_validate({
            "channel": CHANNEL_TYPE, "channelProfileId": self.profile_id, "sender": user, "senderId": user,
            "message": text, "timestamp": now_ms(), "messageId": message_id, "conversationId": conversation,
            **fields})

    async def say(self, user: str, conversation: str, text: str, client_id: str) -> Entry:
        """What the user typed (`client_id`: the page's id for it, the same when it sends it again)."""
        message_id = f"web-{user}-{_client_id(client_id)}"
        self._admit(user, conversation, text, message_id)
        payload = self._payload(user, conversation, text, message_id)
        return await self._take(payload, conversation, {"kind": "message", "from": "user", "sender": user,
                                                         "text": text})

    async def tap(self, user: str, conversation: str, ref: str, button: str) -> Entry:
        """A tap on a button under the reply `ref`: a payload with `button` and the button's label."""
        shown = self.transcript.message(conversation, ref)
        labels = {str(b[0]): str(b[1]) for b in (shown or {}).get("buttons", [])}
        if shown is None or button not in labels:
            raise Refusal(404, "no such button")
        message_id = f"web-tap-{conversation}-{ref}-{button}"[:256]  # a tap sent again is the same message
        self._admit(user, conversation, labels[button], message_id)
        payload = self._payload(user, conversation, labels[button], message_id, button=button)
        entry = await self._take(payload, conversation, {"kind": "message", "from": "user", "sender": user,
                                                          "text": labels[button], "tap": True})
        if shown.get("answered") is None:
            self.transcript.append(conversation, {"kind": "answered", "target": shown["seq"],
                                                  "label": labels[button], "by": user})
        return entry

    async def upload(self, user: str, conversation: str, name: str, data: bytes, mime: str,
                     seconds: float | None, client_id: str, caption: str = "") -> Entry:
        """A file (or a voice note recorded in the page) saved into the conversation's own files, with the
        words typed beside it."""
        message_id = f"web-{user}-{_client_id(client_id)}"
        self._admit(user, conversation, name, message_id)
        already = self.transcript.by_key(conversation, f"in:{message_id}")
        if already is not None:
            return already
        path = await self.context.save_attachment(name, data, conversation=conversation)
        text = "\n".join(line for line in (caption.strip(), f"[file: {path}]") if line)
        payload = self._payload(user, conversation, text, message_id, files=[str(path)])
        voice = is_audio(mime, name)
        if voice:
            payload = with_audio(payload, [audio_note(path, seconds, mime)])
        return await self._take(payload, conversation, {
            "kind": "message", "from": "user", "sender": user, "text": caption.strip(),
            "file": {"name": name, "size": len(data), "path": str(path), "voice": voice}})

    async def file_of(self, conversation: str, ref: str) -> tuple[str, bytes] | None:
        """The name and bytes of the file the message `ref` carries (None: it carries none)."""
        shown = self.transcript.message(conversation, ref)
        file = (shown or {}).get("file")
        if not isinstance(file, dict):
            return None
        data = await asyncio.to_thread(Path(file["path"]).read_bytes)
        return str(file["name"]), data

    # --- outbound ---------------------------------------------------------------------------

    async def typing(self, conversation: str) -> None:
        """Shows "… is typing" in the conversation's open tabs while a turn runs: the gateway calls this every
        few seconds until the message is answered, and the page hides it when the answer comes or when no call
        came for TYPING_SHOWN_MS (chat.js)."""
        if is_conversation(conversation):
            self.transcript.signal(conversation, {"kind": "typing"})

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        conversation = outgoing.conversationId or outgoing.senderId or ""
        if not is_conversation(conversation):
            raise PermanentError(f"web: {conversation!r} is no conversation of the web chat")
        key = delivery_key(outgoing)
        sender = outgoing.agent or "switchyard"

        async def edit(ref: str, text: str) -> bool:
            if self.transcript.message(conversation, ref) is None:
                return False
            self.transcript.append(conversation, {"kind": "edit", "target": int(ref), "text": text,
                                                  "draft": outgoing.draft, "final": not outgoing.progress_key})
            return True

        if outgoing.progress_key and not outgoing.files:
            async def post(text: str) -> str:
                entry = self.transcript.append(conversation, {
                    "kind": "message", "from": "agent", "sender": sender, "text": text, "note": True,
                    "draft": outgoing.draft}, key=f"{key}:note")
                return str(entry["seq"])

            return await deliver_note(outgoing, self.notes, clip_note(outgoing.message, TEXT_LIMIT), post, edit)

        async def send_part(part: Part) -> str:
            return await self._post(outgoing, conversation, sender, part, f"{key}:{part.index}")

        parts = [part for part in reply_parts(outgoing, TEXT_LIMIT, shows_buttons=True)
                 if part.file is not None or (part.text or "").strip()]
        return await deliver_parts(outgoing, parts, replacing_preview(outgoing, self.notes, send_part, edit),
                                   self.journal)

    async def _post(self, outgoing: OutgoingPayload, conversation: str, sender: str, part: Part, key: str) -> str:
        """Appends one part to the log (a file copied into the conversation's files first)."""
        found = self.transcript.by_key(conversation, key)
        if found is not None:
            return str(found["seq"])
        fields: Entry = {"kind": "message", "from": "agent", "sender": sender, "text": part.text or "",
                         "run": outgoing.workflowRunId}
        if (outgoing.model_extra or {}).get("receipt"):
            fields["note"] = True  # "queued behind 1 message": said while the turn still waits
        if part.buttons:
            fields["buttons"] = [[button.id, button.label] for button in part.buttons]
        if part.file is not None:
            data = await self.context.read_attachment(outgoing, part.file)
            saved = await self.context.save_attachment(part.file.name, data, conversation=conversation)
            fields["file"] = {"name": part.file.name, "size": len(data), "path": str(saved)}
        return str(self.transcript.append(conversation, fields, key=key)["seq"])


def _dashboard_of(settings: Settings) -> str | None:
    """The dashboard's address when the settings fix it (a port, not 0): where the page links operators."""
    dashboard = settings.dashboard
    if not dashboard.port:
        return None
    host = f"[{dashboard.host}]" if ":" in dashboard.host else dashboard.host
    return f"http://{host}:{dashboard.port}/"


def _client_id(value: str) -> str:
    """The page's id for a message, or a fresh one when it sent none fit to use."""
    return value if CLIENT_ID.match(value) else f"s{time.time_ns()}"


def _login_name() -> str:
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return "owner"
    return name if USER.match(name) else "owner"
