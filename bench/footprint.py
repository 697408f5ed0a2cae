"""What the file backend keeps per chat message: `python -m bench.footprint [--messages N]`.

N chat messages (default 5,000) go through an in-process gateway on the embedded default chat path (the
`rules` selector → workflow `chat` → the built-in `echo` agent), fsync on; once the last reply is
delivered and the gateway stopped, every file and folder under the home is counted against the same
home after a start with no message: what stays with the default retention (selector files 7 days,
sent replies 7 days, runs 30 days), per message. `logs/` (the event log, rotated on its own) is shown
apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.rig import WORKFLOW_ORCHESTRATOR, Rig, bench_settings, payload

DRAIN_TIMEOUT_S = 1200.0


def tally(root: Path) -> dict[str, dict[str, int]]:
    """Files and folders, apparent bytes of the files and allocated bytes (files and folders, as `du`)
    under `root`, by top-level part of the home (`queue/sent`, `orchestrator/select`, `runs`, …)."""
    parts: dict[str, dict[str, int]] = {}
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).parts
        part = "/".join(relative[:2]) if relative[:1] in (("queue",), ("orchestrator",)) else "/".join(relative[:1])
        entry = parts.setdefault(part or ".", {"entries": 0, "bytes": 0, "disk": 0})
        entry["entries"] += len(dirs) + len(files)
        for name in dirs:  # a folder's own blocks count: `du` counts them
            entry["disk"] += os.lstat(os.path.join(folder, name)).st_blocks * 512
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            entry["bytes"] += stat.st_size
            entry["disk"] += stat.st_blocks * 512
    return parts


def _difference(after: dict[str, dict[str, int]], before: dict[str, dict[str, int]], count: int
                ) -> dict[str, dict[str, float]]:
    empty = {"entries": 0, "bytes": 0, "disk": 0}
    return {part: {key: round((value - before.get(part, empty)[key]) / count, 2) for key, value in after[part].items()}
            for part in sorted(after)}


async def footprint(root: Path, count: int, conversations: int = 16) -> dict[str, Any]:
    """Sends `count` chat messages and returns what each leaves on disk, by part of the home and in all."""
    settings = bench_settings(fsync=True)
    async with Rig(root / "empty", settings, WORKFLOW_ORCHESTRATOR) as rig:
        empty_home = rig.home.root
    before = tally(empty_home)
    async with Rig(root / "full", settings, WORKFLOW_ORCHESTRATOR) as rig:
        channel = rig.channel
        assert channel.sink is not None
        channel.expect(count)
        for index in range(count):
            await channel.sink(payload(index, conversations))
            await asyncio.sleep(0)
        await asyncio.wait_for(channel.done.wait(), DRAIN_TIMEOUT_S)
        full_home = rig.home.root
    per_part = _difference(tally(full_home), before, count)
    kept = {part: value for part, value in per_part.items() if part != "logs"}
    total = {key: round(sum(value[key] for value in kept.values()), 2) for key in ("entries", "bytes", "disk")}
    return {"messages": count, "per_message": total, "parts": per_part}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.footprint", description=__doc__)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--dir", help="scratch folder (default: a temporary folder under /tmp, removed)")
    args = parser.parse_args(argv)
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="switchyard-footprint-"))
    try:
        result = asyncio.run(footprint(scratch, args.messages))
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
