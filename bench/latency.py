"""P2 wake-up latency, measured from outside a `switchyard run` process with inotify."""

from __future__ import annotations

import os
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from bench.process import GatewayProcess
from bench.rig import bench_settings, payload, write_home


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _summary(values_ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_percentile(values_ms, 0.5), 3), "p99_ms": round(_percentile(values_ms, 0.99), 3),
            "max_ms": round(max(values_ms), 3), "mean_ms": round(statistics.fmean(values_ms), 3)}


class _Watch:
    """Times when each watched name arrives in processing/w<pid>/, outgoing/ and sent/."""

    def __init__(self, folders: dict[str, Path]):
        self.inotify = INotify()
        self.kinds = {self.inotify.add_watch(str(p), inotify_flags.MOVED_TO): kind for kind, p in folders.items()}

    def wait(self, message_id: str, name: str, kinds: set[str], timeout: float) -> dict[str, int]:
        """Monotonic ns at which each kind of folder received the message's file."""
        seen: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while set(seen) != kinds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"message {message_id}: saw only {sorted(seen)}")
            for event in self.inotify.read(timeout=int(remaining * 1000) + 1):
                now = time.monotonic_ns()
                kind = self.kinds.get(event.wd)
                if kind == "claim" and event.name == name or kind in ("outgoing", "sent") and message_id in event.name:
                    seen.setdefault(kind, now)
        return seen

    def close(self) -> None:
        self.inotify.close()


def p2(scratch: Path, *, count: int, interval_s: float, fsync: bool = True,
       polling: bool = False, gateway_only: bool = False) -> dict[str, Any]:
    """Drops `count` messages one at a time (`interval_s` apart) into a running gateway's incoming/."""
    root = scratch / ("p2-polling" if polling else "p2")
    home = write_home(root, bench_settings(fsync=fsync))
    env = {"SWITCHYARD_FORCE_POLLING": "1"} if polling else {}
    if gateway_only:
        env["BENCH_NULL_HANDLER"] = "1"
    claim: list[float] = []
    outgoing: list[float] = []
    sent: list[float] = []
    with GatewayProcess(root, env=env) as gateway:
        folders = {"claim": home.processing / f"w{gateway.pid}", "outgoing": home.outgoing, "sent": home.sent}
        watch = _Watch(folders)
        try:
            for index in range(count):
                message = payload(index, 16)
                name = f"p2-{index:06d}.json"
                tmp = home.incoming / (name + ".tmp")
                tmp.write_bytes(message.to_json())
                started = time.monotonic_ns()
                os.rename(tmp, home.incoming / name)
                seen = watch.wait(message.messageId, name, {"claim", "outgoing", "sent"}, 30)
                claim.append((seen["claim"] - started) / 1e6)
                outgoing.append((seen["outgoing"] - started) / 1e6)
                sent.append((seen["sent"] - started) / 1e6)
                time.sleep(interval_s * random.uniform(0.5, 1.5))  # a low rate: each finds the gateway idle
        finally:
            watch.close()
    shutil.rmtree(root, ignore_errors=True)
    mode = "polling" if polling else "inotify" + (", gateway only" if gateway_only else "")
    return {"messages": count, "fsync": fsync, "watch": mode,
            "interval_ms": interval_s * 1000, "claim": _summary(claim), "outgoing": _summary(outgoing),
            "delivered": _summary(sent)}
