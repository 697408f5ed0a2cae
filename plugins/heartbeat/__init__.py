"""The heartbeat channel: a periodic check-in that travels the whole loop and proves it is alive.

Here are its profile keys, its hooks and what `switchyard status` reads of its beats; the channel
(plugins/heartbeat/channel.py) is imported when a heartbeat profile is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import hookimpl, now_ms, safe_name

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile, FunctionSpec, Home, Settings, StatusCache
    from plugins.heartbeat.channel import HeartbeatChannel

CHANNEL_TYPE = "heartbeat"
OK = "HEARTBEAT_OK"
CHECK_FUNCTION = "heartbeat_check"  # what each probe asks the selector to invoke (`invokeFunction`)
MISS_GRACE_S = 5.0


def state_path(home: Home, profile_id: str) -> Path:
    """Where a heartbeat profile records its beats (read by `switchyard status`)."""
    return home.state / "heartbeat" / f"{safe_name(profile_id)}.json"


def notify_problem(settings: Settings, profile: ChannelProfile) -> str | None:
    """Why a heartbeat profile's alerts cannot be forwarded (its `notify` profile does not exist), or None."""
    notify = profile.option("notify")
    target = notify.get("profile") if isinstance(notify, dict) else None
    if not target or settings.profile(str(target)) is not None:
        return None
    return f"notify profile {target!r} is not configured: answers other than {OK} are not forwarded"


def read_heartbeat(home: Home, profile: ChannelProfile | str) -> dict[str, Any]:
    """A heartbeat profile's (or profile id's) last recorded beat, with `missed` set when an answer is overdue."""
    profile_id = profile if isinstance(profile, str) else profile.id
    try:
        state: dict[str, Any] = json.loads(state_path(home, profile_id).read_bytes())
    except (OSError, ValueError):
        return {"profile": profile_id, "missed": None, "note": "no beat recorded yet"}
    interval_ms = float(state.get("interval_sec", 60)) * 1000
    since = state.get("last_answer_ms") or state.get("started_ms") or 0
    state["missed"] = now_ms() - since > 2 * interval_ms + MISS_GRACE_S * 1000
    return state


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: heartbeat` profile may carry."""
    from plugins.heartbeat.profile import HeartbeatProfileOptions

    return {CHANNEL_TYPE: HeartbeatProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_reply_named_by_message_id() -> list[str]:
    """Spec 002: a heartbeat's answer is `outgoing/<messageId>.json`, whether or not a heartbeat profile runs."""
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> HeartbeatChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.heartbeat.channel import HeartbeatChannel

    return HeartbeatChannel(profile, context)


@hookimpl
def switchyard_functions() -> list[FunctionSpec]:
    from gateway.api import FunctionSpec

    return [FunctionSpec(
        name=CHECK_FUNCTION,
        description="Answers a heartbeat: HEARTBEAT_OK when the gateway and orchestrator are working.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        call=lambda arguments: OK,
    )]


@hookimpl
def switchyard_status(home: Home, settings: Settings, cache: StatusCache) -> dict[str, Any] | None:
    """Each heartbeat profile's last beat, and why its alerts cannot be forwarded (from the status cache)."""
    profiles = cache.remember("heartbeat", lambda: [[p.id, notify_problem(settings, p)] for p in settings.channels
                                                    if p.type == CHANNEL_TYPE])
    beats = []
    for profile_id, problem in profiles:
        beat = read_heartbeat(home, str(profile_id))
        if problem:
            beat["problem"] = problem
        beats.append(beat)
    return {"heartbeats": beats} if beats else None
