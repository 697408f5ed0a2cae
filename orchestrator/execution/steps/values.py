"""The values step templates and request files see: message, input, earlier steps (JSON parsed), item."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.runs.jobs import parse_iso
from orchestrator.runs.state import RunState


def parse_json(text: str | None) -> Any:
    """The JSON value of an output, or None when it is not JSON (a fenced ```json block counts)."""
    if not text:
        return None
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        return json.loads(body)
    except ValueError:
        return None


def run_stamp(run: RunState) -> str:
    """The run's `{timestamp}` partition name (its creation time, `YYYYmmdd-HHMMSS`)."""
    try:
        return parse_iso(run.createdAt).strftime("%Y%m%d-%H%M%S")
    except ValueError:
        return run.runId


def template_values(run: RunState, workspace: str = "", **extra: Any) -> dict[str, Any]:
    """The placeholders a step's prompt, argv, glob or items may use."""
    steps = {}
    for name, state in run.steps.items():
        output = (state.output or "").rstrip()
        steps[name] = {"output": output, "status": state.status, "json": parse_json(state.output)}
    return {
        "message": str(run.message.get("message", "")),
        "sender": str(run.message.get("sender", "")),
        "senderId": str(run.message.get("senderId") or ""),
        "channel": run.conversation.channel,
        "conversationId": str(run.conversation.conversationId or run.conversation.senderId or ""),
        "input": run.input,
        "steps": steps,
        "run": {"id": run.runId, "workflow": run.workflowId},
        "timestamp": run_stamp(run),
        "workspace": workspace,
        **extra,
    }


def step_request(run: RunState, step_id: str, **extra: Any) -> dict[str, Any]:
    """The request file of a workflow step (DESIGN "request file")."""
    return {
        "runId": run.runId, "workflowId": run.workflowId, "stepId": step_id, "input": run.input,
        "message": run.message,
        "steps": {name: {"status": s.status, "output": s.output}
                  for name, s in run.steps.items() if name != step_id},
        **extra,
    }
