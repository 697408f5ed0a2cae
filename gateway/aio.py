"""Small asyncio helpers shared by the gateway and the orchestrator."""

from __future__ import annotations

import asyncio
from collections.abc import Collection


async def wait_event(event: asyncio.Event, within: float | None) -> bool:
    """Waits until `event` is set or `within` seconds pass; True when it was set.

    Python 3.11's `asyncio.wait_for` swallows a cancellation that arrives in the same loop
    iteration as the event (the task then keeps looping and `stop()` never returns);
    `asyncio.timeout` lets the cancellation through.
    """
    try:
        async with asyncio.timeout(within):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def finish_or_cancel(tasks: Collection[asyncio.Task[None]], grace_s: float) -> None:
    """Lets `tasks` finish for `grace_s`, then cancels the ones still running and waits for them to end."""
    if not tasks:
        return
    _, late = await asyncio.wait(tasks, timeout=grace_s)
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
