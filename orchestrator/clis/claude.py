"""Claude Code (`claude -p`): stream-json output, sessions by id, tools off unless `mode: edit`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.settings import ProviderSettings
from orchestrator.clis.base import Preset, Reading, Session, StreamEvent, first_line, json_lines, json_object

EDIT_TOOLS = ("Read", "Edit", "Write", "Glob", "Grep")


class Claude(Preset):
    name = "claude"
    binary = "claude"
    own_session_ids = True
    install = "npm install -g @anthropic-ai/claude-code"
    login = "run `claude` once as that user and /login, or set ANTHROPIC_API_KEY in the provider's env"
    login_markers = ("not logged in", "please run /login", "invalid api key", "authentication_error",
                     "oauth token has expired", "credit balance is too low")
    too_large_markers = ("prompt is too long", "input is too long", "argument list too long")
    unknown_session_markers = ("no conversation found with session id",)
    session_in_use_markers = ("is already in use",)

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None) -> list[str]:
        argv = [binary, "-p", "--output-format", "stream-json", "--verbose"]
        if settings.model:
            argv += ["--model", settings.model]
        if mode == "edit":
            tools = ",".join(settings.allowed_tools if settings.allowed_tools is not None else EDIT_TOOLS)
            argv += ["--permission-mode", "acceptEdits", "--tools", tools, "--allowedTools", tools]
        else:
            argv += ["--permission-mode", "dontAsk", "--tools", ""]
        if session is None:
            argv.append("--no-session-persistence")
        elif session.resume and session.id:
            argv += ["--resume", session.id]
        elif session.id:
            argv += ["--session-id", session.id]
        return argv + settings.extra_args

    def endpoint_env(self, settings: ProviderSettings, key: str | None, folder: Path) -> dict[str, str]:
        """claude reads both from its environment (Messages API, `x-api-key`); it writes no config for it."""
        env = {"ANTHROPIC_BASE_URL": settings.base_url} if settings.base_url else {}
        return env | ({"ANTHROPIC_API_KEY": key} if key is not None else {})

    def read(self, stdout: str) -> Reading:
        reading = Reading(answer="")
        texts: list[str] = []
        found_result = False
        for event in json_lines(stdout):
            reading.session_id = event.get("session_id") or reading.session_id
            if event.get("type") == "assistant":
                texts += [b.get("text", "") for b in _blocks(event) if b.get("type") == "text"]
            elif event.get("type") == "result":
                found_result = True
                result = event.get("result")
                failed = event.get("is_error") or event.get("subtype") not in (None, "success")
                if failed:
                    errors = event.get("errors")
                    detail = result or ("; ".join(map(str, errors)) if errors else event.get("subtype"))
                    reading.error = str(detail or "claude reported an error")
                else:
                    reading.answer = str(result or "")
        if not found_result:
            reading.answer = texts[-1] if texts else ""
        return reading

    def stream_event(self, line: str) -> StreamEvent | None:
        event = json_object(line)
        if event is None or event.get("type") not in ("assistant", "user", "result"):
            return None
        for block in _blocks(event):
            if block.get("type") == "tool_use":
                return StreamEvent(note=f"using {block.get('name', 'a tool')}{_tool_hint(block.get('input'))}")
            if block.get("type") == "text" and block.get("text", "").strip():
                return StreamEvent(note=first_line(block["text"]))
        return StreamEvent()


def _blocks(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _tool_hint(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    for key in ("file_path", "path", "command", "pattern", "url"):
        if isinstance(arguments.get(key), str):
            return f": {first_line(arguments[key], 60)}"
    return ""
