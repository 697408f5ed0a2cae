"""What the `acp` SDK's own spawn (`spawn_agent_process`) leaves behind when its context exits: it closes stdin,
waits 2 s, then terminates and kills the process it started (the leader only). Run by hand:
`python -m tests.fakes.acp.sdk_exit claude|codex|gemini`; prints the agent's process tree before and after, and
kills what is left (FINDINGS.md quotes it)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block

from tests.fakes.acp.adapters import ADAPTERS
from tests.fakes.acp.scripted_model import ScriptedModel


class Quiet:
    """A client that allows nothing and ignores updates."""

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        """Updates are not looked at here."""


def tree(root: int) -> list[dict[str, Any]]:
    """The live descendants of `root` (and root itself) from /proc: pid and argv."""
    parents: dict[int, int] = {}
    argv: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
                argv[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
    found, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid and child not in found]
        found.update(children)
        frontier += children
    return [{"pid": pid, "argv": argv[pid]} for pid in sorted(found) if pid in argv and argv[pid]]


async def main(name: str) -> None:
    adapter = ADAPTERS[name]
    with tempfile.TemporaryDirectory(prefix=f"acp-{name}-", dir=os.environ.get("ACP_SCRATCH", "/var/tmp")) as scratch:
        root = Path(scratch)
        (root / "work").mkdir()
        model = ScriptedModel()
        async with model:
            env = adapter.environment(root, model.url)
            started = time.monotonic()
            async with spawn_agent_process(Quiet(), adapter.argv[0], *adapter.argv[1:], env=env,  # type: ignore[arg-type]
                                           cwd=root / "work") as (conn, process):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                session = await conn.new_session(cwd=str(root / "work"), mcp_servers=[])
                await conn.prompt(session_id=session.session_id, prompt=[text_block("hello")])
                before = tree(process.pid)
                exiting = time.monotonic()
            exit_s = round(time.monotonic() - exiting, 2)
            await asyncio.sleep(1)  # let orphans be re-parented before looking (a look, not a synchronisation)
            left = [p for p in before if Path(f"/proc/{p['pid']}").exists() and tree(p["pid"])]
            for pid in (p["pid"] for p in left):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    print(json.dumps({"adapter": name, "sdk": "agent-client-protocol", "tree_before_exit": before,
                      "context_exit_s": exit_s, "left_alive_after_exit": left,
                      "total_s": round(time.monotonic() - started, 1)}, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("adapter", choices=sorted(ADAPTERS))
    asyncio.run(main(parser.parse_args().adapter))
