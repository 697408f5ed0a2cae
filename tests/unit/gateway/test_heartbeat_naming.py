"""Spec 002 through a running Gateway that has no heartbeat profile: the answer to a heartbeat message is
`outgoing/<messageId>.json`, named so because the heartbeat plugin declares it for its channel type
(`switchyard_reply_named_by_message_id`), not because a heartbeat channel runs; a reply to any other channel
keeps `<channel>_<messageId>_<timestamp>.json`."""

from __future__ import annotations

import json

from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import QueueSettings, Settings
from gateway.spool.queue import FileQueue
from gateway.testing import async_wait_until, make_incoming
from plugins.heartbeat import CHANNEL_TYPE, CHECK_FUNCTION, OK
from tests.fakes.orchestrator import NO_CHAT_TOOLS


def _send(home: Home, text: str, **fields: str) -> None:
    """Queues a message as `switchyard send` does (gateway/cli/commands.py)."""
    payload = make_incoming(text, **fields)
    FileQueue(home, fsync=False).enqueue(payload.to_json(), hint=f"{payload.channel}-{payload.messageId}")


async def test_a_heartbeat_answer_is_named_by_its_message_id_while_no_heartbeat_profile_runs(home: Home) -> None:
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False))  # no channel profile at all: no heartbeat one
    gateway = Gateway(home, settings, build_plugin_manager(settings))  # the installed plugins: heartbeat's too
    await gateway.start()
    try:
        _send(home, "heartbeat", channel=CHANNEL_TYPE, channelProfileId="beat", sender="heartbeat",
              senderId="heartbeat", conversationId="heartbeat", messageId="hb-beat-1", invokeFunction=CHECK_FUNCTION)
        _send(home, "hello", channel="console", channelProfileId="console", messageId="chat-1")
        await async_wait_until(lambda: len(list(home.outgoing.glob("*.json"))) == 2)
    finally:
        await gateway.stop()
    replies = {json.loads(path.read_bytes())["messageId"]: path.name for path in home.outgoing.glob("*.json")}
    assert replies["hb-beat-1"] == "hb-beat-1.json", replies
    assert replies["chat-1"].startswith("console_chat-1_"), replies
    assert json.loads((home.outgoing / "hb-beat-1.json").read_bytes())["message"].startswith(OK)
