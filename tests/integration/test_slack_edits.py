"""Slack edits against the fake Slack (issue 32 §5): a `message_changed` event says who edited the message
(`message.edited.user`) beside who wrote it (`message.user`); an edit by another member than the author of a
waiting message is no edit of it, but a message of its own from the member who edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.testing import async_wait_until
from tests.fakes.slack_server import FakeSlack
from tests.integration.test_slack import CHANNEL, SlackDriver, mode, server, started  # noqa: F401  (fixtures)


def waiting(incoming: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(senderId, text, editOf) of each message waiting in the queue, oldest first."""
    return [(p["senderId"], p["message"], p.get("editOf")) for p in incoming]


async def test_an_edit_by_another_member_is_a_message_of_their_own(
    server: FakeSlack, mode: str, tmp_path: Path  # noqa: F811
) -> None:
    driver = SlackDriver(server, mode)
    rig, _ = await started(driver, tmp_path / "home")
    try:
        staging = await driver.user_writes("deploy staging", sender_id="U1001", sender="Ada")
        await async_wait_until(rig.incoming)
        server.users["U1002"] = "Mallory"
        forged = server.message_changed(staging, "deploy PRODUCTION")
        forged["message"]["edited"]["user"] = "U1002"
        await driver.deliver(forged)
        await async_wait_until(lambda: len(rig.incoming()) == 2 or "PRODUCTION" in str(rig.incoming()))
        assert waiting(rig.incoming())[0] == ("U1001", "deploy staging", None), "U1001's waiting message replaced"
        assert waiting(rig.incoming()) == [("U1001", "deploy staging", None), ("U1002", "deploy PRODUCTION", None)]
    finally:
        await rig.stop()


async def test_the_authors_own_edit_still_replaces_the_waiting_message(
    server: FakeSlack, mode: str, tmp_path: Path  # noqa: F811
) -> None:
    driver = SlackDriver(server, mode)
    rig, _ = await started(driver, tmp_path / "home")
    try:
        staging = await driver.user_writes("deploy stagng", sender_id="U1001", sender="Ada")
        await async_wait_until(rig.incoming)
        await driver.deliver(server.message_changed(staging, "deploy staging"))
        await async_wait_until(lambda: "deploy staging" in str(rig.incoming()))
        assert waiting(rig.incoming()) == [("U1001", "deploy staging", None)]
    finally:
        await rig.stop()
