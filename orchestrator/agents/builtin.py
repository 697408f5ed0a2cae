"""The built-in providers: `echo` (answers with its prompt), `rules` (offline selector and diagnostics) and
`demo` (the chat tools at work, with no agent CLI installed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gateway.api import BuiltinProvider
from gateway.payloads import STATUS_WORDS

HELP_WORDS = frozenset({"help", "/help"})
NO_TOOLS = frozenset({"echo", "rules"})  # built-ins that never call the chat tools: their turns are granted none
DIAGNOSE_WORDS = frozenset({"diagnose", "/diagnose"})


async def echo_provider(prompt: str, request: dict[str, Any]) -> str:
    """Answers with the prompt it was given."""
    return prompt


async def rules_provider(prompt: str, request: dict[str, Any]) -> str:
    """Answers a selector request with a decision, a diagnostics request with findings, else echoes."""
    if "allowedActions" in request:
        return json.dumps(select_by_rules(request))
    if "question" in request:
        return diagnose_by_rules(request)
    return prompt


async def demo_provider(prompt: str, request: dict[str, Any]) -> str:
    """Shows a new user the chat tools: reads who it talks to, sends a message, asks whether to send a file and
    sends it through the turn's MCP server (as an agent CLI would), then answers. Without the tools it says how
    to get them."""
    from orchestrator.chattools.client import ToolFailed, connected  # the mcp client: imported when used
    from orchestrator.chattools.server import ToolEndpoint

    tools = request.get("chatTools")
    if not isinstance(tools, dict):
        return f"{prompt}\n(the chat tools are off for this turn: see docs/chat-tools.md)"
    async with connected(ToolEndpoint(str(tools["url"]), str(tools["token"]))) as chat:
        info = json.loads(await chat.call("conversation_info"))
        await chat.call("send_message", text=f"Hello {info.get('sender') or 'there'}: this message comes "
                                             "from the demo agent's send_message tool, while it works.")
        answer = await chat.call("ask", question="Shall I send you a file too? (the ask tool)",
                                 options=[DEMO_YES, "No, thanks"])
        sent = "not asked for"
        if answer != "No, thanks":  # "no answer" too: the demo goes on as an agent would
            report = Path(info["filesFolder"]) / f"demo-{info.get('runId', 'run')}.txt"
            report.write_text(f"A file the demo agent wrote for run {info.get('runId')}.\n", encoding="utf-8")
            try:
                sent = await chat.call("send_file", path=str(report), caption="a file sent with send_file")
            except ToolFailed as exc:
                sent = f"not sent: {exc}"
    return f"{prompt}\n(demo agent: tools {', '.join(DEMO_TOOLS)}; you answered: {answer}; the file: {sent})"


DEMO_YES = "Yes, send it"
DEMO_TOOLS = ("conversation_info", "send_message", "ask", "send_file")


def builtin_providers() -> dict[str, BuiltinProvider]:
    """The providers that need no CLI installed."""
    return {"echo": echo_provider, "rules": rules_provider, "demo": demo_provider}


def select_by_rules(request: dict[str, Any]) -> dict[str, Any]:
    """Chooses an action from commands, the function a message asks for (`invokeFunction`, when
    offered), keywords and workflow ids, as orchestrator.yaml `rules` says."""
    text = str((request.get("message") or {}).get("message", "")).strip()
    words = text.lower().split()
    first = words[0] if words else ""
    workflows = {str(w.get("id")) for w in request.get("workflows", [])}
    rules = request.get("rules") or {}
    command = _command_decision(first, text, request.get("activeRun"))
    if command is not None:
        return command
    functions = {str(f.get("name")) for f in request.get("availableFunctions", [])}
    asked = (request.get("message") or {}).get("invokeFunction")  # a channel's request, e.g. a probe
    if isinstance(asked, str) and asked in functions:
        return {"action": "command_invoke", "function": asked, "arguments": {}}
    keyword = _keyword_workflow(text, rules.get("keywords") or {}, workflows)
    if keyword is not None:
        return _start(keyword)
    if first.lstrip("/") in workflows:
        return _start(first.lstrip("/"))
    default = rules.get("default_workflow")
    if default in workflows:
        return _start(str(default))
    return {"action": "command_invoke", "function": "list_workflows", "arguments": {}}


def _command_decision(first: str, text: str, active_run: Any) -> dict[str, Any] | None:
    if text.lower() in STATUS_WORDS:
        return {"action": "workflow_status"}
    if first in HELP_WORDS:
        return {"action": "command_invoke", "function": "list_workflows", "arguments": {}}
    if first in DIAGNOSE_WORDS:
        return {"action": "diagnostics_investigate", "question": text}
    if first == "/cancel":
        if isinstance(active_run, dict) and active_run.get("runId"):
            return {"action": "command_invoke", "function": "cancel_run",
                    "arguments": {"runId": active_run["runId"]}}
        return {"action": "workflow_status"}
    return None


def _keyword_workflow(text: str, keywords: dict[str, str], workflows: set[str]) -> str | None:
    for word, workflow_id in keywords.items():
        if workflow_id in workflows and re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE):
            return workflow_id
    return None


def _start(workflow_id: str) -> dict[str, Any]:
    return {"action": "workflow_start", "workflowId": workflow_id, "input": {}}


def diagnose_by_rules(request: dict[str, Any]) -> str:
    """Findings and next-step options read straight from the diagnostics context."""
    context = request.get("context") or {}
    run = context.get("run")
    findings = [*_run_findings(run), *_queue_findings(context.get("queue")),
                *_event_findings(context.get("events") or [])]
    options = ["Send /status to see the run's progress."] if run else []
    if run and run.get("state") in ("queued", "running", "waiting_input"):
        options.append(f"Send /cancel to stop run {run.get('runId')}.")
    options.append("Send /help to list the workflows you can start.")
    lines = ["Findings:", *(f"- {f}" for f in findings), "Next steps:", *(f"- {o}" for o in options)]
    return "\n".join(lines)


def _run_findings(run: Any) -> list[str]:
    if not isinstance(run, dict):
        return ["No workflow run is linked to this conversation."]
    found = [f"Run {run.get('runId')} (workflow {run.get('workflowId')}) is {run.get('state')}"
             + (f", at step {run['currentStep']}." if run.get("currentStep") else ".")]
    for step_id, step in (run.get("steps") or {}).items():
        if isinstance(step, dict) and step.get("status") == "failed":
            error = step.get("error") or ""
            found.append(f"Step {step_id} failed (exit {step.get('exitCode')}): {error}".strip())
    return found


def _queue_findings(queue: Any) -> list[str]:
    if not isinstance(queue, dict) or not queue:
        return []
    figures = [f"{key} {value}" for key, value in queue.items() if not isinstance(value, (dict, list))]
    return ["Queue: " + ", ".join(figures)] if figures else []


def _event_findings(events: list[Any]) -> list[str]:
    failures = [e for e in events if isinstance(e, dict) and "fail" in str(e.get("event", ""))]
    if not failures:
        return ["No recent failure events."]
    last = failures[-1]
    reason = last.get("reason") or ""
    return [f"{len(failures)} recent failure event(s); the last: {last.get('event')} {reason}".strip()]
