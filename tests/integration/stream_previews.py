"""Checks for channels that show a streamed answer's preview and edit it into the final answer, run against each
platform's fake server with the real client library.

A platform's tests subclass `StreamPreviewChecks` and provide the `note_driver` fixture of its progress-note
checks (tests/integration/progress_notes.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import DeliveryError, OutgoingPayload
from gateway.testing.conformance import ChannelRig, reply
from tests.integration.progress_notes import NoteDriver

KEY = "answer:1001:7"
ANSWER = "The quick brown fox jumps over the lazy dog."


def draft(driver: NoteDriver, text: str, key: str = KEY) -> OutgoingPayload:
    """A draft of a streamed answer as orchestrator/agents/streaming.py writes it."""
    return reply(text, driver.conversation, channel=driver.type, progressKey=key, draft=True,
                 workflowRunId="run-1", workflowStepId="Reply")


def final(driver: NoteDriver, text: str, key: str = KEY) -> OutgoingPayload:
    """The run's result reply, naming the stream (orchestrator/execution/results.py)."""
    return reply(text, driver.conversation, channel=driver.type, streamKey=key, runState="done",
                 workflowRunId="run-1", workflowStepId="Reply")


class StreamPreviewChecks:
    """What a channel with `edits_progress` does with a streamed answer."""

    @pytest.fixture
    async def stream_rig(self, note_driver: NoteDriver, tmp_path: Path) -> AsyncIterator[ChannelRig]:
        rig = ChannelRig(note_driver, tmp_path / "home")
        await rig.start()
        yield rig
        await rig.stop()

    async def send(self, rig: ChannelRig, payload: OutgoingPayload) -> None:
        assert rig.channel is not None
        await rig.channel.send(payload)

    async def test_the_channel_declares_its_edit_interval(self, stream_rig: ChannelRig) -> None:
        assert 0 < getattr(stream_rig.channel, "edit_interval_sec", 0) <= 5

    async def test_a_preview_is_edited_in_place_and_becomes_the_final_answer(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        for text in ("The quick", "The quick brown fox"):
            await self.send(stream_rig, draft(note_driver, text))
        await self.send(stream_rig, final(note_driver, ANSWER))
        [(preview, first)] = note_driver.posted()
        assert first == "The quick"
        assert note_driver.edits() == [(preview, "The quick brown fox"), (preview, ANSWER)]
        assert note_driver.shown() == [ANSWER]  # one message: no preview left beside a copy of the answer

    async def test_a_long_final_answer_edits_its_first_part_in_and_posts_the_rest(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        long_answer = "\n\n".join(f"part {i} " + "y" * (note_driver.limit - 100) for i in range(2))
        await self.send(stream_rig, draft(note_driver, "part 0 yyy"))
        await self.send(stream_rig, final(note_driver, long_answer))
        shown = note_driver.shown()
        assert len(shown) == 2 and shown[0].startswith("part 0") and shown[1].startswith("part 1")
        assert [text for _, text in note_driver.posted()] == ["part 0 yyy", shown[1]]

    async def test_a_final_answer_without_a_preview_is_posted(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(stream_rig, draft(note_driver, "another answer", key="answer:other"))
        await self.send(stream_rig, final(note_driver, ANSWER))
        assert note_driver.shown() == ["another answer", ANSWER] and note_driver.edits() == []

    async def test_a_final_answer_whose_preview_was_deleted_is_posted(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(stream_rig, draft(note_driver, "The quick"))
        note_driver.delete_sent()
        await self.send(stream_rig, final(note_driver, ANSWER))
        assert [text for _, text in note_driver.posted()] == ["The quick", ANSWER]
        assert note_driver.edits() == []

    async def test_after_a_restart_the_final_answer_still_replaces_the_preview(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        await self.send(stream_rig, draft(note_driver, "The quick"))
        await stream_rig.stop()
        again = ChannelRig(note_driver, stream_rig.root)  # the same home: a restarted gateway
        await again.start()
        try:
            await self.send(again, final(note_driver, ANSWER))
        finally:
            await again.stop()
        assert note_driver.shown() == [ANSWER] and len(note_driver.posted()) == 1

    async def test_a_retried_final_answer_edits_its_first_part_once(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        long_answer = "\n\n".join(f"part {i} " + "y" * (note_driver.limit - 100) for i in range(2))
        await self.send(stream_rig, draft(note_driver, "part 0 yyy"))
        answer = final(note_driver, long_answer)
        note_driver.fail_next(1, after=1)  # the edit lands, posting the second part fails
        with pytest.raises(DeliveryError):
            await self.send(stream_rig, answer)
        await self.send(stream_rig, answer)  # the dispatcher's retry: the journal has the edited first part
        assert len(note_driver.edits()) == 1 and len(note_driver.posted()) == 2

    async def test_an_answer_with_buttons_keeps_them(self, stream_rig: ChannelRig, note_driver: NoteDriver) -> None:
        """An edit cannot add buttons: the part carrying them is posted (here the only one, beside the preview)."""
        assert stream_rig.channel is not None
        if not getattr(stream_rig.channel, "shows_buttons", False):
            pytest.skip("the channel shows no buttons")
        await self.send(stream_rig, draft(note_driver, "Shall I"))
        await self.send(stream_rig, final(note_driver, "Shall I go on?").model_copy(
            update={"buttons": [{"id": "go", "label": "Go on"}]}))
        assert [text for _, text in note_driver.posted()][-1].startswith("Shall I go on?")
        assert note_driver.edits() == []

    async def test_a_question_between_preview_and_answer_moves_the_answer_below_it(
        self, stream_rig: ChannelRig, note_driver: NoteDriver
    ) -> None:
        """An approval question (a reply with buttons) in the middle of a turn: what the agent writes after it
        is a new preview below the question, which becomes the answer; the earlier preview stays as it was."""
        await self.send(stream_rig, draft(note_driver, "Let me run the tests."))
        question = reply("May I run `make test`?", note_driver.conversation, channel=note_driver.type,
                         buttons=[{"id": "ap:k1:0", "label": "Allow"}, {"id": "ap:k1:1", "label": "Deny"}])
        await self.send(stream_rig, question)
        await self.send(stream_rig, draft(note_driver, "All 12 tests"))
        await self.send(stream_rig, final(note_driver, "All 12 tests pass."))
        posted = [text for _, text in note_driver.posted()]
        assert posted[0] == "Let me run the tests." and posted[1].startswith("May I run") and posted[2:] == [
            "All 12 tests"]
        assert note_driver.edits()[-1][1] == "All 12 tests pass." and note_driver.shown()[-1] == "All 12 tests pass."
