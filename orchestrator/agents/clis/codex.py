"""OpenAI Codex (`codex exec --json … -`): JSONL events, threads resumed by id, sandboxed edits."""

from __future__ import annotations

import json
from pathlib import Path

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
from orchestrator.agents.clis.endpoint import write_private
from orchestrator.chattools.names import SERVER_NAME, TOKEN_ENV
from orchestrator.usage.records import TokenUsage

OPENAI_URL = "https://api.openai.com/v1"
KEY_VARIABLE = "OPENAI_API_KEY"
WORK_ITEMS = {"agent_message", "reasoning", "command_execution", "file_change", "mcp_tool_call", "web_search",
              "todo_list"}


class Codex(Preset):
    name = "codex"
    binary = "codex"
    install = "npm install -g @openai/codex"
    login = "run `codex login` once as that user, or set OPENAI_API_KEY in the provider's env"
    login_markers = ("not logged in", "401 unauthorized", "missing bearer", "invalid_api_key",
                     "incorrect api key", "please run `codex login`")
    refusal_markers = ("not inside a trusted directory",)
    usage_limit_markers = ("hit your usage limit", "quota exceeded")  # CLIS.md, "Usage limit"
    too_large_markers = ("context_length_exceeded", "context window", "argument list too long")
    unknown_session_markers = ("no rollout found for thread id",)

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None,
             tools: str | None = None) -> list[str]:
        sandbox = "workspace-write" if mode == "edit" else "read-only"
        argv = [binary, "exec", "--json", "--color", "never", "--skip-git-repo-check", "--sandbox", sandbox]
        if settings.model:
            argv += ["--model", settings.model]
        if session is None:
            argv.append("--ephemeral")
        argv += mcp_args(tools) if tools else []
        argv += settings.extra_args
        if session is not None and session.resume and session.id:
            argv += ["resume", session.id]
        return [*argv, "-"]

    def endpoint_env(self, settings: ProviderSettings, key: str | None, folder: Path) -> dict[str, str]:
        """codex ignores OPENAI_BASE_URL: a `model_provider` in its own CODEX_HOME names the URL (Responses
        API, the only `wire_api` left) and the variable of the key. That CODEX_HOME also keeps the threads,
        so it stays the same for every call of the provider."""
        home = folder / "codex"
        write_private(home / "config.toml", _codex_config(settings.base_url or OPENAI_URL, key is not None))
        return {"CODEX_HOME": str(home)} | ({KEY_VARIABLE: key} if key is not None else {})

    def read(self, stdout: str, stderr: str = "") -> Reading:
        reading = Reading(answer="")
        errors: list[str] = []
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == "turn.completed":
                reading.usage = _added(reading.usage, event.get("usage"))
            elif kind == "thread.started":
                reading.session_id = event.get("thread_id") or reading.session_id
            elif kind == "item.completed":
                item = event.get("item") or {}
                if item.get("type") == "agent_message":
                    reading.answer = str(item.get("text", ""))
            elif kind == "turn.failed":
                error = event.get("error") or {}
                errors.append(str(error.get("message", error)) if isinstance(error, dict) else str(error))
            elif kind == "error":
                errors.append(str(event.get("message", "")))
        if errors and not reading.answer:
            reading.error = errors[-1]
        return reading

    def stream_event(self, line: str) -> StreamEvent | None:
        event = json_object(line)
        if event is None or not str(event.get("type", "")).startswith(("item.", "turn.completed")):
            return None
        item = event.get("item") or {}
        kind = item.get("type")
        if event.get("type") == "turn.completed":
            return StreamEvent()
        if kind not in WORK_ITEMS:
            return None
        if kind == "command_execution" and item.get("command"):
            return StreamEvent(note=f"running {first_line(str(item['command']), 60)}")
        if kind == "file_change":
            return StreamEvent(note="editing files")
        if kind == "agent_message" and item.get("text"):
            return StreamEvent(note=first_line(str(item["text"])))
        return StreamEvent()


def _added(total: TokenUsage | None, usage: object) -> TokenUsage | None:
    """`total` plus one `turn.completed` usage: `input_tokens` already holds `cached_input_tokens`, and
    `output_tokens` the `reasoning_output_tokens` (the Responses API's counts, passed on: CLIS.md, "Usage")."""
    if not isinstance(usage, dict):
        return total
    figures = Figures()
    tokens_in = figures.count("input_tokens", usage.get("input_tokens"))
    tokens_out = figures.count("output_tokens", usage.get("output_tokens"))
    if tokens_in is None and tokens_out is None and not figures.invalid:
        return total
    if total is None:
        return figures.usage(None, tokens_in, tokens_out)
    return TokenUsage(None, _sum(total.tokens_in, tokens_in), _sum(total.tokens_out, tokens_out),
                      total.invalid + tuple(figures.invalid))


def _sum(first: int | None, second: int | None) -> int | None:
    return None if first is None and second is None else (first or 0) + (second or 0)


MCP_CALL_TIMEOUT_SEC = 3600  # above chat_tools.ask_timeout_sec as users set it; the server answers first


def mcp_args(url: str) -> list[str]:
    """The chat tools for `codex exec` (tests/fakes/clis/MCP.md): the server as `-c mcp_servers.…` overrides, the
    token read from the variable `bearer_token_env_var` names, and its tools approved: `codex exec` never asks,
    so a tool that needs approval fails ("requires approval, but approval policy is never")."""
    prefix = f"mcp_servers.{SERVER_NAME}"
    return ["-c", f"{prefix}.url={json.dumps(url)}", "-c", f"{prefix}.bearer_token_env_var={json.dumps(TOKEN_ENV)}",
            "-c", f'{prefix}.default_tools_approval_mode="approve"',
            "-c", f"{prefix}.tool_timeout_sec={MCP_CALL_TIMEOUT_SEC}"]  # `ask` waits for a person (60 s default)


def _codex_config(base_url: str, with_key: bool) -> str:
    quoted = json.dumps(base_url)  # a TOML basic string
    return "\n".join([
        "# Written by switchyard from this provider's base_url and api_key_env; edits here are replaced.",
        'model_provider = "switchyard"', "",
        "[model_providers.switchyard]", 'name = "switchyard"', f"base_url = {quoted}", 'wire_api = "responses"',
        *([f'env_key = "{KEY_VARIABLE}"'] if with_key else []), "",
    ])
