"""Is a session loadable after its agent was killed (SIGKILL of the process group) N seconds after a turn ended?
Run by hand: `python -m tests.fakes.acp.durability claude|codex|gemini 0 1 3`; writes durability.json beside
the adapter's recordings (FINDINGS.md quotes it). Gemini's loads wait for the next clock minute (see FINDINGS)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fakes.acp.adapters import ADAPTERS
from tests.fakes.acp.record import HERE, Agent
from tests.fakes.acp.scripted_model import ScriptedModel


async def one(model: ScriptedModel, name: str, root: Path, out: Path, delay: float) -> dict[str, Any]:
    adapter = ADAPTERS[name]
    env, work = adapter.environment(root, model.url), root / "work"
    first = Agent(adapter, env, work, out, f"durability-{delay}-new")
    conn = await first.start()
    await first.initialize()
    session = await conn.new_session(cwd=str(work), mcp_servers=[])
    created = time.strftime("%H:%M")
    await first.prompt(model, session.session_id, f"remember the word okapi (delay {delay})")
    await asyncio.sleep(delay)  # the condition under test: how long the agent lives on after the turn
    await first.kill()
    if name == "gemini" and time.strftime("%H:%M") == created:
        await asyncio.sleep(60.5 - time.localtime().tm_sec)  # gemini's same-minute load fails anyway
    second = Agent(adapter, env, work, out, f"durability-{delay}-load")
    conn = await second.start()
    await second.initialize()
    try:
        await conn.load_session(session_id=session.session_id, cwd=str(work), mcp_servers=[])
        loaded = "ok"
    except Exception as exc:
        loaded = f"error: {exc}"
    after = await second.prompt(model, session.session_id, "after the kill [recall=okapi]")
    await second.kill()
    return {"seconds_alive_after_turn": delay, "load": loaded, "after": after["text"] or after["stop"]}


async def main(name: str, delays: list[float]) -> None:
    out = HERE / "recordings" / name
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix=f"acp-{name}-", dir=os.environ.get("ACP_SCRATCH", "/var/tmp")) as scratch:
        (Path(scratch) / "work").mkdir()
        model = ScriptedModel()
        async with model:
            for delay in delays:
                results.append(await one(model, name, Path(scratch), out, delay))
                print(json.dumps(results[-1]), flush=True)
    for transcript in out.glob("durability-*.jsonl"):
        transcript.unlink()  # the figures say it; the transcripts repeat session.jsonl's envelopes
    (out / "durability.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("adapter", choices=sorted(ADAPTERS))
    parser.add_argument("delays", nargs="+", type=float)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.adapter, arguments.delays))
