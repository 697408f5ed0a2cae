"""Events as the dashboard's readable lines: when, what happened in words, its conversation and its run; the
event's JSON stays one click away (page.py puts it in a closed `<details>`)."""

from __future__ import annotations

from typing import Any

WORDS: dict[str, str] = {
    "message.claimed": "message {job_id} taken from {where} (attempt {attempt})",
    "message.duplicate": "message {job_id} skipped: already answered",
    "message.invalid": "file {job_id} refused: {reason}",
    "job.created": "{what} created",
    "job.running": "{what} running",
    "job.succeeded": "{what} answered in {took}",
    "job.failed.retryable": "{what} failed, will retry: {reason}",
    "job.failed.final": "{what} failed for good: {reason}",
    "job.requeued": "{what} back in the queue (retry {retries})",
    "job.cancelled": "{what} cancelled",
    "outgoing.sent": "reply sent to {where} in {took}",
    "outgoing.retry": "reply to {where} retried: {reason}",
    "outgoing.failed": "reply {file} is dead: {reason}",
    "outgoing.undeliverable": "no channel runs {where}: replies wait",
    "selector.decided": "selector chose {action} in {took}",
    "selector.failed": "selector gave no decision: {reason}",
    "step.completed": "step {step} of {job_id} done in {took}",
    "channel.started": "channel {where} started",
    "channel.retrying": "channel {where} retrying: {reason}",
    "channel.disabled": "channel {where} disabled: {reason}",
    "heartbeat.ok": "heartbeat {profile} ok in {rtt}",
    "heartbeat.alert": "heartbeat {profile} answered something else",
    "usage.recorded": "{provider} turn: {usd} and {tokens} tokens",
    "usage.limit_reached": "usage limit reached: {kind} {key}",
    "alert.sent": "alert sent to {profile} ({count})",
    "gateway.started": "gateway started (pid {pid})",
    "gateway.stopped": "gateway stopped (pid {pid})",
}


def line(event: dict[str, Any]) -> dict[str, str]:
    """An event as {time, what, conversation, run} text (never its JSON)."""
    ts = str(event.get("ts") or "")
    return {"time": ts[11:19] if len(ts) >= 19 else ts, "what": what(event),
            "conversation": str(event.get("conversation") or ""), "run": run_of(event)}


def what(event: dict[str, Any]) -> str:
    """The words for what an event says happened."""
    name = str(event.get("event"))
    template = WORDS.get(name)
    if template is None:
        reason = event.get("reason")
        return name.replace(".", " ").replace("_", " ") + (f": {_short(reason)}" if reason else "")
    return template.format_map(_Fields(event))


def run_of(event: dict[str, Any]) -> str:
    """The workflow run an event concerns, if any."""
    if event.get("workflow") is not None:  # a run's own job.* event
        return str(event.get("job_id") or "")
    return str(event.get("run") or event.get("workflowRunId") or event.get("run_id") or "")


class _Fields(dict[str, str]):
    """An event's fields as a template reads them: missing ones as "?", some derived."""

    def __init__(self, event: dict[str, Any]):
        super().__init__()
        self.event = event

    def __missing__(self, key: str) -> str:
        event = self.event
        if key == "what":
            return "message" if event.get("kind") == "message" else f"run {event.get('job_id')}"
        if key == "where":
            return str(event.get("profile") or event.get("channel") or "?")
        if key == "took":
            return _ms(event.get("duration_ms"))
        if key == "rtt":
            return _ms(event.get("rtt_ms"))
        if key == "usd":
            usd = event.get("usd")
            return f"${usd:.4f}" if isinstance(usd, int | float) else "no cost"
        if key == "tokens":
            return str(sum(v for k in ("tokens_in", "tokens_out") if isinstance(v := event.get(k), int)))
        value = event.get(key)
        return "?" if value is None else _short(value)


def _ms(value: object) -> str:
    if not isinstance(value, int | float):
        return "?"
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def _short(value: object, limit: int = 160) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
