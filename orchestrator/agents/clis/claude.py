"""Claude Code (`claude -p`): stream-json output, sessions by id, tools off unless `mode: edit`.

A failed call leaves its prompt in the session (next to a synthetic error reply), and `--resume` sends
it to the model again with every later turn. So a turn never continues a session in place: it forks the
last good one (`--resume <last> --fork-session --session-id <new>`); a failed call leaves only its
fork behind, and the retry forks the last good session again. The hidden `--resume-session-at` would
rewind in place, but it is not in `claude --help`. Each turn copies the transcript into a new file under
`~/.claude/projects/`; once the fork is recorded the session it came from is removed (`superseded`), so a
conversation keeps one transcript, not one per turn (the real claude 2.1.197 answers a fork's later turns
from the fork alone: checked with its parent deleted).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.settings import ProviderSettings
from orchestrator.agents.clis.base import (
    Figures,
    Preset,
    Reading,
    Session,
    StreamEvent,
    first_line,
    json_lines,
    json_object,
)
from orchestrator.chattools.names import SERVER_NAME, TOKEN_ENV, TOOL_NAMES
from orchestrator.usage.records import TokenUsage

EDIT_TOOLS = ("Read", "Edit", "Write", "Glob", "Grep")
REFUSED_STATUSES = (401, 403)
_SESSION_ID = re.compile(r"[0-9a-fA-F-]{36}")  # a uuid: never a path, never a glob
REFUSED_ERRORS = ("authentication_failed", "oauth_org_not_allowed")  # claude's names for a refused login
INPUT_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
REFUSALS_TRUSTED = 2  # the attempt whose refusal is final: the first may end in a refreshed claude.ai token


class Claude(Preset):
    name = "claude"
    binary = "claude"
    own_session_ids = True
    keeps_failed_prompts = True
    install = "npm install -g @anthropic-ai/claude-code"
    login = "run `claude` once as that user and /login, or set ANTHROPIC_API_KEY in the provider's env"
    login_markers = ("not logged in", "please run /login", "invalid api key", "authentication_error",
                     "oauth token has expired", "credit balance is too low")
    usage_limit_markers = ("request rejected (429)", "usage limit reached", "out of usage credits",
                           "monthly usage limit")  # CLIS.md, "Usage limit"
    too_large_markers = ("prompt is too long", "input is too long", "argument list too long")
    unknown_session_markers = ("no conversation found with session id",)
    session_in_use_markers = ("is already in use",)
    partial_args = ("--include-partial-messages",)  # text deltas as `stream_event` lines (CLIS.md)

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None,
             tools: str | None = None) -> list[str]:
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
        elif session.resume and session.id:  # a fork: the last good session stays as it is
            argv += ["--resume", session.id, "--fork-session", "--session-id", str(uuid.uuid4())]
        elif session.id:
            argv += ["--session-id", session.id]
        return argv + settings.extra_args + (mcp_args(tools) if tools else [])

    def endpoint_env(self, settings: ProviderSettings, key: str | None, folder: Path) -> dict[str, str]:
        """claude reads both from its environment (Messages API, `x-api-key`); it writes no config for it."""
        env = {"ANTHROPIC_BASE_URL": settings.base_url} if settings.base_url else {}
        return env | ({"ANTHROPIC_API_KEY": key} if key is not None else {})

    def superseded(self, session_id: str, env: Mapping[str, str]) -> None:
        """Removes the transcript a recorded fork copied (`<config>/projects/<project>/<id>.jsonl`, the config
        folder `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`); a later turn resumes the fork, never it."""
        config = env.get("CLAUDE_CONFIG_DIR") or (str(Path(env["HOME"]) / ".claude") if env.get("HOME") else None)
        if config is None or not _SESSION_ID.fullmatch(session_id):
            return
        for transcript in Path(config).glob(f"projects/*/{session_id}.jsonl"):
            transcript.unlink(missing_ok=True)

    def read(self, stdout: str, stderr: str = "") -> Reading:
        reading = Reading(answer="")
        texts: list[str] = []
        found_result = False
        for event in json_lines(stdout):
            reading.session_id = event.get("session_id") or reading.session_id
            if event.get("type") == "assistant":
                texts += [b.get("text", "") for b in _blocks(event) if b.get("type") == "text"]
            elif event.get("type") == "result":
                found_result = True
                reading.usage = _usage(event)
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
        if event is not None and event.get("type") == "system" and event.get("subtype") == "api_retry":
            return _api_retry(event)
        if event is not None and event.get("type") == "stream_event":
            return _partial(event.get("event"))
        if event is None or event.get("type") not in ("assistant", "user", "result"):
            return None
        for block in _blocks(event):
            if block.get("type") == "tool_use":
                return StreamEvent(note=f"using {block.get('name', 'a tool')}{_tool_hint(block.get('input'))}")
            if block.get("type") == "text" and block.get("text", "").strip():
                return StreamEvent(note=first_line(block["text"]), from_text=True)
        return StreamEvent()


def _usage(result: dict[str, Any]) -> TokenUsage:
    """The result line's cost and tokens: the Messages API counts the input read from and written to the
    prompt cache apart from `input_tokens`, so all three make the input (CLIS.md, "Usage")."""
    usage = result.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    figures = Figures()
    parts = [figures.count(key, usage.get(key)) for key in INPUT_COUNTS]
    tokens_in = sum(part or 0 for part in parts) if any(part is not None for part in parts) else None
    return figures.usage(figures.cost("total_cost_usd", result.get("total_cost_usd")), tokens_in,
                         figures.count("output_tokens", usage.get("output_tokens")))


def _api_retry(event: dict[str, Any]) -> StreamEvent | None:
    """An `api_retry` line: claude retries a failed API call ten times over ~3 minutes. A refused login
    (401/403, `authentication_failed`) twice in a row never gets better: refused then. Once is a sign of
    life: with a claude.ai login claude refreshes its access token after one 401 and goes on. An API that
    answers but is busy (429, 529, 5xx) is a sign of life worth a note. No answer at all (no
    `error_status`: the network is down) is not, so `first_output_sec` still ends the wait."""
    status = event.get("error_status")
    error = str(event.get("error") or "")
    words = " ".join(str(part) for part in (status, error) if part)
    attempt, most = event.get("attempt"), event.get("max_retries")
    if status in REFUSED_STATUSES or error in REFUSED_ERRORS:
        if isinstance(attempt, int) and attempt < REFUSALS_TRUSTED:
            return StreamEvent()
        return StreamEvent(refused=f"the model API refused the login: {words}")
    if not isinstance(status, int):
        return None
    tries = f" (attempt {attempt} of {most})" if attempt and most else ""
    return StreamEvent(note=f"the model API is retrying: {words}{tries}")


def _partial(event: Any) -> StreamEvent:
    """A `stream_event` line (`--include-partial-messages`): a text delta is a piece of the answer, a
    `message_start` begins a new message; any other is a sign of work."""
    if not isinstance(event, dict):
        return StreamEvent()
    if event.get("type") == "message_start":
        return StreamEvent(new_message=True)
    delta = event.get("delta")
    if event.get("type") == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
        return StreamEvent(text=str(delta.get("text") or ""))
    return StreamEvent()


def mcp_args(url: str) -> list[str]:
    """The chat tools for `claude -p` (tests/fakes/clis/MCP.md): the server as `--mcp-config` JSON, its token
    read from the environment (`${VAR}` in headers is expanded by claude), and its tools allowed, since
    `--permission-mode dontAsk` denies every tool not allowed (`--tools ""` removes built-in tools only)."""
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
    return ["--mcp-config", json.dumps({"mcpServers": {SERVER_NAME: server}}),
            "--allowedTools", *(f"mcp__{SERVER_NAME}__{tool}" for tool in TOOL_NAMES)]


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
