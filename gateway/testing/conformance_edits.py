"""The conformance checks for edited messages (issue 23 §3), for a driver that `supports_edits`.

    class TestMyChannel(ChannelConformance, EditConformance): ...

An edit reaches the sink as a payload with `editOf` (the original's messageId) and a messageId of its own,
the same each time the platform reports that edit; the rig's sink folds it into the original while that one
waits (gateway.stores.EditFolding), as the gateway's does, else queues it. Access rules are a new message's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import async_wait_until
from gateway.testing.rig import ChannelDriver, ChannelRig


class EditConformance:
    """What every channel that reports edits does with them; mix into a ChannelConformance subclass."""

    async def test_an_edit_of_a_waiting_message_replaces_its_text_in_place(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.supports_edits:
            pytest.skip(f"{driver.type} reports no edits")
        await driver.user_says("helo wrld")
        (original,) = await async_wait_until(rig.incoming)
        assert rig.context is not None
        names = sorted(p.name for p in rig.context.home.incoming.glob("*.json"))
        await driver.user_edits_last("hello world")
        await async_wait_until(lambda: any(p["message"] == "hello world" for p in rig.incoming()))
        assert rig.incoming() == [{**original, "message": "hello world"}], "the waiting message holds the edit"
        assert sorted(p.name for p in rig.context.home.incoming.glob("*.json")) == names, "same file: same place"

    async def test_an_edit_of_a_message_with_a_file_keeps_the_file_and_fetches_nothing_again(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.supports_edits or not driver.supports_files:
            pytest.skip(f"{driver.type} reports no edits, or takes no files")
        await driver.user_says("see the file", file=("notes.txt", b"the notes"))
        (original,) = await async_wait_until(rig.incoming)
        assert rig.context is not None and original["files"]
        saved = sorted(p for p in rig.context.home.files.rglob("*") if p.is_file())
        await driver.user_edits_last("see the notes file")
        await async_wait_until(lambda: any(p["message"] == "see the notes file" for p in rig.incoming()))
        (edited,) = rig.incoming()
        assert edited["files"] == original["files"], "the attachment stays the original's"
        assert sorted(p for p in rig.context.home.files.rglob("*") if p.is_file()) == saved, "downloaded again"

    async def test_an_edit_of_a_taken_message_is_queued_as_an_edit_of_it(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.supports_edits:
            pytest.skip(f"{driver.type} reports no edits")
        await driver.user_says("first")
        await async_wait_until(rig.incoming)
        assert rig.queue is not None
        rig.queue.rescan()
        taken = rig.queue.claim()  # a worker has it: the edit can no longer change it
        assert taken is not None
        original = json_of(taken.data)
        edit = await driver.user_edits_last("first, edited")
        (queued,) = await async_wait_until(rig.incoming)
        assert queued["editOf"] == original["messageId"] and queued["message"] == "first, edited"
        assert queued["messageId"] != original["messageId"]
        same = ("channel", "channelProfileId", "conversationId", "senderId")
        assert {key: queued[key] for key in same} == {key: original[key] for key in same}
        assert json_of(taken.path.read_bytes())["message"] == "first", "what was taken is not changed"
        await driver.edit_again(edit)
        await driver.user_says("done")  # taken in after the edit reported again: that one is in by then
        await async_wait_until(lambda: any(p["message"] == "done" for p in rig.incoming()))
        edits = [p for p in rig.incoming() if p["message"] != "done"]
        assert {p["messageId"] for p in edits} == {queued["messageId"]}, "an edit reported again keeps its messageId"

    async def test_an_edit_from_a_sender_outside_allow_from_is_ignored(
        self, driver: ChannelDriver, tmp_path: Path
    ) -> None:
        if not driver.supports_edits:
            pytest.skip(f"{driver.type} reports no edits")
        rig = ChannelRig(driver, tmp_path / "allow", allow_from=["1001"])
        await rig.start()
        try:
            await driver.user_says("hi", sender_id="666", sender="Mallory")
            await driver.user_edits_last("give me the keys", sender_id="666", sender="Mallory")
            await driver.user_says("hello", sender_id="1001", sender="Ada")
            await async_wait_until(rig.incoming)
            assert [(p["senderId"], p["message"]) for p in rig.incoming()] == [("1001", "hello")]
        finally:
            await rig.stop()


def json_of(data: bytes) -> dict[str, object]:
    import json

    parsed: dict[str, object] = json.loads(data)
    return parsed
