"""Gemini CLI (`gemini -o stream-json -p ""`, prompt on stdin): sessions by id, approval modes."""

from __future__ import annotations

import json
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
from orchestrator.agents.clis.endpoint import write_private
from orchestrator.chattools.names import SERVER_NAME, TOKEN_ENV, URL_ENV
from orchestrator.usage.records import TokenUsage

AUTH_EXIT = 41
UNTRUSTED_EXIT = 55
API_KEY_AUTH = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
QUIET = {"general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
         "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
"""What an unattended gemini must not do: update itself, announce updates, send usage statistics or telemetry."""


class Gemini(Preset):
    name = "gemini"
    binary = "gemini"
    own_session_ids = True
    install = "npm install -g @google/gemini-cli"
    login = ("run `gemini` once as that user and choose a login, or set GEMINI_API_KEY in the provider's env")
    login_markers = ("please set an auth method", "api key not valid", "gemini_api_key environment variable")
    refusal_markers = ("not running in a trusted directory",)
    usage_limit_markers = ("exhausted your daily quota", "exceeded your current quota", "resource_exhausted",
                           "terminalquotaerror")  # CLIS.md, "Usage limit"
    too_large_markers = ("exceeds the maximum number of tokens", "argument list too long")
    unknown_session_markers = ("no previous sessions found", "invalid session identifier")
    session_in_use_markers = ("already exists. use --resume",)
    login_exit_codes = frozenset({AUTH_EXIT})
    refusal_exit_codes = frozenset({UNTRUSTED_EXIT})

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None,
             tools: str | None = None) -> list[str]:
        approval = "auto_edit" if mode == "edit" else "default"  # headless default: asking means denied
        argv = [binary, "--output-format", "stream-json", "--skip-trust", "--approval-mode", approval]
        if settings.model:
            argv += ["--model", settings.model]
        if session is not None and session.id:
            argv += ["--resume", session.id] if session.resume else ["--session-id", session.id]
        return [*argv, *settings.extra_args, "--prompt", ""]

    def tools_env(self, folder: Path) -> dict[str, str]:
        """gemini takes MCP servers only from settings files: the chat tools go into a system-defaults file (the
        lowest layer, under the user's own settings, whose `mcpServers` it merges), URL and token as `$VAR`
        that gemini expands from its environment, `trust: true` so it does not ask (headless asking denies).
        gemini skips a file with a folder above it writable by others (such as /tmp), and this replaces any
        system defaults file of the machine for these calls (tests/fakes/clis/MCP.md)."""
        path = folder / "gemini-system-defaults.json"
        server = {"httpUrl": f"${URL_ENV}", "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"}, "trust": True}
        write_private(path, json.dumps({"mcpServers": {SERVER_NAME: server}}, indent=2) + "\n")
        return {"GEMINI_CLI_SYSTEM_DEFAULTS_PATH": str(path)}

    def endpoint_env(self, settings: ProviderSettings, key: str | None, folder: Path) -> dict[str, str]:
        """GOOGLE_GEMINI_BASE_URL alone makes gemini pick its "gateway" auth, which it then rejects (exit 41):
        a settings.json under a home of its own (GEMINI_CLI_HOME) selects the API-key auth (and turns off
        auto-update and telemetry, as the ACP recordings did: tests/fakes/acp/FINDINGS.md). Its sessions
        live there too, so that home stays the same for every call of the provider."""
        home = folder / "gemini"
        write_private(home / ".gemini" / "settings.json", json.dumps(API_KEY_AUTH | QUIET, indent=2) + "\n")
        env = {"GEMINI_CLI_HOME": str(home)}
        env |= {"GOOGLE_GEMINI_BASE_URL": settings.base_url} if settings.base_url else {}
        return env | ({"GEMINI_API_KEY": key} if key is not None else {})

    def read(self, stdout: str, stderr: str = "") -> Reading:
        reading = Reading(answer="")
        parts: list[str] = []
        for event in json_lines(stdout):
            reading.session_id = event.get("session_id") or reading.session_id
            if isinstance(event.get("stats"), dict):
                reading.usage = _usage(event["stats"])
            kind = event.get("type")
            if kind == "message" and event.get("role") == "assistant":
                parts.append(str(event.get("content", "")))
            elif kind is None and "response" in event:  # `-o json`, when a user asks for it in extra_args
                parts.append(str(event.get("response") or ""))
            error = event.get("error")
            if isinstance(error, dict) and error.get("message"):
                reading.error = str(error["message"])
            elif kind == "error" and event.get("message"):
                reading.error = str(event["message"])
        reading.answer = "".join(parts)
        return reading

    def stream_event(self, line: str) -> StreamEvent | None:
        event = json_object(line)
        kind = event.get("type") if event else None
        if event is None or kind in (None, "init", "error"):
            return None
        if kind == "tool_use":
            return StreamEvent(note=f"using {event.get('tool_name', 'a tool')}")
        if kind == "message" and event.get("role") == "assistant" and str(event.get("content", "")).strip():
            return StreamEvent(note=first_line(str(event["content"])))
        return StreamEvent()


def _usage(stats: dict[str, Any]) -> TokenUsage | None:
    """The tokens of every model the call asked (the router's too). `-o stream-json` sums them up:
    `input_tokens` (the prompt, cached part included), `output_tokens` (the answer without the thoughts),
    `total_tokens` (with the thoughts), so the output is total minus input. `-o json` lists them by model
    (`models.<m>.tokens`: prompt, candidates, thoughts). CLIS.md, "Usage"."""
    figures = Figures()
    if "input_tokens" in stats:
        tokens_in = figures.count("input_tokens", stats.get("input_tokens"))
        total = figures.count("total_tokens", stats.get("total_tokens"))
        out = None if total is None or tokens_in is None else figures.count("total_tokens - input_tokens",
                                                                            total - tokens_in)
        return figures.usage(None, tokens_in,
                             out if out is not None else figures.count("output_tokens", stats.get("output_tokens")))
    models = stats.get("models")
    tokens = {name: m["tokens"] for name, m in models.items()
              if isinstance(m, dict) and isinstance(m.get("tokens"), dict)} if isinstance(models, dict) else {}
    if not tokens:
        return None
    tokens_in = sum(figures.count(f"models.{name}.tokens.prompt", each.get("prompt")) or 0
                    for name, each in tokens.items())
    tokens_out = sum(figures.count(f"models.{name}.tokens.{field}", each.get(field)) or 0
                     for name, each in tokens.items() for field in ("candidates", "thoughts"))
    return figures.usage(None, tokens_in, tokens_out)
