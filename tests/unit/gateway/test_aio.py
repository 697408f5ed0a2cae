"""gateway/aio.py: waiting for an event never swallows a cancellation (stop() must always return)."""

from __future__ import annotations

import asyncio

from gateway.aio import finish_or_cancel, wait_event


async def _keep_waiting(event: asyncio.Event) -> None:
    while True:
        event.clear()
        await wait_event(event, 1.0)


async def test_a_cancel_arriving_with_the_event_stops_the_waiting_loop() -> None:
    # Python 3.11's asyncio.wait_for returns the event's result here and the loop never ends.
    event = asyncio.Event()
    task = asyncio.create_task(_keep_waiting(event))
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=5)
    assert done and task.cancelled()


async def test_wait_event_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True


async def test_finish_or_cancel_lets_the_quick_finish_and_cancels_the_rest() -> None:
    async def quick() -> None:  # needs a few turns of the loop, well within the grace
        for _ in range(5):
            await asyncio.sleep(0)

    async def stuck() -> None:
        await asyncio.Event().wait()

    done, hung = asyncio.create_task(quick()), asyncio.create_task(stuck())
    await finish_or_cancel([done, hung], 0.5)
    assert done.done() and not done.cancelled()
    assert hung.cancelled()
    await finish_or_cancel([], 0.5)  # nothing to wait for is no error
