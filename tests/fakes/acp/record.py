"""Drives a REAL ACP adapter (claude-agent-acp, codex-acp, `gemini --acp`) through the client side of the
`acp` SDK against the scripted model on 127.0.0.1, and saves the JSON-RPC transcripts and the figures under
tests/fakes/acp/recordings/<adapter>/. Reconnaissance for issue 22, not a test: run it by hand,
`python -m tests.fakes.acp.record claude|codex|gemini [--tag NAME]`; FINDINGS.md says what it showed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamEvent
from acp.schema import AllowedOutcome, ClientCapabilities, DeniedOutcome, Implementation, RequestPermissionResponse

from tests.fakes.acp.adapters import ADAPTERS, Adapter
from tests.fakes.acp.procs import group_members, group_rss_mb
from tests.fakes.acp.scripted_model import ScriptedModel

HERE = Path(__file__).parent


class Recorder:
    """The client side of one agent process: answers permissions by `kind` as told, keeps every update, and
    writes each JSON-RPC frame with its time to a transcript."""

    def __init__(self, transcript: Path) -> None:
        self.transcript = transcript.open("w")
        self.t0 = time.monotonic()
        self.updates: list[tuple[float, str, dict[str, Any]]] = []
        self.permission_kind = "allow_once"  # or reject_once, allow_always, cancelled
        self.permissions: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    def observe(self, event: StreamEvent) -> None:
        """Every frame in wire order; updates are kept here (the SDK runs its handlers in tasks, later)."""
        now = time.monotonic()
        line = {"ms": round((now - self.t0) * 1000, 1), "dir": event.direction.value, "msg": event.message}
        self.transcript.write(json.dumps(line) + "\n")
        self.transcript.flush()
        if event.direction.value == "incoming" and event.message.get("method") == "session/update":
            params = event.message.get("params") or {}
            self.updates.append((now, str(params.get("sessionId")), params.get("update") or {}))
            self.changed.set()

    def note(self, text: str) -> None:
        """A marker line in the transcript saying which step follows."""
        self.transcript.write(json.dumps({"ms": round((time.monotonic() - self.t0) * 1000, 1), "step": text}) + "\n")

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **_: Any) -> RequestPermissionResponse:
        self.permissions.append({"kinds": [o.kind for o in options], "ids": [o.option_id for o in options],
                                 "title": tool_call.title, "answered": self.permission_kind})
        chosen = next((o for o in options if o.kind == self.permission_kind), None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        """Kept by `observe`, in wire order."""

    def kinds_since(self, mark: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, _, update in self.updates[mark:]:
            counts[update["sessionUpdate"]] = counts.get(update["sessionUpdate"], 0) + 1
        return counts

    def text_since(self, mark: int) -> str:
        return "".join(u.get("content", {}).get("text", "") for _, _, u in self.updates[mark:]
                       if u["sessionUpdate"] == "agent_message_chunk")


class Agent:
    """One adapter process in its own process group, stderr to a file."""

    def __init__(self, adapter: Adapter, env: dict[str, str], workdir: Path, out: Path, name: str) -> None:
        self.adapter, self.env, self.workdir = adapter, env, workdir
        self.recorder = Recorder(out / f"{name}.jsonl")
        self.stderr_path = workdir.parent / f"{adapter.name}-{name}.stderr"
        self.process: asyncio.subprocess.Process | None = None
        self.conn: ClientSideConnection | None = None

    async def start(self) -> ClientSideConnection:
        with self.stderr_path.open("wb") as stderr:
            self.process = await asyncio.create_subprocess_exec(
                *self.adapter.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
                env=self.env, cwd=self.workdir, start_new_session=True, limit=16 * 1024 * 1024)
        assert self.process.stdin is not None and self.process.stdout is not None
        # the Recorder answers only what an agent may ask of a client without fs/terminal capabilities
        self.conn = ClientSideConnection(cast(Client, self.recorder), self.process.stdin, self.process.stdout,
                                         observers=[self.recorder.observe])
        return self.conn

    async def initialize(self) -> dict[str, Any]:
        assert self.conn is not None
        started = time.monotonic()
        reply = await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(terminal=False),
            client_info=Implementation(name="switchyard-recorder", version="0"))
        return {"ms": ms(started), "agent": reply.model_dump(by_alias=True, exclude_none=True)}

    async def prompt(self, model: ScriptedModel, session_id: str, text: str) -> dict[str, Any]:
        """One turn: its stop reason, answer text, update kinds, time, and the model's own time within it."""
        assert self.conn is not None
        self.recorder.note(f"prompt: {text}")
        mark, calls, started = len(self.recorder.updates), len(model.calls), time.monotonic()
        asked = len(self.recorder.permissions)
        try:
            reply = await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])
            stop: str = reply.stop_reason
        except Exception as exc:  # the envelope is in the transcript; the figure says it failed
            stop = f"error: {exc}"
        took = ms(started)
        turn_calls = model.calls[calls:]
        now = time.monotonic()  # a call still streaming (a cancelled turn's) counts up to now
        model_ms = sum(((c.ended or now) - c.started) * 1000 for c in turn_calls)
        return {"prompt": text, "stop": stop, "text": self.recorder.text_since(mark), "ms": took,
                "model_ms": round(model_ms, 1), "added_ms": round(took - model_ms, 1),
                "model_calls": [c.summary() for c in turn_calls], "updates": self.recorder.kinds_since(mark),
                "permissions_asked": len(self.recorder.permissions) - asked}

    def rss_mb(self) -> float:
        assert self.process is not None
        return group_rss_mb(self.process.pid)

    async def close_stdin(self, wait: float = 10.0) -> dict[str, Any]:
        """Closes stdin as a client going away does and reports what is left of the process group."""
        assert self.process is not None and self.process.stdin is not None
        pid = self.process.pid
        before = group_members(pid)
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), wait)
            leader = f"exited rc {self.process.returncode}"
        except TimeoutError:
            leader = f"still running after {wait} s"
        await asyncio.sleep(1.0)  # a look at the group once the leader had its chance to take children down
        left = group_members(pid)
        await self.kill()
        return {"leader": leader, "group_before": before, "group_left": left}

    async def kill(self) -> None:
        """Kills the whole process group (the adapter, its CLI children, their shells) and waits for the leader."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self.conn is not None:
            await self.conn.close()
            self.conn = None
        self.recorder.transcript.close()


def ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


async def wait_for(condition: Callable[[], bool], seconds: float, event: asyncio.Event) -> bool:
    """Waits until condition() holds (woken by event), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        event.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            await asyncio.wait_for(event.wait(), left)
        except TimeoutError:
            return condition()
    return True


async def main_session(model: ScriptedModel, agent: Agent, figures: dict[str, Any]) -> str:
    """Process 1: memory, streaming, warm timing, permissions, cancel, RSS, stdin close."""
    conn = await agent.start()
    figures["initialize"] = await agent.initialize()
    started = time.monotonic()
    session = await conn.new_session(cwd=str(agent.workdir), mcp_servers=[])
    figures["session_new"] = {"ms": ms(started), "minute": time.strftime("%H:%M"),
                              "reply": session.model_dump(by_alias=True, exclude_none=True)}
    sid = session.session_id
    turns = figures["turns"] = []
    turns.append(await agent.prompt(model, sid, "remember the word zebra, then say ok"))
    turns.append(await agent.prompt(model, sid, "which word did I ask you to remember? [recall=zebra]"))
    turns.append(await agent.prompt(model, sid, "stream this answer [chunks=8]"))
    warm = [await agent.prompt(model, sid, f"warm turn {i}") for i in range(11)]
    turns += warm
    figures["warm_added_ms"] = sorted(t["added_ms"] for t in warm[1:])
    figures["warm_added_p50_ms"] = statistics.median(figures["warm_added_ms"])
    agent.recorder.permission_kind = "allow_once"
    allowed = "run it [run=echo tool-ran-42 > proof-allowed.txt; cat proof-allowed.txt]"
    turns.append(await agent.prompt(model, sid, allowed))
    turns.append(await agent.prompt(model, sid, "read it [sandboxed=cat proof-allowed.txt]"))  # codex: no escalation
    agent.recorder.permission_kind = "reject_once"
    turns.append(await agent.prompt(model, sid, "run this too [run=echo rejected > proof-rejected.txt]"))
    turns.append(await agent.prompt(model, sid, "after the reject [recall=zebra]"))
    agent.recorder.permission_kind = "allow_once"  # a control: is mkdir asked before any "always"?
    turns.append(await agent.prompt(model, sid, "control [run=mkdir control-dir]"))
    agent.recorder.permission_kind = "allow_always"  # what does "always" cover: the same command, a prefix?
    for command in ("touch always-1.txt", "touch always-2.txt", "mkdir always-3"):
        turns.append(await agent.prompt(model, sid, f"always [run={command}]"))
    figures["permissions"] = agent.recorder.permissions
    figures["files_made_by_tools"] = sorted(p.name for p in agent.workdir.glob("[pac][rlo][own]*"))
    figures["cancel"] = await cancel_mid_turn(model, agent, sid)
    turns.append(await agent.prompt(model, sid, "after the cancel, first [recall=giraffe]"))
    turns.append(await agent.prompt(model, sid, "after the cancel, second [recall=zebra]"))
    turns.append(await agent.prompt(model, sid, "after the cancel, third"))
    rss = figures["rss_mb"] = [agent.rss_mb()]
    for i in range(2):
        more = await conn.new_session(cwd=str(agent.workdir), mcp_servers=[])
        await agent.prompt(model, more.session_id, f"extra session {i}")
        rss.append(agent.rss_mb())
    figures["stdin_close"] = await agent.close_stdin()
    return sid


async def cancel_mid_turn(model: ScriptedModel, agent: Agent, sid: str) -> dict[str, Any]:
    """Sends session/cancel once the first chunk of a slow streamed answer arrived."""
    assert agent.conn is not None
    calls = len(model.calls)
    turn = asyncio.create_task(agent.prompt(model, sid, "a long answer about a giraffe [chunks=10][delay=0.5]"))

    def streaming() -> bool:  # the model's answer has begun to arrive as chunks (not an agent's own warning)
        started = [c.started for c in model.calls[calls:] if "giraffe" in c.prompt]
        return bool(started) and any(t > started[0] and u["sessionUpdate"] == "agent_message_chunk"
                                     for t, _, u in agent.recorder.updates)

    chunk = await wait_for(streaming, 60, agent.recorder.changed)
    agent.recorder.note("session/cancel")
    cancelled_at = time.monotonic()
    await agent.conn.cancel(session_id=sid)
    result = await turn
    return {"chunk_seen_before_cancel": chunk, "cancel_to_reply_ms": ms(cancelled_at), "turn": result}


async def load_in_fresh_process(model: ScriptedModel, agent: Agent, sid: str, figures: dict[str, Any]) -> None:
    """Process 2: session/load of the first session (in a later clock minute than its creation: see
    quick_load for the same minute), its replay, and whether it still remembers."""
    if time.strftime("%H:%M") == figures["session_new"]["minute"]:  # a clock condition, not a synchronisation
        await asyncio.sleep(60.5 - time.localtime().tm_sec)
    conn = await agent.start()
    figures["initialize_2"] = await agent.initialize()
    mark, started = len(agent.recorder.updates), time.monotonic()
    agent.recorder.note("session/load")
    try:
        reply = await conn.load_session(session_id=sid, cwd=str(agent.workdir), mcp_servers=[])
        outcome: Any = reply.model_dump(by_alias=True, exclude_none=True) if reply else None
    except Exception as exc:
        outcome = f"error: {exc}"
    figures["load"] = {"ms": ms(started), "minute": time.strftime("%H:%M"), "reply": outcome,
                       "replayed": agent.recorder.kinds_since(mark)}
    figures["after_load"] = await agent.prompt(model, sid, "after the load [recall=zebra]")
    await agent.kill()


async def quick_load(model: ScriptedModel, adapter: Adapter, env: dict[str, str], workdir: Path,
                     out: Path, figures: dict[str, Any], cross_minute: bool = False) -> None:
    """A session created, one turn, its process killed, then loaded at once by a fresh one: in the same clock
    minute, or (cross_minute) created in a minute's last seconds and loaded seconds later in the next one."""
    name = "quick-cross" if cross_minute else "quick"
    if cross_minute and time.localtime().tm_sec < 55:  # a clock condition, not a synchronisation
        await asyncio.sleep(55.5 - time.localtime().tm_sec)
    first = Agent(adapter, env, workdir, out, f"{name}-new")
    conn = await first.start()
    await first.initialize()
    session = await conn.new_session(cwd=str(workdir), mcp_servers=[])
    created, created_at = time.strftime("%H:%M:%S"), time.monotonic()
    await first.prompt(model, session.session_id, "remember the word okapi")
    await first.kill()
    if cross_minute and time.strftime("%H:%M") == created[:5]:
        await asyncio.sleep(60.2 - time.localtime().tm_sec)
    second = Agent(adapter, env, workdir, out, f"{name}-load")
    conn = await second.start()
    await second.initialize()
    loaded, since = time.strftime("%H:%M:%S"), round(time.monotonic() - created_at, 1)
    try:
        reply = await conn.load_session(session_id=session.session_id, cwd=str(workdir), mcp_servers=[])
        outcome: Any = reply.model_dump(by_alias=True, exclude_none=True) if reply else None
    except Exception as exc:
        outcome = f"error: {exc}"
    after = await second.prompt(model, session.session_id, "after a quick load [recall=okapi]")
    figures[name.replace("-", "_") + "_load"] = {
        "created": created, "loaded": loaded, "seconds_between": since, "reply": outcome,
        "after": {k: after[k] for k in ("stop", "text", "ms")}}
    await second.kill()


async def record(name: str, tag: str) -> None:
    adapter = ADAPTERS[name]
    out = HERE / "recordings" / (tag or name)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"adapter": name, "argv": adapter.argv, "loadavg_at_start": os.getloadavg()}
    # not under /tmp: codex refuses to make its sandbox helper (codex-linux-sandbox) under a temporary dir
    scratch_parent = os.environ.get("ACP_SCRATCH", "/var/tmp")
    with tempfile.TemporaryDirectory(prefix=f"acp-{name}-", dir=scratch_parent) as scratch:
        root = Path(scratch)
        workdir = root / "work"
        workdir.mkdir()
        model = ScriptedModel()
        async with model:
            env = adapter.environment(root, model.url)
            figures["env"] = {k: v for k, v in env.items() if k != "PATH"}
            agents = [Agent(adapter, env, workdir, out, "session"), Agent(adapter, env, workdir, out, "load")]
            try:
                sid = await main_session(model, agents[0], figures)
                await load_in_fresh_process(model, agents[1], sid, figures)
                await quick_load(model, adapter, env, workdir, out, figures)
                await quick_load(model, adapter, env, workdir, out, figures, cross_minute=True)
            finally:
                for agent in agents:
                    await agent.kill()
                figures["loadavg_at_end"] = os.getloadavg()
                figures["stderr_head"] = {p.name: p.read_text(errors="replace")[:1500]
                                          for p in root.glob("*.stderr") if p.stat().st_size}
                (out / "model.jsonl").write_text("".join(json.dumps(c.summary()) + "\n" for c in model.calls))
                (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(json.dumps({k: figures.get(k) for k in ("warm_added_p50_ms", "rss_mb", "stdin_close")}, default=str))


async def timing(name: str, turns: int) -> None:
    """Warm turns only, one session: what a turn adds over the model's own time, written to timing.json."""
    adapter = ADAPTERS[name]
    out = HERE / "recordings" / name
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"acp-{name}-", dir=os.environ.get("ACP_SCRATCH", "/var/tmp")) as scratch:
        root = Path(scratch)
        (root / "work").mkdir()
        model = ScriptedModel()
        async with model:
            agent = Agent(adapter, adapter.environment(root, model.url), root / "work", out, "timing")
            try:
                conn = await agent.start()
                await agent.initialize()
                session = await conn.new_session(cwd=str(root / "work"), mcp_servers=[])
                await agent.prompt(model, session.session_id, "first turn (not counted)")
                added = sorted([(await agent.prompt(model, session.session_id, f"timed turn {i}"))["added_ms"]
                                for i in range(turns)])
            finally:
                await agent.kill()
    result = {"adapter": name, "turns": turns, "added_ms_p50": statistics.median(added), "added_ms_min": added[0],
              "added_ms_p90": added[int(turns * 0.9) - 1], "loadavg": os.getloadavg(), "cores": os.cpu_count()}
    (out / "timing.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "timing.jsonl").unlink(missing_ok=True)  # the transcript of 40 identical turns says nothing more
    print(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("adapter", choices=sorted(ADAPTERS))
    parser.add_argument("--tag", default="", help="recordings/<tag>/ instead of recordings/<adapter>/")
    parser.add_argument("--timing", type=int, default=0, help="only N warm turns, for the latency figure")
    arguments = parser.parse_args()
    if arguments.timing:
        asyncio.run(timing(arguments.adapter, arguments.timing))
    else:
        asyncio.run(record(arguments.adapter, arguments.tag))
