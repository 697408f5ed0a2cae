"""Wake-ups for files arriving in a folder (gateway/spool/watch.py): the polling fallback reports each new file once,
oldest mtime first within one listing."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gateway.spool.watch import FolderWatch
from gateway.testing import async_wait_until


async def test_polling_reports_the_files_one_listing_finds_oldest_mtime_first(tmp_path: Path) -> None:
    now = time.time_ns()
    for name, age_ns in (("aa.json", 0), ("zz.json", 2_000_000), ("mm.json", 1_000_000)):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, ns=(now - age_ns, now - age_ns))
    (tmp_path / "half.json.tmp").write_text("")
    seen: list[str] = []
    watch = FolderWatch(tmp_path, seen.append, lambda: None, poll_ms=10)
    watch.start(force_polling=True)
    try:
        await async_wait_until(lambda: len(seen) == 3)
        (tmp_path / "later.json").write_text("{}")
        await async_wait_until(lambda: len(seen) == 4)
    finally:
        watch.stop()
    assert seen == ["zz.json", "mm.json", "aa.json", "later.json"]
