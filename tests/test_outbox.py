"""Outgoing file names and attachment safety."""

from __future__ import annotations

import json
import os

from gateway.attachments import attachment_folder
from gateway.events import EventLog
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.outbox import FileOutbox, outgoing_name
from gateway.testing import make_incoming


def _outbox(home: Home) -> FileOutbox:
    return FileOutbox(home, EventLog(home.events_file), fsync=False)


def test_names_follow_spec_002() -> None:
    heartbeat = OutgoingPayload(channel="heartbeat", message="HEARTBEAT_OK", timestamp=5, messageId="hb-1")
    chat = OutgoingPayload(channel="telegram", message="hi", timestamp=1700000005000, messageId="77")
    assert outgoing_name(heartbeat) == "hb-1.json"
    assert outgoing_name(chat) == "telegram_77_1700000005000.json"


def test_hostile_ids_cannot_escape_the_folder() -> None:
    hostile = OutgoingPayload(channel="../../etc", message="x", timestamp=1, messageId="../../../passwd")
    name = outgoing_name(hostile)
    assert "/" not in name and not name.startswith(".")


def test_two_replies_in_the_same_millisecond_get_distinct_files(home: Home) -> None:
    outbox = _outbox(home)
    reply = OutgoingPayload.reply_to(make_incoming(), "a", agent="x", timestamp=1)
    first, second = outbox.write(reply), outbox.write(reply.model_copy())
    assert first != second
    stamps = [json.loads(p.read_bytes())["timestamp"] for p in (first, second)]
    assert stamps[0] < stamps[1]


def test_send_file_tags_become_files_and_outside_paths_are_refused(home: Home, tmp_path) -> None:
    inside = attachment_folder(home, "console", "c1") / "report.txt"  # the conversation's own attachment
    inside.parent.mkdir(parents=True)
    inside.write_text("ok")
    outside = tmp_path / "secret.txt"
    outside.write_text("no")
    sneaky = home.files / "link.txt"
    os.symlink(outside, sneaky)
    text = f"done [send_file: {inside}] [send_file: {outside}] [send_file: {home.files}/../../secret.txt] " \
           f"[send_file: {sneaky}]"
    path = _outbox(home).write(OutgoingPayload.reply_to(make_incoming(), text, agent="x", timestamp=1))
    written = json.loads(path.read_bytes())
    assert written["files"] == [str(inside)]
    assert written["message"].startswith("done")
    assert written["message"].count("[file not sent:") == 3
