"""P1 throughput and P4 backlog: messages through the whole in-process gateway, against the floor."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.fileops import count_file_calls
from bench.floor import floor_rate
from bench.plugin import REPLY_TEXT, NullHandlerPlugin
from bench.rig import LIGHT_ORCHESTRATOR, Rig, bench_settings, order_problems, payload
from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.runtime.worker import Worker
from gateway.settings import Settings
from gateway.spool.queue import FileQueue

DRAIN_TIMEOUT_S = 600.0


async def throughput(root: Path, count: int, conversations: int, *, fsync: bool, variant: str = "orchestrator",
                     orchestrator: str = LIGHT_ORCHESTRATOR, cleanup: bool = True,
                     settings: Settings | None = None,
                     server_cpu: Callable[[], dict[int, float]] | None = None) -> dict[str, Any]:
    """Feeds `count` messages through the bench channel's sink and times until the last is delivered.

    `variant`: `orchestrator` (the real handler), `gateway` (NullHandler) or `key-locks` (the real
    handler with the cross-process key lock files forced on, as when several processes share a home).
    `server_cpu`: CPU seconds of each database server process (by pid), read before and after the run.
    """
    extra = [NullHandlerPlugin()] if variant == "gateway" else []
    async with Rig(root, settings or bench_settings(fsync=fsync), orchestrator, extra=extra) as rig:
        if variant == "key-locks":  # as on a home shared by several processes
            worker = getattr(rig.gateway.runtime, "worker", None)  # the composed runtime's, once started
            assert isinstance(worker, Worker)
            worker.scheduler.locks = LockDirectory(rig.home.coordination / "locks", holder="bench")
        channel = rig.channel
        assert channel.sink is not None
        channel.expect(count)
        server_before = server_cpu() if server_cpu is not None else {}
        cpu_before = os.times()
        started = time.perf_counter()
        for index in range(count):
            await channel.sink(payload(index, conversations))
            await asyncio.sleep(0)  # a channel receives messages between other events, not in one burst
        await asyncio.wait_for(channel.done.wait(), DRAIN_TIMEOUT_S)
        elapsed = time.perf_counter() - started
        cpu_after = os.times()
        server_after = server_cpu() if server_cpu is not None else {}
        delivered = list(channel.delivered)
    if cleanup:
        shutil.rmtree(root, ignore_errors=True)
    return {"messages": count, "conversations": conversations, "fsync": fsync, "variant": variant,
            "seconds": round(elapsed, 3), "rate": round(count / elapsed, 1), "delivered": len(delivered),
            # CPU of the whole process (every thread) per message: steadier than the rate on a drifting disk
            "user_ms": round((cpu_after.user - cpu_before.user) * 1000 / count, 3),
            "sys_ms": round((cpu_after.system - cpu_before.system) * 1000 / count, 3),
            "unique": len({m for _, m, _ in delivered}), "order_problems": order_problems(delivered),
            **({"server_ms": round(sum(v - server_before.get(pid, 0.0) for pid, v in server_after.items())
                                   * 1000 / count, 3)} if server_cpu is not None else {})}


def floor(root: Path, count: int, *, fsync: bool) -> float:
    """The floor rate for `count` messages of the bench's sizes, in a fresh folder."""
    message = payload(0, 1)
    reply = OutgoingPayload.reply_to(message, REPLY_TEXT, agent="list_workflows", timestamp=message.timestamp)
    rate = floor_rate(root, count, fsync=fsync, payload=message.to_json(), reply=reply.to_json())
    shutil.rmtree(root, ignore_errors=True)
    return rate


async def measured(scratch: Path, count: int, conversations: int, *, fsync: bool, floor_count: int,
                   variant: str = "orchestrator") -> dict[str, Any]:
    """One case between two floor runs (the disk drifts): the ratio is against their mean. Each run
    starts with the previous one's writes flushed (os.sync), so no run pays for another's write-back."""
    os.sync()
    before = floor(scratch / "floor-before", floor_count, fsync=fsync)
    os.sync()
    row = await throughput(scratch / "case", count, conversations, fsync=fsync, variant=variant)
    os.sync()
    after = floor(scratch / "floor-after", floor_count, fsync=fsync)
    mean = (before + after) / 2
    row.update(floor_rate=round(mean, 1), floor_before=round(before, 1), floor_after=round(after, 1),
               ratio=round(row["rate"] / mean, 3))
    return row


async def p1(scratch: Path, *, sizes: list[int], conversations: list[int], fsyncs: list[bool],
             floor_count: int) -> list[dict[str, Any]]:
    """Every (fsync, size, conversations) case through the orchestrator, each against the floor.

    An untimed floor run comes first: every timed floor run then follows the clean-up of a run
    before it, as every case does. Without it, the first floor ran on a disk that had deleted
    nothing lately and was 10–20 % faster than all the others (see bench/README.md)."""
    floor(scratch / "warm-up", floor_count, fsync=fsyncs[0])
    return [await measured(scratch, count, convs, fsync=fsync, floor_count=floor_count)
            for fsync in fsyncs for count in sizes for convs in conversations]


async def p1_variants(scratch: Path, *, count: int, conversations: int, floor_count: int) -> list[dict[str, Any]]:
    """Where the time goes: the gateway alone (NullHandler), and the orchestrator with key lock files."""
    return [await measured(scratch, count, conversations, fsync=fsync, floor_count=floor_count, variant=variant)
            for fsync in (True, False) for variant in ("gateway", "key-locks")]


async def file_calls(scratch: Path, *, count: int, conversations: int) -> list[dict[str, Any]]:
    """File-system calls per message (fsync on) for each path, and for the floor loop."""
    rows = []
    message = payload(0, 1)
    reply = OutgoingPayload.reply_to(message, REPLY_TEXT, agent="list_workflows", timestamp=message.timestamp)
    for variant in ("orchestrator", "gateway", "key-locks", "floor"):
        with count_file_calls() as counter:
            if variant == "floor":
                floor_rate(scratch / "calls", count, fsync=True, payload=message.to_json(), reply=reply.to_json())
            else:
                await throughput(scratch / "calls", count, conversations, fsync=True, variant=variant, cleanup=False)
        shutil.rmtree(scratch / "calls", ignore_errors=True)
        rows.append({"variant": variant, **{k: round(v / count, 2) for k, v in sorted(counter.items())}})
    return rows


def prefill(root: Path, count: int, conversations: int) -> None:
    """Queues `count` messages in incoming/ under the names the gateway's own sink gives them."""
    queue = FileQueue(Home(root), fsync=False)
    queue.home.create()
    for index in range(count):
        queue.enqueue(payload(index, conversations).to_json(), hint=f"bench-m{index:07d}")


def _window_rate(times_ns: list[int], start: int, end: int) -> float:
    span = (times_ns[end - 1] - times_ns[start]) / 1e9
    return (end - 1 - start) / span if span > 0 else float("inf")


async def drain(root: Path, count: int, conversations: int, *, fsync: bool) -> dict[str, Any]:
    """Queues `count` messages while no gateway runs, then starts one and times the drain."""
    fill_started = time.perf_counter()
    prefill(root, count, conversations)
    fill_s = time.perf_counter() - fill_started
    rig = Rig(root, bench_settings(fsync=fsync), expected=count)
    started = time.perf_counter()
    async with rig:
        start_s = time.perf_counter() - started
        await asyncio.wait_for(rig.channel.done.wait(), DRAIN_TIMEOUT_S)
        elapsed = time.perf_counter() - started
        delivered = list(rig.channel.delivered)
    shutil.rmtree(root, ignore_errors=True)
    times = [t for _, _, t in delivered]
    return {"prefill_s": round(fill_s, 1), "startup_s": round(start_s, 2), "seconds": round(elapsed, 1),
            "rate": round(_window_rate(times, 0, len(times)), 1), "delivered": delivered}


async def p4(scratch: Path, *, count: int, conversations: int, fsync: bool) -> dict[str, Any]:
    """Drains `count` queued messages; the rate over the first, middle and last tenth, against the
    drain rate of a 1,000-message backlog measured just before (rates run from the first delivery
    to the last, so the gateway's start-up time is not counted)."""
    reference = await drain(scratch / "p4-ref", 1000, conversations, fsync=fsync)
    result = await drain(scratch / "p4", count, conversations, fsync=fsync)
    delivered = result.pop("delivered")
    times = [t for _, _, t in delivered]
    tenth = max(2, len(times) // 10)
    middle = len(times) // 2 - tenth // 2
    rates = {"start": _window_rate(times, 0, tenth), "middle": _window_rate(times, middle, middle + tenth),
             "end": _window_rate(times, len(times) - tenth, len(times))}
    return {"messages": count, "conversations": conversations, "fsync": fsync, **result,
            **{f"rate_{k}": round(v, 1) for k, v in rates.items()},
            "rate_1k": reference["rate"], "end_vs_1k": round(rates["end"] / reference["rate"], 3),
            "delivered": len(delivered), "unique": len({m for _, m, _ in delivered}),
            "order_problems": order_problems(delivered)}
