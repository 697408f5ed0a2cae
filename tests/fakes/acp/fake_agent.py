"""A small ACP agent (the `acp` SDK's agent side) that behaves like one of the real adapters, as
FINDINGS.md recorded them: `python fake_agent.py --like claude|codex|gemini`. No model: the prompt says what
happens. Sessions are kept as JSON in `$FAKE_ACP_STATE` (so a new process can `session/load` them);
`$FAKE_ACP_FAIL_NEW` makes `session/new` fail.

Prompt directives: `[chunks=N]` N answer chunks, `[delay=S]` S seconds before each (a cancel ends the wait),
`[run=CMD]` asks permission to run CMD (the adapter's option ids and kinds), `[recall=WORD]` says whether
WORD was in an earlier prompt of the session, `[env]` answers with the agent's environment as JSON, `[deaf]`
ignores a cancel.
Every answer starts `answer to: <prompt>` and says how many earlier prompts the session remembers.

Per adapter: claude sends an empty chunk before each message, and after a cancel answers the next prompt
empty (`end_turn`, no chunk, zero usage) while its answer arrives in the following prompt; codex numbers
permissions with uuids and ends a rejected turn `cancelled` without text, and leaves a child in its
process group; gemini fails `session/load` in the session's creation "minute" (`$FAKE_ACP_MINUTE_SEC`,
default 60), replays the history after the load's response and drops a cancelled prompt from it. claude
and codex do not exit when stdin closes; gemini does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent, update_agent_message_text
from acp.helpers import update_user_message_text
from acp.schema import (
    AgentCapabilities,
    AvailableCommandsUpdate,
    Cost,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

OPTIONS = {
    "claude": [("allow_always", "Always Allow", "allow_always"), ("allow", "Allow", "allow_once"),
               ("reject", "Reject", "reject_once")],
    "codex": [("approved", "Yes", "allow_once"), ("approved-execpolicy-amendment", "Yes, and don't ask again",
                                                  "allow_always"), ("abort", "No", "reject_once")],
    "gemini": [("proceed_always", "Allow for this session", "allow_always"), ("proceed_once", "Allow", "allow_once"),
               ("cancel", "Reject", "reject_once")],
}
FRESH_IN, CACHE_WRITE, CACHED_IN, OUT, REASONING = 1200, 300, 4000, 70, 20  # as tests/fakes/clis/_common.py
TURN_COST = 0.011624999999999998  # what claude-agent-acp priced those tokens at (its usage_update's cost)
DIRECTIVE = re.compile(r"\[([a-z]+)(?:=([^\]]*))?\]")


class FakeAgent:
    """The agent: sessions with their prompts, the adapter's quirks."""

    def __init__(self, like: str, state: Path):
        self.like, self.state = like, state
        self.conn: Any = None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.after_cancel: dict[str, str] = {}  # claude: "empty" for the next prompt, else an answer owed
        self.permission_count = 0
        self.replays: dict[str, asyncio.Future[None]] = {}  # gemini: a load's replay still to come
        self.costs: dict[str, float] = {}  # claude: each session's cost so far (this process's turns)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities(load_session=True))

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        if os.environ.get("FAKE_ACP_FAIL_NEW"):  # as claude's does when its Claude Code cannot start
            raise RequestError.internal_error({"details": "Query closed before response received"})
        session_id = str(uuid.uuid4())
        self._write(session_id, {"created": time.time(), "history": []})
        return NewSessionResponse(session_id=session_id)

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        record = self._read(session_id)
        if record is None:
            raise RequestError.invalid_params({"sessionId": "Resource not found"})
        minute = float(os.environ.get("FAKE_ACP_MINUTE_SEC", "60"))
        if self.like == "gemini" and int(record["created"] // minute) == int(time.time() // minute):
            self._path(session_id).unlink()  # gemini's own new chat file takes its name: the session is gone
            raise RequestError.internal_error({"details": "Internal error"})
        if self.like == "gemini":  # the replay follows the response, and precedes the next prompt's answer
            self.replays[session_id] = asyncio.ensure_future(self._replay(session_id, after=0.05))
        else:
            await self._replay(session_id)
        return LoadSessionResponse()

    async def _replay(self, session_id: str, after: float = 0) -> None:
        await asyncio.sleep(after)
        record = self._read(session_id) or {"history": []}
        for prompt, answer in record["history"]:
            await self.conn.session_update(session_id, update_user_message_text(prompt))
            await self.conn.session_update(session_id, update_agent_message_text(answer))
        await self.conn.session_update(session_id, AvailableCommandsUpdate(
            session_update="available_commands_update", available_commands=[]))

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        record = self._read(session_id)
        if record is None:
            raise RequestError.invalid_params({"sessionId": "Session not found"})
        text = "".join(getattr(block, "text", "") for block in prompt)
        if session_id in self.replays:
            await self.replays.pop(session_id)
        cancelled = self.cancelled[session_id] = asyncio.Event()
        owed = self.after_cancel.pop(session_id, None)
        if owed == "empty":  # claude after a cancel: this answer comes with the next prompt
            self.after_cancel[session_id] = self._answer(text, record)
            record["history"].append([text, self.after_cancel[session_id]])
            self._write(session_id, record)
            return PromptResponse(stop_reason="end_turn", usage=_usage(0))
        if owed:
            await self._say(session_id, owed)
        stop, answer = await self._turn(session_id, text, record, cancelled)
        if stop == "cancelled" and self.like == "claude":
            self.after_cancel[session_id] = "empty"
        if not (stop == "cancelled" and self.like == "gemini"):
            record["history"].append([text, answer])
            self._write(session_id, record)
        return await self._ended(session_id, stop)

    async def _ended(self, session_id: str, stop: str) -> PromptResponse:
        """The turn's end with its usage as each real adapter reports it (FINDINGS.md, "Usage"): claude a
        `usage_update` (context tokens, the session's cumulative cost) and the result's `usage`; codex only a
        `usage_update` (the context's tokens); gemini the result's `_meta.quota`."""
        prompt = FRESH_IN + CACHED_IN
        if self.like == "gemini":
            tokens = {"input_tokens": prompt, "output_tokens": OUT - REASONING}
            return PromptResponse(stop_reason=stop, field_meta={"quota": {"token_count": tokens, "model_usage": [
                {"model": "gemini-fake", "token_count": tokens}]}})
        cost = None
        if self.like == "claude":
            self.costs[session_id] = self.costs.get(session_id, 0.0) + TURN_COST
            cost = Cost(amount=self.costs[session_id], currency="USD")
        used, size = (prompt + CACHE_WRITE + 1, 1000000) if self.like == "claude" else (prompt + OUT, 258400)
        await self.conn.session_update(session_id, UsageUpdate(session_update="usage_update", used=used,
                                                               size=size, cost=cost))
        if self.like == "codex":
            return PromptResponse(stop_reason=stop)
        return PromptResponse(stop_reason=stop, usage=Usage(
            input_tokens=FRESH_IN, output_tokens=OUT, cached_read_tokens=CACHED_IN, cached_write_tokens=CACHE_WRITE,
            total_tokens=prompt + CACHE_WRITE + OUT))

    async def _turn(self, session_id: str, text: str, record: dict[str, Any],
                    cancelled: asyncio.Event) -> tuple[str, str]:
        """Runs one prompt's directives; returns the stop reason and the answer given."""
        directives = {name: value for name, value in DIRECTIVE.findall(text)}
        answer = self._answer(text, record)
        if "run" in directives:
            outcome = await self._ask(session_id, directives["run"])
            if outcome is None and self.like == "codex":
                return "cancelled", ""
            answer = f"ran {directives['run']}" if outcome else f"User refused permission to run {directives['run']}"
        if "env" in directives:
            answer = json.dumps(dict(os.environ))
        chunks = max(1, int(directives.get("chunks") or 1))
        delay = float(directives.get("delay") or 0)
        size = -(-len(answer) // chunks)
        pieces = [answer[i * size:(i + 1) * size] for i in range(chunks)]
        if self.like == "claude":
            await self._say(session_id, "")
        for piece in pieces:
            if delay:
                await _pause(delay, cancelled)
            if cancelled.is_set() and "deaf" not in directives:
                return "cancelled", answer
            await self._say(session_id, piece)
        return "end_turn", answer

    def _answer(self, text: str, record: dict[str, Any]) -> str:
        earlier = [prompt for prompt, _ in record["history"]]
        recall = re.search(r"\[recall=([^\]]*)\]", text)
        if recall:  # the session's earlier prompts, or a transcript the client put before this one
            word = recall.group(1)
            seen = any(word in p for p in earlier) or word in text.replace(recall.group(0), "")
            return f"recall {word}: {'yes' if seen else 'no'}"
        return f"answer to: {DIRECTIVE.sub('', text).strip()} ({len(earlier)} earlier)"

    async def _ask(self, session_id: str, command: str) -> bool | None:
        """Asks permission; True allowed, False rejected (the turn goes on), None rejected (codex ends)."""
        self.permission_count += 1
        call_id = str(uuid.uuid4()) if self.like == "codex" else str(self.permission_count)
        options = [PermissionOption(option_id=i, name=n, kind=k) for i, n, k in OPTIONS[self.like]]
        reply = await self.conn.request_permission(
            session_id=session_id, tool_call=ToolCallUpdate(tool_call_id=call_id, title=command,
                                                            raw_input={"command": command}), options=options)
        outcome = reply.outcome
        kinds = {i: k for i, _, k in OPTIONS[self.like]}
        allowed = outcome.outcome == "selected" and kinds.get(outcome.option_id, "").startswith("allow")
        if allowed:
            return True
        return None if self.like == "codex" else False

    async def cancel(self, session_id: str, **_: Any) -> None:
        if session_id in self.cancelled:
            self.cancelled[session_id].set()

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id, update_agent_message_text(text))

    def _path(self, session_id: str) -> Path:
        return self.state / f"{session_id}.json"

    def _read(self, session_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(session_id).read_text())
        except (OSError, ValueError):
            return None

    def _write(self, session_id: str, record: dict[str, Any]) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self._path(session_id).write_text(json.dumps(record))


async def _pause(delay: float, cancelled: asyncio.Event) -> None:
    """Waits `delay` seconds, less when a cancel comes (a deaf turn, cancelled already, waits it all)."""
    if cancelled.is_set():
        await asyncio.sleep(delay)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancelled.wait(), delay)


def _usage(total: int) -> Usage:
    return Usage(total_tokens=total, input_tokens=total // 2, output_tokens=total - total // 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--like", choices=sorted(OPTIONS), required=True)
    args = parser.parse_args()
    state = Path(os.environ.get("FAKE_ACP_STATE", "."))
    state.mkdir(parents=True, exist_ok=True)
    (state / f"pid-{os.getpid()}").write_text(args.like)  # which processes ran (tests look for leftovers)
    if args.like == "codex":  # the native binary the node launcher starts, in the same process group
        subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); time.sleep(3600)"])
    asyncio.run(run_agent(FakeAgent(args.like, state),
                          use_unstable_protocol=True))
    if args.like != "gemini":  # claude and codex keep running after stdin closes
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
