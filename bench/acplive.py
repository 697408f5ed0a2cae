"""P8 live agent sessions (issue 22): what a turn adds over the model's own time — warm over ACP (`transport:
acp`) and one-shot (the preset's CLI per message) side by side in one run, per adapter — and what a warm
adapter holds in memory with 1, 3 and 50 conversations (at the default `max_live: 8`).

`python -m bench.acplive [--only claude,codex,gemini] [--conversations 50] [--max-live 8]` measures the memory
part alone: RSS after 1, 8, 16, 30 and 50 conversations, and the sessions the adapter still holds open.

The real adapters and CLIs (claude-agent-acp, codex-acp, `gemini --acp`; claude, codex, gemini) run through
ProviderRunner, the path a workflow step takes, against the scripted model on 127.0.0.1
(tests/fakes/acp/scripted_model.py), which answers at once: "added" is a turn's wall time minus the time the
model spent answering its calls. An adapter or CLI that is not installed is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import ProviderSettings, Settings
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.sessions import SessionStore
from orchestrator.storage.stores import open_sessions

ACP_BIN = Path(os.environ.get("ACP_PREFIX", "/opt/acp")) / "node_modules" / ".bin"
CLIS_BIN = Path(os.environ.get("AGENT_CLIS_PREFIX", "/opt/agent-clis")) / "node_modules" / ".bin"
KEY_VARIABLE = "SWITCHYARD_BENCH_P8_KEY"
PREFIX = {"claude": "/anthropic", "codex": "/openai/v1", "gemini": "/google"}
MODEL = {"codex": "gpt-5.4", "gemini": "gemini-fake"}
CONVERSATION = "conv:bench/p8/{n}"
IDLE_CONVERSATIONS = 50  # the "50 idle conversations", at the default max_live (8)
MEMORY_AT = (1, 8, 16, 30, 50)
MODE = {"claude": "default", "codex": "read-only", "gemini": "default"}  # each adapter's mode of a new session


def _missing(like: str) -> str | None:
    """Why `like` cannot be measured here, else None."""
    needed = [CLIS_BIN / like] + ([] if like == "gemini" else [ACP_BIN / f"{like}-agent-acp" if like == "claude"
                                                               else ACP_BIN / "codex-acp"])
    absent = [str(path) for path in needed if not os.access(path, os.X_OK)]
    if shutil.which("node") is None:
        absent.append("node")
    return f"not installed: {', '.join(absent)}" if absent else None


def _provider(like: str, transport: str, url: str, **extra: Any) -> ProviderSettings:
    settings: dict[str, Any] = {"binary": str(CLIS_BIN / like), "model": MODEL.get(like), **extra}
    if transport == "acp" and like != "gemini":
        settings["acp_command"] = [str(ACP_BIN / ("claude-agent-acp" if like == "claude" else "codex-acp"))]
    return ProviderSettings(type=like, transport=transport, base_url=url + PREFIX[like],  # type: ignore[arg-type]
                            api_key_env=KEY_VARIABLE, timeout_sec=120, **settings)


def _descendants_rss_mb() -> float:
    """The resident memory of every process below this one (the adapters the pool keeps warm), in MB."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    total_kb, stack = 0, list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total_kb += sum(int(line.split()[1]) for line in lines if line.startswith("VmRSS:"))
    return round(total_kb / 1024, 1)


async def _turns(runner: ProviderRunner, model: Any, cwd: Path, count: int, conversation: str) -> list[float]:
    """`count` turns in one conversation; what each added over the model's own time, in ms."""
    added = []
    for index in range(count):
        first_call = len(model.calls)
        started = time.monotonic()
        await runner.run("agent", TurnRequest(f"say ok {index}", cwd, conversation=conversation))
        took = time.monotonic() - started
        model_s = sum((call.ended or time.monotonic()) - call.started for call in model.calls[first_call:])
        added.append(round((took - model_s) * 1000, 1))
    return added


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 1), "min_ms": min(values), "max_ms": max(values)}


async def _adapter(like: str, scratch: Path, turns: int) -> dict[str, Any]:
    from tests.fakes.acp.scripted_model import ScriptedModel

    result: dict[str, Any] = {}
    async with ScriptedModel() as model:
        for transport in ("acp", "oneshot"):
            home = Home(scratch / f"p8-{like}-{transport}")
            home.create()
            runner = ProviderRunner(home, {"agent": _provider(like, transport, model.url)}, {},
                                    hidden_env=frozenset({KEY_VARIABLE}), sessions=_sessions(home))
            cwd = scratch / f"p8-{like}-{transport}-work"
            cwd.mkdir(parents=True, exist_ok=True)
            try:
                first = await _turns(runner, model, cwd, 1, CONVERSATION.format(n=1))
                warm = await _turns(runner, model, cwd, turns, CONVERSATION.format(n=1))
                entry: dict[str, Any] = {"first_turn_ms": first[0], "turns": _stats(warm)}
                if transport == "acp":
                    entry["rss_mb_1_conversation"] = _descendants_rss_mb()
                    for n in (2, 3):
                        await _turns(runner, model, cwd, 1, CONVERSATION.format(n=n))
                    entry["rss_mb_3_conversations"] = _descendants_rss_mb()
                    for n in range(4, IDLE_CONVERSATIONS + 1):  # the pool keeps max_live of them warm
                        await _turns(runner, model, cwd, 1, CONVERSATION.format(n=n))
                    entry[f"rss_mb_{IDLE_CONVERSATIONS}_conversations"] = _descendants_rss_mb()
                result[transport] = entry
            finally:
                await runner.close()
                shutil.rmtree(home.root, ignore_errors=True)
    warm_p50, oneshot_p50 = result["acp"]["turns"]["p50_ms"], result["oneshot"]["turns"]["p50_ms"]
    result["oneshot_over_warm"] = round(oneshot_p50 / warm_p50, 1) if warm_p50 > 0 else None
    return result


async def p8(scratch: Path, *, turns: int) -> dict[str, Any]:
    """Each adapter's warm and one-shot turns side by side, and its memory (see the module's docstring)."""
    saved = os.environ.get(KEY_VARIABLE)
    os.environ[KEY_VARIABLE] = "sk-bench-p8"
    try:
        results: dict[str, Any] = {"turns": turns}
        for like in ("claude", "codex", "gemini"):
            reason = _missing(like)
            results[like] = {"skipped": reason} if reason else await _adapter(like, scratch, turns)
        return results
    finally:
        if saved is None:
            os.environ.pop(KEY_VARIABLE, None)
        else:
            os.environ[KEY_VARIABLE] = saved


def _sessions(home: Home) -> SessionStore:
    """The home's provider sessions on the file backend, opened as `run` opens them."""
    return open_sessions(open_backend(home, Settings()))


async def _held_open(runner: ProviderRunner, home: Home, conversations: list[str]) -> int:
    """How many of the conversations' sessions the adapter processes still hold open: each answers
    `session/set_mode` (to the mode a session is in already) only for a session it holds."""
    stored = _sessions(home)
    ids = [stored.session("agent@acp", c, assigns_ids=False).id for c in conversations]
    held = 0
    for agent in runner.acp.pool.agents() if runner.acp.pool is not None else []:
        mode = next(m for like, m in MODE.items() if like in " ".join(agent.argv))
        assert agent.conn is not None
        for session_id in filter(None, ids):
            try:
                await agent.conn.set_session_mode(session_id=session_id, mode_id=mode)
            except Exception:
                continue
            held += 1
    return held


async def _memory_of(like: str, scratch: Path, conversations: int, max_live: int) -> dict[str, Any]:
    from tests.fakes.acp.scripted_model import ScriptedModel

    result: dict[str, Any] = {"max_live": max_live}
    async with ScriptedModel() as model:
        home = Home(scratch / f"mem-{like}")
        home.create()
        cwd = scratch / f"mem-{like}-work"
        cwd.mkdir(parents=True, exist_ok=True)
        runner = ProviderRunner(home, {"agent": _provider(like, "acp", model.url, max_live=max_live)}, {},
                                hidden_env=frozenset({KEY_VARIABLE}), sessions=_sessions(home))
        names = [CONVERSATION.format(n=n) for n in range(1, conversations + 1)]
        try:
            for index, name in enumerate(names, start=1):
                await _turns(runner, model, cwd, 1, name)
                if index in MEMORY_AT or index == conversations:
                    result[f"{index}"] = {"rss_mb": _descendants_rss_mb(),
                                          "sessions_open": await _held_open(runner, home, names[:index]),
                                          "processes": len(runner.acp.pool.agents()) if runner.acp.pool else 0}
        finally:
            await runner.close()
            shutil.rmtree(home.root, ignore_errors=True)
    return result


async def memory(scratch: Path, *, likes: list[str], conversations: int, max_live: int) -> dict[str, Any]:
    """Each adapter's RSS, open sessions and processes after 1, 8, 16, 30 and 50 conversations of one turn each."""
    saved = os.environ.get(KEY_VARIABLE)
    os.environ[KEY_VARIABLE] = "sk-bench-p8"
    try:
        return {like: ({"skipped": reason} if (reason := _missing(like))
                       else await _memory_of(like, scratch, conversations, max_live)) for like in likes}
    finally:
        if saved is None:
            os.environ.pop(KEY_VARIABLE, None)
        else:
            os.environ[KEY_VARIABLE] = saved


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.acplive", description="live adapters' memory")
    parser.add_argument("--only", default="claude,codex,gemini")
    parser.add_argument("--conversations", type=int, default=IDLE_CONVERSATIONS)
    parser.add_argument("--max-live", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-acp-", dir="/var/tmp") as scratch:
        found = asyncio.run(memory(Path(scratch), likes=args.only.split(","), conversations=args.conversations,
                                   max_live=args.max_live))
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
