"""A live (`transport: acp`) provider whose settings change while the gateway runs (settings.yaml reloaded): its
next turn runs in an adapter process started with the new settings, and the session keeps its memory."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.fakes.acp.helpers import Harness, any_alive, fake_provider
from tests.integration.acp.test_acp_pool import LIKES, make  # noqa: F401  (a fixture)


@pytest.mark.parametrize("like", LIKES)
async def test_a_changed_live_provider_runs_its_next_turn_with_the_new_settings(
        make: Callable[..., Harness], like: str) -> None:  # noqa: F811
    h = make(providers={"agent": fake_provider(like, env={"MY_SETTING": "old"})})
    try:
        await h.turn("agent", "remember the word zebra")
        assert json.loads(await h.turn("agent", "[env]"))["MY_SETTING"] == "old"
        before = h.live_pids()

        h.runner.reconfigure({"agent": fake_provider(like, env={"MY_SETTING": "new"})}, frozenset())

        assert json.loads(await h.turn("agent", "[env]"))["MY_SETTING"] == "new"
        assert not any_alive(before)  # the old process is stopped, not left beside the new one
        assert await h.turn("agent", "which word? [recall=zebra]") == "recall zebra: yes"
    finally:
        await h.close()
