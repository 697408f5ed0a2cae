"""Checks for channels that edit progress notes in place, run against each platform's fake server.

A platform's tests subclass `ProgressNoteChecks` and provide a `note_driver` fixture: its conformance
driver plus what the fake records of posts and edits (`NoteDriver`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import DeliveryError, OutgoingPayload
from gateway.testing.conformance import ChannelDriver, ChannelRig, reply

KEY = "run-1/build"


class NoteDriver(ChannelDriver):
    """A conformance driver that also reports the fake's posts and edits by platform message id."""

    other_conversation = ""

    def posted(self) -> list[tuple[str, str]]:
        """(message id, text as first posted) of each text message the bot posted, in order."""
        raise NotImplementedError

    def edits(self) -> list[tuple[str, str]]:
        """(message id, new text) of each edit the platform accepted, in order."""
        raise NotImplementedError

    def delete_sent(self) -> None:
        """Deletes every message the bot posted so far, as a user or moderator would."""
        raise NotImplementedError

    def shown(self) -> list[str]:
        """What the conversation now shows: each posted message with its edits applied."""
        texts = dict(self.posted())
        for message_id, text in self.edits():
            texts[message_id] = text
        return list(texts.values())


def note(driver: NoteDriver, text: str, key: str = KEY, conversation: str | None = None) -> OutgoingPayload:
    """A progress note as the orchestrator writes it."""
    run_id, _, step_id = key.partition("/")
    return reply(text, conversation or driver.conversation, channel=driver.type, progressKey=key,
                 workflowRunId=run_id, workflowStepId=step_id)


class ProgressNoteChecks:
    """What a channel with `edits_progress` does with progress notes."""

    @pytest.fixture
    async def note_rig(self, note_driver: NoteDriver, tmp_path: Path) -> AsyncIterator[ChannelRig]:
        rig = ChannelRig(note_driver, tmp_path / "home")
        await rig.start()
        yield rig
        await rig.stop()

    async def send(self, rig: ChannelRig, payload: OutgoingPayload) -> None:
        assert rig.channel is not None
        await rig.channel.send(payload)

    async def test_the_channel_declares_that_it_edits_notes(self, note_rig: ChannelRig) -> None:
        assert getattr(note_rig.channel, "edits_progress", False) is True

    async def test_notes_with_one_key_are_one_message_edited_in_place(
        self, note_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        for text in ("working: using Read", "working: using Edit", "working: running tests"):
            await self.send(note_rig, note(note_driver, text))
        posted = note_driver.posted()
        assert [text for _, text in posted] == ["working: using Read"]
        first = posted[0][0]
        assert note_driver.edits() == [(first, "working: using Edit"), (first, "working: running tests")]
        assert note_driver.shown() == ["working: running tests"]

    async def test_notes_with_two_keys_are_two_messages(self, note_rig: ChannelRig, note_driver: NoteDriver) -> None:
        await self.send(note_rig, note(note_driver, "build: starting", key="run-1/build"))
        await self.send(note_rig, note(note_driver, "deploy: starting", key="run-2/deploy"))
        await self.send(note_rig, note(note_driver, "build: linking", key="run-1/build"))
        await self.send(note_rig, note(note_driver, "deploy: uploading", key="run-2/deploy"))
        assert note_driver.shown() == ["build: linking", "deploy: uploading"]
        assert len(note_driver.edits()) == 2

    async def test_one_key_in_two_conversations_is_two_messages(
        self, note_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(note_rig, note(note_driver, "here: 1"))
        await self.send(note_rig, note(note_driver, "there: 1", conversation=note_driver.other_conversation))
        await self.send(note_rig, note(note_driver, "there: 2", conversation=note_driver.other_conversation))
        assert note_driver.shown() == ["here: 1", "there: 2"]

    async def test_a_deleted_note_is_posted_again_then_edited(
        self, note_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(note_rig, note(note_driver, "step 1"))
        note_driver.delete_sent()
        await self.send(note_rig, note(note_driver, "step 2"))
        await self.send(note_rig, note(note_driver, "step 3"))
        posted = note_driver.posted()
        assert [text for _, text in posted] == ["step 1", "step 2"]
        assert note_driver.edits() == [(posted[1][0], "step 3")]

    async def test_a_reply_between_notes_is_posted_and_the_note_still_edited(
        self, note_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(note_rig, note(note_driver, "working: 1"))
        await self.send(note_rig, reply("Half way there.", note_driver.conversation, channel=note_driver.type))
        await self.send(note_rig, note(note_driver, "working: 2"))
        posted = note_driver.posted()
        assert [text for _, text in posted] == ["working: 1", "Half way there."]
        assert note_driver.edits() == [(posted[0][0], "working: 2")]

    async def test_a_long_note_is_clipped_to_one_message(self, note_rig: ChannelRig, note_driver: NoteDriver) -> None:
        await self.send(note_rig, note(note_driver, "a" * (note_driver.limit * 2)))
        await self.send(note_rig, note(note_driver, "b" * (note_driver.limit + 1)))
        [(_, first)] = note_driver.posted()
        [(_, second)] = note_driver.edits()
        assert len(first) <= note_driver.limit and first.startswith("aaa") and first.endswith("…")
        assert len(second) <= note_driver.limit and second.startswith("bbb") and second.endswith("…")

    async def test_a_failed_edit_is_retried_as_an_edit(self, note_rig: ChannelRig, note_driver: NoteDriver) -> None:
        await self.send(note_rig, note(note_driver, "working: 1"))
        note_driver.fail_next(1)
        with pytest.raises(DeliveryError):
            await self.send(note_rig, note(note_driver, "working: 2"))
        await self.send(note_rig, note(note_driver, "working: 2"))
        assert note_driver.shown() == ["working: 2"]

    async def test_a_rate_limited_edit_waits_and_lands(self, note_rig: ChannelRig, note_driver: NoteDriver) -> None:
        await self.send(note_rig, note(note_driver, "working: 1"))
        note_driver.rate_limit_next(1, retry_after=0.1)
        await self.send(note_rig, note(note_driver, "working: 2"))
        assert note_driver.shown() == ["working: 2"]
        assert len(note_driver.posted()) == 1
