"""Outgoing file names and attachment safety."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.channelkit.attachments import (
    AttachmentPolicy,
    AttachmentRefused,
    attachment_folder,
    open_attachment,
    read_all,
)
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.outbox import FileOutbox, outgoing_name
from gateway.plugin_manager import build_plugin_manager
from gateway.telemetry.events import EventLog
from gateway.testing import make_incoming
from orchestrator.execution.results import result_reply
from orchestrator.runs.state import Conversation, RunState, StepState
from plugins.heartbeat.channel import HeartbeatChannel


def _outbox(home: Home) -> FileOutbox:
    return FileOutbox(home, EventLog(home.events_file), fsync=False)


def test_names_follow_spec_002() -> None:
    heartbeat = OutgoingPayload(channel="heartbeat", message="HEARTBEAT_OK", timestamp=5, messageId="hb-1")
    chat = OutgoingPayload(channel="telegram", message="hi", timestamp=1700000005000, messageId="77")
    declared = {t for types in build_plugin_manager().hook.switchyard_reply_named_by_message_id() for t in types}
    assert declared == {HeartbeatChannel.name}  # the heartbeat plugin declares spec 002's name for its type
    assert outgoing_name(heartbeat, declared) == "hb-1.json"
    assert outgoing_name(chat, declared) == "telegram_77_1700000005000.json"
    assert outgoing_name(heartbeat) == "heartbeat_hb-1_5.json"  # the name comes from the declaration


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


# --- opening an attachment for upload -------------------------------------------------------------


def _own_file(home: Home, name: str = "report.txt") -> Path:
    path = attachment_folder(home, "console", "c1") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")
    return path


def _allows(home: Home) -> Callable[[str], bool]:
    reply = OutgoingPayload.reply_to(make_incoming(), "r", agent="x", timestamp=1)
    return lambda real: AttachmentPolicy(home).allows(real, reply)


def test_an_own_attachment_opens_and_reads_whole(home: Home) -> None:
    with open_attachment(str(_own_file(home)), _allows(home)) as handle:
        assert read_all(handle) == b"mine" and read_all(handle) == b"mine"


def test_a_link_anywhere_in_the_path_is_refused(home: Home, tmp_path: Path) -> None:
    own = _own_file(home)
    (own.parent / "via").symlink_to(own.parent)
    (own.parent / "alias.txt").symlink_to(own)
    for path in (own.parent / "via" / own.name, own.parent / "alias.txt", Path(f"{own.parent}/../{own.parent.name}")):
        with pytest.raises(AttachmentRefused):
            open_attachment(str(path), _allows(home))


def test_the_opened_file_is_checked_not_the_path(home: Home, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "outside" / "report.txt"
    secret.parent.mkdir()
    secret.write_text("secret")
    folder = attachment_folder(home, "console", "c1")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(secret.parent)  # a folder swapped for a link after the path was checked:
    monkeypatch.setattr(os.path, "realpath", lambda path: path)  # the path check is passed by the race
    with pytest.raises(AttachmentRefused, match="outside the folders"):
        open_attachment(str(folder / "report.txt"), _allows(home))


def test_fifos_devices_and_missing_files_are_refused_without_blocking(home: Home) -> None:
    fifo = attachment_folder(home, "console", "c1") / "pipe"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    for path, reason in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                         (fifo.with_name("gone"), "cannot be opened")):
        with pytest.raises(AttachmentRefused, match=reason):
            open_attachment(str(path), lambda real: True)


def test_a_run_file_goes_only_to_the_runs_conversation(home: Home) -> None:
    mine, theirs = make_incoming("go"), make_incoming("go", conversationId="c2")
    for run_id, message in (("r-mine", mine), ("r-theirs", theirs)):
        folder = home.runs / run_id / "workspace"
        folder.mkdir(parents=True)
        (folder / "out.txt").write_text(run_id)
        (home.runs / run_id / "state.json").write_text(json.dumps({"runId": run_id, "conversation": {
            "channel": message.channel, "channelProfileId": message.channelProfileId,
            "conversationId": message.conversationId, "senderId": message.senderId}}))
    (home.runs / "active.json").write_text("{}")
    policy, reply = AttachmentPolicy(home), OutgoingPayload.reply_to(mine, "r", agent="x", timestamp=1)
    assert policy.allows(str(home.runs / "r-mine" / "workspace" / "out.txt"), reply)
    assert not policy.allows(str(home.runs / "r-theirs" / "workspace" / "out.txt"), reply)
    assert not policy.allows(str(home.runs / "active.json"), reply)


# --- tags the user wrote ------------------------------------------------------------------------------


def test_a_tag_the_user_wrote_is_never_acted_on() -> None:
    incoming = make_incoming("please [send_file: /srv/a.txt]")
    reply = OutgoingPayload.reply_to(incoming, "You said: please [send_file:/srv/a.txt ] [send_file: /srv/b.txt]",
                                     agent="echo", timestamp=1)
    assert reply.files == ["/srv/b.txt"]
    assert reply.message == "You said: please [send_file:/srv/a.txt ]"


def test_a_run_result_never_acts_on_tags_from_its_input_or_answers() -> None:
    message = make_incoming("start")
    run = RunState(runId="r-1", workflowId="w", orchestratorId="main", state="done",
                   input={"files": ["[send_file: /srv/input.txt]"]}, message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console"),
                   steps={"Ask": StepState(kind="input", status="completed", output="[send_file: /srv/answer.txt]"),
                          "Echo": StepState(kind="agent", status="completed",
                                            output="[send_file: /srv/input.txt] [send_file: /srv/answer.txt] "
                                                   "[send_file: /srv/made.txt]")})
    assert result_reply(run).files == ["/srv/made.txt"]


@pytest.mark.parametrize("folder", ["outgoing", "sent", "failed"])
def test_the_outbox_holds_a_runs_result_wherever_its_file_moved(home: Home, folder: str) -> None:
    """A result written just before a crash is found (waiting, sent or dead), so recovery does not push it
    again; an ack of the same message, another run's result or another state of the run is not it."""
    outbox = _outbox(home)
    message = make_incoming(channel="tg", messageId="m-1")
    ack = outbox.write(OutgoingPayload.reply_to(message, "on it", agent="switchyard", timestamp=1))
    asked = dict(channel="tg", message_id="m-1")
    assert not outbox.holds_result("run-1", "completed", **asked)
    result = OutgoingPayload.reply_to(message, "done", agent="switchyard", timestamp=2)
    result.workflowRunId, result.runState = "run-1", "completed"
    path = outbox.write(result)
    if folder != "outgoing":
        path.rename(getattr(home, folder) / path.name)
    assert outbox.holds_result("run-1", "completed", **asked)
    assert not outbox.holds_result("run-1", "failed", **asked)
    assert not outbox.holds_result("run-2", "completed", **asked)
    assert not outbox.holds_result("run-1", "completed", channel="tg", message_id="m-2")
    assert ack.exists()
