"""The dispatcher: delivery to the owning channel, order per conversation, retries, sent/, no owner."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from gateway.api import DeliveryError, PermanentError
from gateway.channelkit.attachments import AttachmentPolicy, attachment_folder, read_attachment
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.outbox import FileOutbox
from gateway.runtime.dispatcher import Dispatcher
from gateway.settings import QueueSettings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import FakeChannel, async_wait_until, make_incoming

SETTINGS = QueueSettings(backoff_initial_ms=5, backoff_max_ms=20, max_attempts=3, fsync=False)


def _reply(text: str, **fields) -> OutgoingPayload:
    incoming = make_incoming(text, channel="fake", channelProfileId="fake", **fields)
    return OutgoingPayload.reply_to(incoming, text, agent="a", timestamp=incoming.timestamp)


def _setup(home: Home, *channels: FakeChannel) -> tuple[Dispatcher, FileOutbox]:
    events = EventLog(home.events_file)
    return Dispatcher(home, list(channels), events, SETTINGS), FileOutbox(home, events, fsync=False)


async def test_delivers_in_order_and_moves_to_sent(home: Home) -> None:
    channel = FakeChannel()
    dispatcher, outbox = _setup(home, channel)
    names = [outbox.write(_reply(f"r{i}")).name for i in range(5)]
    for name in names:
        dispatcher.notice(name)
    await async_wait_until(lambda: len(channel.sent) == 5)
    assert [p.message for p in channel.sent] == [f"r{i}" for i in range(5)]
    await async_wait_until(lambda: sorted(os.listdir(home.sent)) == sorted(names))
    assert list(home.outgoing.glob("*.json")) == []  # every reply left outgoing/


async def test_a_slow_conversation_does_not_delay_another(home: Home) -> None:
    channel = FakeChannel()
    gate = asyncio.Event()

    async def hold_slow(payload: OutgoingPayload) -> None:
        if payload.conversationId == "slow":
            await gate.wait()

    channel.on_send = hold_slow
    dispatcher, outbox = _setup(home, channel)
    dispatcher.notice(outbox.write(_reply("stuck", conversationId="slow")).name)
    dispatcher.notice(outbox.write(_reply("quick", conversationId="fast")).name)
    await async_wait_until(lambda: [p.message for p in channel.sent] == ["quick"])
    gate.set()
    await async_wait_until(lambda: len(channel.sent) == 2)


async def test_failed_delivery_is_retried_honouring_retry_after(home: Home) -> None:
    channel = FakeChannel(fail_times=2, retry_after=0.01)
    dispatcher, outbox = _setup(home, channel)
    dispatcher.notice(outbox.write(_reply("persist")).name)
    await async_wait_until(lambda: len(channel.sent) == 1)
    events = [e for e in read_events(home.events_file) if e["event"] == "outgoing.retry"]
    assert [e["backoff_ms"] for e in events] == [10, 10]
    assert [(e["rate_limited"], e["profile"]) for e in events] == [(True, "fake")] * 2  # counted as 429s


async def test_delivery_that_keeps_failing_is_dead_lettered_not_dropped(home: Home) -> None:
    channel = FakeChannel(fail_times=99)
    dispatcher, outbox = _setup(home, channel)
    name = outbox.write(_reply("never")).name
    dispatcher.notice(name)
    await async_wait_until(lambda: (home.failed / f"{name}.error.json").exists())
    assert json.loads((home.failed / name).read_bytes())["message"] == "never"


async def test_a_permanent_refusal_is_dead_lettered_at_once_with_the_reason(home: Home) -> None:
    channel = FakeChannel()
    tried: list[str] = []

    async def refuse_blocked(payload: OutgoingPayload) -> None:
        if payload.conversationId == "blocked":
            tried.append(payload.message)
            raise PermanentError("Forbidden: bot was blocked by the user")

    channel.on_send = refuse_blocked
    dispatcher, outbox = _setup(home, channel)
    name = outbox.write(_reply("hello?", conversationId="blocked")).name
    dispatcher.notice(name)
    dispatcher.notice(outbox.write(_reply("fine", conversationId="open")).name)
    report = await async_wait_until(lambda: (home.failed / f"{name}.error.json").exists()
                                    and json.loads((home.failed / f"{name}.error.json").read_bytes()))
    assert report["reason"] == "the platform refused it: Forbidden: bot was blocked by the user"
    assert report["attempts"] == 1 and tried == ["hello?"]
    assert not [e for e in read_events(home.events_file) if e["event"] == "outgoing.retry"]
    await async_wait_until(lambda: [p.message for p in channel.sent] == ["fine"])


async def test_payload_without_a_running_channel_stays_with_one_warning(home: Home) -> None:
    dispatcher, outbox = _setup(home, FakeChannel())
    for i in range(3):
        payload = _reply(f"x{i}").model_copy(update={"channel": "telegram", "channelProfileId": "tg"})
        dispatcher.notice(outbox.write(payload).name)
    assert len(list(home.outgoing.iterdir())) == 3
    warnings = [e for e in read_events(home.events_file) if e["event"] == "outgoing.undeliverable"]
    assert len(warnings) == 1


async def test_prune_sent_removes_only_old_files(home: Home) -> None:
    dispatcher, _ = _setup(home)
    old, new = home.sent / "old.json", home.sent / "new.json"
    old.write_text("{}")
    new.write_text("{}")
    long_ago = time.time() - 8 * 86400
    os.utime(old, (long_ago, long_ago))
    assert dispatcher.prune_sent() == 1
    assert not old.exists() and new.exists()


async def test_a_reply_delivered_by_another_process_during_the_scan_is_skipped(
    home: Home, tmp_path, monkeypatch
) -> None:
    channel = FakeChannel()
    dispatcher, outbox = _setup(home, channel)
    taken, kept = (outbox.write(_reply(text)).name for text in ("theirs", "ours"))
    (tmp_path / "sent-elsewhere").mkdir()
    listing = os.scandir

    def racing(path):
        entries = list(listing(path))
        if os.path.realpath(path) == os.path.realpath(home.outgoing) and (home.outgoing / taken).exists():
            os.rename(home.outgoing / taken, tmp_path / "sent-elsewhere" / taken)
        return iter(entries)

    monkeypatch.setattr(os, "scandir", racing)
    dispatcher.rescan()
    monkeypatch.setattr(os, "scandir", listing)
    await async_wait_until(lambda: [p.message for p in channel.sent] == ["ours"])
    assert (home.sent / kept).exists()


async def test_a_file_refused_at_delivery_leaves_the_text_delivered_once_with_a_note(home: Home) -> None:
    channel = FakeChannel()
    dispatcher, _ = _setup(home, channel)
    dropped = _reply("see attached").model_copy(update={"files": ["/etc/passwd"]})
    (home.outgoing / "fake_dropped.json").write_bytes(dropped.to_json())  # not through the outbox
    dispatcher.rescan()
    await async_wait_until(lambda: (home.sent / "fake_dropped.json").exists())
    (sent,) = channel.sent
    assert sent.files == []
    assert sent.message == "see attached\n[file not sent: /etc/passwd is outside the allowed folders or does not exist]"
    events = read_events(home.events_file)
    assert [(e["path"], e["stage"]) for e in events if e["event"] == "outgoing.file_refused"] == [
        ("/etc/passwd", "delivery")]
    assert not [e for e in events if e["event"] in ("outgoing.retry", "outgoing.failed")]


async def test_the_channel_reads_an_allowed_file_from_what_the_dispatcher_opened(home: Home) -> None:
    own = attachment_folder(home, "fake", "c1") / "notes.txt"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"checked bytes")
    channel = FakeChannel()
    read: list[bytes] = []

    async def read_while_sending(payload: OutgoingPayload) -> None:
        own.unlink()
        own.symlink_to("/etc/passwd")  # swapped after the dispatcher opened it: what was opened is sent
        read.append(await read_attachment(payload, own, AttachmentPolicy(home)))

    channel.on_send = read_while_sending
    dispatcher, outbox = _setup(home, channel)
    dispatcher.notice(outbox.write(_reply("notes", conversationId="c1").model_copy(update={"files": [str(own)]})).name)
    await async_wait_until(lambda: channel.sent)
    assert channel.sent[0].files == [str(own)] and read == [b"checked bytes"]


async def test_a_failing_reply_keeps_its_place_and_the_next_one_waits_behind_it(home: Home) -> None:
    channel = FakeChannel(fail_times=2)
    dispatcher, outbox = _setup(home, channel)
    for text in ("first", "second"):
        dispatcher.notice(outbox.write(_reply(text)).name)
    await async_wait_until(lambda: len(channel.sent) == 2)
    assert [p.message for p in channel.sent] == ["first", "second"]
    retries = [e for e in read_events(home.events_file) if e["event"] == "outgoing.retry"]
    assert [e["attempt"] for e in retries] == [1, 2]


async def test_after_max_attempts_a_reply_is_dead_with_its_attempts_and_the_next_one_goes_out(home: Home) -> None:
    channel = FakeChannel()

    async def refuse_doomed(payload: OutgoingPayload) -> None:
        if payload.message == "doomed":
            raise DeliveryError("doomed failed on purpose")

    channel.on_send = refuse_doomed
    dispatcher, outbox = _setup(home, channel)
    name = outbox.write(_reply("doomed")).name
    dispatcher.notice(name)
    dispatcher.notice(outbox.write(_reply("next")).name)
    await async_wait_until(lambda: [p.message for p in channel.sent] == ["next"])
    report = json.loads((home.failed / f"{name}.error.json").read_bytes())
    assert report["attempts"] == 3 and "doomed failed on purpose" in report["reason"]
    [failed] = [e for e in read_events(home.events_file) if e["event"] == "outgoing.failed"]
    assert failed["attempts"] == 3 and failed["file"] == name


async def test_replies_after_a_held_head_wait_for_it_and_go_out_once_each_in_order(home: Home) -> None:
    channel = FakeChannel()
    gate = asyncio.Event()

    async def hold_first(payload: OutgoingPayload) -> None:
        if payload.message == "r1":
            await gate.wait()

    channel.on_send = hold_first
    dispatcher, outbox = _setup(home, channel)
    for text in ("r1", "r2", "r3"):
        dispatcher.notice(outbox.write(_reply(text)).name)
    dispatcher.notice(outbox.write(_reply("other", conversationId="other")).name)
    await async_wait_until(lambda: [p.message for p in channel.sent] == ["other"])  # while r1 is held
    gate.set()
    await async_wait_until(lambda: len(channel.sent) >= 4)
    await async_wait_until(lambda: list(home.outgoing.glob("*.json")) == [])
    assert [p.message for p in channel.sent] == ["other", "r1", "r2", "r3"]


@pytest.mark.parametrize("named_by_message_id", [(), ("fake",)], ids=["channel_id_timestamp", "message_id"])
async def test_replies_found_at_start_with_one_mtime_go_out_in_the_order_they_were_written(
    home: Home, named_by_message_id: tuple[str, ...]
) -> None:
    events = EventLog(home.events_file)
    outbox = FileOutbox(home, events, fsync=False, named_by_message_id=named_by_message_id)
    written = [outbox.write(_reply(text, messageId=message_id)).name for text, message_id in
               (("first", "m3"), ("second", "m2"), ("third", "m1"))]  # message ids in the opposite order
    assert sorted(written) == written[::-1]
    same = time.time()
    for name in written:  # within one tick of the file system's clock
        os.utime(home.outgoing / name, (same, same))
    channel = FakeChannel()
    Dispatcher(home, [channel], events, SETTINGS).rescan()  # a restart: the backlog found in outgoing/
    await async_wait_until(lambda: len(channel.sent) == 3)
    assert [p.message for p in channel.sent] == ["first", "second", "third"]
