"""The heartbeat channel itself: sends the beats, records each answer (imported when a heartbeat profile is built)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from gateway import (
    ChannelContext,
    ChannelProfile,
    DeliveryRecord,
    IncomingPayload,
    OutgoingPayload,
    Sink,
    atomic_write,
    now_ms,
    numbered,
    safe_name,
    utc_now_iso,
)
from plugins.heartbeat import CHANNEL_TYPE, CHECK_FUNCTION, OK, notify_problem, state_path
from plugins.heartbeat.profile import HeartbeatProfileOptions

log = logging.getLogger("switchyard.heartbeat")

class HeartbeatChannel:
    """Sends a heartbeat payload every `interval_sec` and records the round trip of each answer.

    The answer lands in `outgoing/<messageId>.json` and is handed to `send` by the dispatcher.
    An answer other than HEARTBEAT_OK is forwarded to the `notify` profile and conversation.
    """

    name = CHANNEL_TYPE
    takes_receipts = False  # a probe: its one answer is the reply file, nothing else

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        self.profile_id = profile.id
        self.context = context
        self.interval_s = float(profile.option("interval_sec", 60))
        self.text = str(profile.option("message", "heartbeat"))
        self.notify = HeartbeatProfileOptions.model_validate(profile.model_extra or {}).notify
        self._path = state_path(context.home, profile.id)
        self._state: dict[str, Any] = {"profile": profile.id, "interval_sec": self.interval_s,
                                       "started_at": utc_now_iso(), "started_ms": now_ms(), "beats": 0}
        self._outstanding: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self, sink: Sink) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._save()
        problem = notify_problem(self.context.settings, self.context.profile)
        if problem:
            log.warning("heartbeat %s: %s", self.profile_id, problem)
            self.context.events.emit("heartbeat.notify_missing", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     reason=problem)
        self._task = asyncio.create_task(self._beat(sink), name=f"heartbeat:{self.profile_id}")

    async def _beat(self, sink: Sink) -> None:
        while True:
            stamp = now_ms()
            message_id = f"hb-{safe_name(self.profile_id)}-{stamp}"
            self._outstanding[message_id] = stamp
            await sink(IncomingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender="heartbeat",
                senderId="heartbeat", message=self.text, timestamp=stamp, messageId=message_id,
                conversationId="heartbeat", invokeFunction=CHECK_FUNCTION,
            ))
            self._state.update(beats=self._state["beats"] + 1, last_sent_at=utc_now_iso(), last_sent_ms=stamp)
            self._save()
            await asyncio.sleep(self.interval_s)

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        if outgoing.progress_key is not None:  # a note while an agent works is not the beat's answer
            return DeliveryRecord()
        sent_ms = self._outstanding.pop(outgoing.messageId, outgoing.timestamp)
        rtt_ms = max(0, now_ms() - sent_ms)
        healthy = outgoing.message.strip().startswith(OK)
        answer = numbered(outgoing.message, outgoing.buttons)  # no buttons here: a numbered list
        self._state.update(last_answer_at=utc_now_iso(), last_answer_ms=now_ms(), last_rtt_ms=rtt_ms,
                           last_answer=answer[:200], healthy=healthy)
        self._save()
        if healthy:
            self.context.events.emit("heartbeat.ok", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     rtt_ms=rtt_ms, messageId=outgoing.messageId)
        else:
            self.context.events.emit("heartbeat.alert", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     rtt_ms=rtt_ms, reason=outgoing.message[:200])
            self._forward(outgoing, answer)
        return DeliveryRecord(platform_ids=[outgoing.messageId], detail={"rtt_ms": rtt_ms})

    def _forward(self, outgoing: OutgoingPayload, answer: str) -> None:
        if self.notify is None or not self.notify.profile:
            return
        target = self.context.settings.profile(self.notify.profile)
        if target is None:
            log.warning("heartbeat %s: answer not forwarded, notify profile %r is not configured: %s",
                        self.profile_id, self.notify.profile, outgoing.message[:200])
            return
        self.context.outbox.write(OutgoingPayload(
            channel=target.type, channelProfileId=target.id, sender="heartbeat",
            message=f"Heartbeat {self.profile_id} answered: {answer}", originalMessage=self.text,
            timestamp=now_ms(), messageId=f"{outgoing.messageId}-notify", agent=outgoing.agent,
            conversationId=self.notify.conversationId,
        ))

    def _save(self) -> None:
        atomic_write(self._path, json.dumps(self._state, indent=2).encode(), fsync=False)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
