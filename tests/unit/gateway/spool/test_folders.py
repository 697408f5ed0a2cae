"""gateway/spool/folders.py: the queue as the dashboard reads it from the home's folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gateway.home import Home
from gateway.spool.deadletters import list_dead, move_to_failed
from gateway.spool.folders import FolderView


def test_a_refresh_lists_dead_letters_from_their_reports_and_reads_none_of_their_payloads(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    big = json.dumps({"channel": "console", "message": "x" * 200_000, "conversationId": "in-the-payload"}).encode()
    for n, conversation in enumerate(["c-0", "c-1", None]):  # None: a report written before it named one
        path = home.processing / f"m{n}.json"
        path.write_bytes(big)
        move_to_failed(home, path, fsync=False, reason=f"failed {n}", attempts=3,
                       **({"conversation": conversation} if conversation else {}))
    payloads = sorted(p for p in home.failed.iterdir() if not p.name.endswith(".error.json"))
    for payload in payloads:
        os.utime(payload, (1, payload.stat().st_mtime))  # an access time a read would move (relatime)

    seen = FolderView(home).read(50)
    assert seen["dead_total"] == 3
    assert {d["name"]: d["conversation"] for d in seen["dead_letters"]} == {
        "m0.json": "c-0", "m1.json": "c-1", "m2.json": None}
    assert [p.stat().st_atime for p in payloads] == [1, 1, 1]  # no payload was read
    assert {d.name: d.conversation for d in list_dead(home)}["m2.json"] == "in-the-payload"  # `dead list` reads it
