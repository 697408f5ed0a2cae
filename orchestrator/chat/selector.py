"""The selector phase: the request file, the prompt, the provider run, the result file, decision parsing."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.home import Home, atomic_write
from gateway.models import IncomingPayload
from gateway.scope import ConversationScope
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog
from orchestrator.agents.clis import unwrap_answer
from orchestrator.agents.live import TurnStopped
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.sessions import ConversationHistory
from orchestrator.agents.spawn import ProviderFailed, ProviderResult
from orchestrator.config.loading import LoadedConfig, read_template
from orchestrator.execution.templates import render
from orchestrator.usage.records import Payer

log = logging.getLogger(__name__)

ACTIONS = ("workflow_start", "workflow_status", "diagnostics_investigate", "command_invoke")
RAW_CAP = 65536
PARSE_CAP = 262144

DEFAULT_SELECTOR_PROMPT = """\
You are the selector of a chat gateway. Read the user's message and choose exactly one action.
Answer with one JSON object, one of:
  {"action": "workflow_start", "workflowId": "<workflow id>", "input": {}}
  {"action": "workflow_status"}
  {"action": "diagnostics_investigate", "question": "<what to find out>"}
  {"action": "command_invoke", "function": "<function name>", "arguments": {}}
Use workflow_start only with a workflow listed below, and command_invoke only with a listed
function and arguments that match its JSON Schema. Do not use tools: everything you need is here.

Workflows:
{{workflowList}}

Functions:
{{functionList}}

Active run in this conversation: {{activeRunText}}

Recent exchanges in this conversation (oldest first):
{{historyText}}

Message from {{sender}}:
{{text}}
"""


class SelectorError(Exception):
    """The selector's answer held no usable decision."""


@dataclass(frozen=True)
class Decision:
    """A parsed selector decision and the request it answers."""

    request_id: str
    action: str
    fields: dict[str, Any]


def parse_decision(text: str) -> dict[str, Any]:
    """Finds the decision in an answer: the last JSON object with a known `action`, bare or in prose."""
    decoder = json.JSONDecoder()
    text = text[-PARSE_CAP:]
    found: dict[str, Any] | None = None
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict) and value.get("action") in ACTIONS:
            found = value
        index = text.find("{", end)
    if found is None:
        raise SelectorError("no JSON decision with an action")
    return found


def _list_workflows(workflows: list[dict[str, Any]]) -> str:
    lines = []
    for workflow in workflows:
        inputs = f" (input: {json.dumps(workflow['inputs'])})" if workflow.get("inputs") else ""
        lines.append(f"- {workflow['id']}: {workflow['description']}{inputs}")
    return "\n".join(lines) or "(none)"


def _list_functions(functions: list[dict[str, Any]]) -> str:
    lines = [f"- {f['name']}: {f['description']} (arguments: {json.dumps(f['parameters'])})"
             for f in functions]
    return "\n".join(lines) or "(none)"


def _list_exchanges(exchanges: list[dict[str, str]]) -> str:
    lines = [f"- user: {e.get('user', '')}\n  you answered: {e.get('assistant', '')}" for e in exchanges]
    return "\n".join(lines) or "(none)"


def selector_prompt(template: str, request: dict[str, Any]) -> str:
    """Fills the selector prompt template from the request."""
    message = request["message"]
    active = request.get("activeRun")
    active_text = f"{active['runId']} ({active['workflowId']}, {active['state']})" if active else "none"
    values = {
        **request,
        "text": message.get("message", ""),
        "sender": message.get("sender") or message.get("senderId") or "the user",
        "workflowList": _list_workflows(request["workflows"]),
        "functionList": _list_functions(request["availableFunctions"]),
        "activeRunText": active_text,
        "historyText": _list_exchanges(request.get("recentExchanges") or []),
    }
    return render(template, values)


class SelectorFiles:
    """Writes selector request and result files on one background thread, after the reply.

    They are the record of each selector exchange (spec 002), not part of a message's state. Files
    are handed to the thread on the event loop's next turn, so the worker (which writes a reply
    without yielding once the handler returns) has put the reply on disk first; on this disk two
    file creations on the reply path cost about 0.7 ms. A crash may lose the last few records,
    never a message. A request file a provider CLI reads through $SWITCHYARD_REQUEST is written
    before the provider starts, by the provider runner, not here.
    """

    def __init__(self, home: Home):
        self._home = home
        self._pending: queue.SimpleQueue[tuple[Path, dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._later: list[tuple[Path, dict[str, Any]]] = []  # waiting for the loop's next turn

    def request(self, request_id: str, request: dict[str, Any]) -> None:
        self._submit(self._home.select_incoming / f"{request_id}.json", request)

    def result(self, request_id: str, record: dict[str, Any]) -> None:
        self._submit(self._home.select_results / f"{request_id}.json", record)

    def close(self) -> None:
        """Writes the files still pending and stops the thread."""
        self._hand_over()
        if self._thread is not None:
            self._pending.put(None)
            self._thread.join()
            self._thread = None

    def _submit(self, path: Path, body: dict[str, Any]) -> None:
        self._later.append((path, body))
        if len(self._later) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._hand_over)
            except RuntimeError:  # no event loop: hand it over at once
                self._hand_over()

    def _hand_over(self) -> None:
        if not self._later:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="selector-files", daemon=True)
            self._thread.start()
        for item in self._later:
            self._pending.put(item)
        self._later.clear()

    def _drain(self) -> None:
        while (item := self._pending.get()) is not None:
            self._write(*item)

    @staticmethod
    def _write(path: Path, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False, default=str).encode()
        try:
            try:
                atomic_write(path, data, fsync=False)
            except FileNotFoundError:  # its folder was removed: make it again
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, data, fsync=False)
        except OSError as exc:  # a record only: the message's reply does not depend on it
            log.warning("could not write selector file %s: %s", path.name, exc)


class Selector:
    """Asks the configured selector agent which action answers a message, keeping every exchange on disk."""

    def __init__(self, home: Home, runner: ProviderRunner, events: EventLog,
                 history: ConversationHistory):
        self._home = home
        self._runner = runner
        self._events = events
        self._sequence = itertools.count()
        self._random = random.Random(os.urandom(16))  # unique suffixes without a system call each
        self._files = SelectorFiles(home)
        self._history = history

    def close(self) -> None:
        """Writes the selector files still pending (blocks until they are on disk)."""
        self._files.close()

    def new_request_id(self) -> str:
        """A sortable, unique request id: UTC time, a counter and a random suffix."""
        now = time.time_ns()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 1_000_000_000)) + f"{now // 1000 % 1_000_000:06d}"
        return f"{stamp}-{next(self._sequence):06d}-{self._random.getrandbits(24):06x}"

    def build_request(
        self, message: IncomingPayload, loaded: LoadedConfig, functions: list[dict[str, Any]],
        active_run: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The selector request (DESIGN "request file"); for a provider CLI it also holds the
        conversation's last few exchanges (the selector keeps no session of its own)."""
        config = loaded.config
        extra = {}
        if not self._runner.in_process(config.selector.provider):
            extra["recentExchanges"] = self._history.recent(ConversationScope.of(message).key)
        return {
            "requestId": self.new_request_id(),
            "orchestratorId": loaded.orchestrator_id,
            "message": message.model_dump(mode="json", exclude_none=True),
            "workflows": [{"id": wid, "description": w.description, "inputs": w.inputs}
                          for wid, w in config.workflows.items()],
            "availableFunctions": functions,
            "activeRun": active_run,
            "allowedActions": list(ACTIONS),
            "rules": config.rules.model_dump(),
            **extra,
        }

    def remember(self, message: IncomingPayload, loaded: LoadedConfig, answer: str) -> None:
        """Keeps an exchange for the next requests of a provider-CLI selector (nothing for a built-in)."""
        if self._runner.in_process(loaded.config.selector.provider):
            return
        try:
            self._history.add(ConversationScope.of(message).key, message.message, answer)
        except Exception as exc:  # (OSError, a database error): the action ran; a retry would run it again
            log.warning("could not keep the exchange for the selector's next requests: %s", exc)

    @tracing.traced("selector.turn", lambda _, __, loaded, **_k: {"switchyard.provider":
                                                                   loaded.config.selector.provider})
    async def decide(self, request: dict[str, Any], loaded: LoadedConfig, *, turn: str | None = None,
                     payer: Payer | None = None, reserved: tuple[str, ...] = ()) -> Decision:
        """Runs the selector on a request as a turn of the conversation `turn` (which `/stop` may stop:
        TurnStopped) paid by `payer` (a built-in in process costs nothing and is not counted), for whose kinds
        `reserved` the caller reserved its turn already; raises SelectorError (bad answer), ProviderFailed (bad
        run) or LimitReached (not started)."""
        request_id = request["requestId"]
        selector = loaded.config.selector
        template = DEFAULT_SELECTOR_PROMPT
        if selector.prompt:
            template = read_template(selector.prompt, loaded.workspace)
        prompt = selector_prompt(template, request)
        # A provider CLI reads the request file, so it is written before the run; a built-in gets the
        # request in process, and its file is written in the background with the result.
        in_process = self._runner.in_process(selector.provider)
        request_file = None if in_process else self._home.select_incoming / f"{request_id}.json"
        if in_process:
            self._files.request(request_id, request)
        try:
            result = await self._runner.run(selector.provider, TurnRequest(
                prompt, loaded.workspace, request=request, request_file=request_file, mode="answer", stopped_by=turn,
                payer=None if in_process else payer, reserved=reserved))
        except ProviderFailed as exc:
            self._record(request_id, exc.result, None, str(exc))
            raise
        except TurnStopped as exc:
            self._record(request_id, ProviderResult("", "", None, 0, False, False), None, f"stopped: {exc}")
            raise
        try:
            decision = parse_decision(result.stdout if in_process else unwrap_answer(result.stdout))
        except SelectorError as exc:
            self._record(request_id, result, None, str(exc))
            self._events.emit("selector.failed", request_id=request_id, reason=str(exc),
                              duration_ms=result.duration_ms)
            raise
        self._record(request_id, result, decision, None)
        self._events.emit("selector.decided", action=decision["action"], request_id=request_id,
                          duration_ms=result.duration_ms, channel=request["message"].get("channel"))
        return Decision(request_id, decision["action"], decision)

    def _record(
        self, request_id: str, result: ProviderResult, decision: dict[str, Any] | None, error: str | None
    ) -> None:
        self._files.result(request_id, {
            "requestId": request_id, "raw": result.stdout[:RAW_CAP], "decision": decision, "error": error,
            "exitCode": result.exit_code, "durationMs": result.duration_ms, "timedOut": result.timed_out,
            "stderrTail": result.stderr_tail or None,
        })
