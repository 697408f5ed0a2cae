"""Fake `claude` 2.1.197 in print mode: argv as commander parses it, envelopes and failures as in CLIS.md."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c

VERSION = "2.1.197 (Claude Code)"
NOT_LOGGED_IN = "Not logged in · Please run /login"
BAD_KEY = "Invalid API key · Fix external API key"
NETWORK = "API Error: Unable to connect to API (ConnectionRefused)"
USAGE_LIMIT = ("API Error: Request rejected (429) · This request would exceed your organization's rate limit. "
               "Please try again later.")
COST_USD = 0.011624999999999998  # what claude 2.1.197 priced c.FRESH_IN … c.OUT at (claude-opus-4-8)
TOO_LONG = 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}'
# (status, error, delay after each attempt) of the `api_retry` lines before the outcome, as observed: a 401 is
# retried ten times over ~3 minutes before "Invalid API key"; a 529 until the API answers.
API_RETRIES = {"bad_key": (401, "authentication_failed", (0.5, 1.1, 2.2, 4.1, 9.0, 17.0, 34.0, 39.7, 36.4, 35.0)),
               "overloaded": (529, "overloaded", (1.0, 1.5)),
               # a claude.ai login whose access token the API refused: claude refreshes it, then answers
               "token_refreshed": (401, "authentication_failed", (0.5,)),
               # the real claude waits ~5 min over its 10 retries of a 429 (CLIS.md, "Usage limit"); 0.3 s here
               "usage_limit": (429, "rate_limit", (0.03,) * 10)}
CHOICES = {
    "output-format": ("text", "json", "stream-json"),
    "input-format": ("text", "stream-json"),
    "permission-mode": ("acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan"),
}
_VALUE = ("agent", "agents", "append-system-prompt", "debug-file", "effort", "fallback-model", "input-format",
          "json-schema", "max-budget-usd", "model", "output-format", "permission-mode", "plugin-dir", "plugin-url",
          "remote-control-session-name-prefix", "session-id", "setting-sources", "settings", "system-prompt")
_VARIADIC = ("add-dir", "allowedTools", "betas", "disallowedTools", "file", "mcp-config", "tools")
_OPTIONAL = ("debug", "from-pr", "prompt-suggestions", "remote-control", "resume", "worktree", "tmux")
_BOOL = ("allow-dangerously-skip-permissions", "ax-screen-reader", "background", "bare", "brief", "chrome",
         "continue", "dangerously-skip-permissions", "disable-slash-commands",
         "exclude-dynamic-system-prompt-sections", "fork-session", "help", "ide", "include-hook-events",
         "include-partial-messages", "no-chrome", "no-session-persistence", "print", "replay-user-messages",
         "safe-mode", "strict-mcp-config", "verbose", "version")
_SHORT = {"-c": "continue", "-d": "debug", "-h": "help", "-n": "name", "-p": "print", "-r": "resume",
          "-v": "version", "-w": "worktree"}
_ALIASES = {"--allowed-tools": "allowedTools", "--disallowed-tools": "disallowedTools", "--bg": "background",
            "--name": "name"}


def _spec() -> dict[str, tuple[str, str]]:
    kinds = {**{n: "value" for n in (*_VALUE, "name")}, **{n: "variadic" for n in _VARIADIC},
             **{n: "optional" for n in _OPTIONAL}, **{n: "bool" for n in _BOOL}}
    spec = {f"--{name}": (name, kind) for name, kind in kinds.items()}
    spec.update({alias: (name, kinds[name]) for alias, name in {**_SHORT, **_ALIASES}.items()})
    return spec


def main(argv: list[str]) -> int:
    """Runs the fake; returns the exit code."""
    try:
        opts, positionals, unknown = c.Options(_spec()).parse(argv)
    except c.MissingValue as missing:
        c.fail(f"error: option '{missing}' argument missing", 1)
    if unknown:
        c.fail(f"error: unknown option '{unknown[0]}'", 1)
    for name, allowed in CHOICES.items():
        if name in opts and opts[name] not in allowed:
            shown = ", ".join(allowed)
            c.fail(f"error: option '--{name} <{name.split('-')[0]}>' argument '{opts[name]}' is invalid. "
                   f"Allowed choices are {shown}.", 1)
    if opts.get("version"):
        c.out(VERSION + "\n")
        return 0
    if not opts.get("print"):
        c.fail("fake claude: only print mode (-p) is faked", 1)
    fmt = opts.get("output-format", "text")
    if fmt == "stream-json" and not opts.get("verbose"):
        c.fail("Error: When using --print, --output-format=stream-json requires --verbose", 1)
    if opts.get("include-partial-messages") and fmt != "stream-json":
        c.fail("Error: --include-partial-messages requires --print and --output-format=stream-json.", 1)
    session_id, session_file = _session(opts)
    prompt = positionals[0] if positionals else c.read_stdin()
    if not prompt:
        c.fail("Error: Input must be provided either through stdin or as a prompt argument when using --print", 1)
    held = session_file if not opts.get("no-session-persistence") else Path(os.devnull)
    c.log_call("claude", argv, prompt, session_id=session_id, model_input=c.model_input(held, prompt))
    name, seconds = c.scenario("claude")
    return _run(opts, fmt, name, seconds, prompt, session_id, session_file)


def _session(opts: dict[str, Any]) -> tuple[str, Path]:
    """Checks --session-id / --resume against the stored sessions of this cwd; returns (id, file)."""
    config = os.environ.get("CLAUDE_CONFIG_DIR")  # as the real claude: its config folder holds projects/
    project = (Path(config) if config else c.state_dir() / "claude") / "projects" / c.cwd_slug(os.getcwd())
    wanted = opts.get("session-id")
    resume = opts.get("resume")
    if wanted is not None and not c.is_uuid(wanted):
        c.fail("Error: Invalid session ID. Must be a valid UUID.", 1)
    if wanted is not None and (resume or opts.get("continue")) and not opts.get("fork-session"):
        c.fail("Error: --session-id can only be used with --continue or --resume if --fork-session is also "
               "specified.", 1)
    if isinstance(resume, str):
        if not (project / f"{resume}.jsonl").exists():
            c.fail(f"No conversation found with session ID: {resume}", 1)
        if opts.get("fork-session"):
            new_id = wanted or str(uuid.uuid4())
            (project / f"{new_id}.jsonl").write_bytes((project / f"{resume}.jsonl").read_bytes())
            return new_id, project / f"{new_id}.jsonl"
        return resume, project / f"{resume}.jsonl"
    if wanted is not None and (project / f"{wanted}.jsonl").exists():
        c.fail(f"Error: Session ID {wanted} is already in use.", 1)
    session_id = wanted or str(uuid.uuid4())
    return session_id, project / f"{session_id}.jsonl"


def _run(opts: dict[str, Any], fmt: str, name: str, seconds: float, prompt: str, session_id: str,
         session_file: Path) -> int:
    """Plays the scenario."""
    stream = fmt == "stream-json"
    array = _init(opts, session_id) if fmt == "json" and opts.get("verbose") else None
    persist = not opts.get("no-session-persistence")
    if stream:
        c.out(c.dump(_init(opts, session_id)) + "\n")
    if name == "hang":
        c.hang_forever()
    if name == "network_hang":
        for attempt in range(1, 10_000):
            if stream:
                c.out(c.dump({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10,
                                  "retry_delay_ms": 500.0, "error_status": None, "error": "unknown",
                                  "session_id": session_id, "uuid": str(uuid.uuid4())}) + "\n")
            time.sleep(0.2)
    if name == "crash":
        c.fail("FATAL ERROR: fake claude crashed", 134)
    c.sleep_if_slow(name, seconds)
    if persist:  # the prompt is in the session before the model answers (and stays there when it fails)
        session_file.parent.mkdir(parents=True, exist_ok=True)
        session_file.touch()
    if stream and name in API_RETRIES:
        _api_retries(session_id, *API_RETRIES[name])
    failures = {"not_logged_in": (NOT_LOGGED_IN, None, "authentication_failed"),
                "bad_key": (BAD_KEY, 401, "authentication_failed"), "network": (NETWORK, None, "server_error"),
                "prompt_too_large": (TOO_LONG, 400, "invalid_request")}
    if name in failures:
        text, status, error = failures[name]
        if persist:
            c.append_turn(session_file, prompt, None)
        return _finish(fmt, session_id, text, is_error=True, api_status=status, error=error, verbose_init=array)
    if name == "usage_limit":
        return _finish(fmt, session_id, USAGE_LIMIT, is_error=True, api_status=429, error="rate_limit",
                       verbose_init=array)
    if name not in ("ok", "slow", "tool_use", "untrusted", "overloaded", "token_refreshed", "stream"):
        c.fail(f"fake claude: scenario {name!r} does not apply", 99)
    partials = _Partials(session_id, bool(opts.get("include-partial-messages")))
    reply = _endpoint_reply(opts, fmt, session_id, prompt, array, partials)
    if reply is None:
        reply = c.answer("claude", prompt)
        partials.play(reply, seconds if name == "stream" else 0.0)
    denials: list[dict[str, Any]] = []
    if name in ("tool_use", "untrusted") and stream:
        c.out(c.dump(_assistant(session_id, [{"type": "tool_use", "id": "toolu_01fake", "name": "Edit",
                                                  "input": {"file_path": "notes.txt", "old_string": "",
                                                            "new_string": "fake"}}])) + "\n")
        result = "Claude requested permissions to edit notes.txt" if name == "untrusted" else "ok"
        c.out(c.dump({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01fake", "content": result,
             "is_error": name == "untrusted"}]}, "parent_tool_use_id": None, "session_id": session_id,
            "uuid": str(uuid.uuid4())}) + "\n")
        if name == "tool_use":
            time.sleep(seconds)  # `tool_use:<sec>`: the tool takes this long (progress notes show it)
    if name == "untrusted":
        denials = [{"tool_name": "Edit", "tool_use_id": "toolu_01fake", "tool_input": {"file_path": "notes.txt"}}]
    if persist:
        c.append_turn(session_file, prompt, reply)
    return _finish(fmt, session_id, reply, denials=denials, verbose_init=array, partials=partials)


class _Partials:
    """`--include-partial-messages`: the model's stream as claude relays it, one `stream_event` line per SSE
    event (CLIS.md, "Partial messages"): the text deltas as they arrive, the block's and message's end after
    the `assistant` line."""

    CHUNKS = 4  # the fake's own answer (no model endpoint) comes in this many deltas

    def __init__(self, session_id: str, enabled: bool):
        self.session_id = session_id
        self.enabled = enabled
        self.started = False

    def _event(self, event: dict[str, Any], **extra: Any) -> None:
        c.out(c.dump({"type": "stream_event", "event": event, "session_id": self.session_id,
                      "parent_tool_use_id": None, "uuid": str(uuid.uuid4()), **extra}) + "\n")

    def delta(self, text: str) -> None:
        """One text delta (the message's start before the first)."""
        if not self.enabled:
            return
        if not self.started:
            self.started = True
            c.out(c.dump({"type": "system", "subtype": "status", "status": "requesting", "uuid": str(uuid.uuid4()),
                          "session_id": self.session_id}) + "\n")
            message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                       "model": "claude-fake", "stop_reason": None, "stop_sequence": None,
                       "usage": _usage(1), "content": []}
            self._event({"type": "message_start", "message": message}, ttft_ms=10)
            self._event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        self._event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})

    def play(self, reply: str, delay: float) -> None:
        """The fake's own answer in CHUNKS deltas, `delay` seconds apart (scenario `stream:<sec>`)."""
        size = max(1, -(-len(reply) // self.CHUNKS))
        for number, start in enumerate(range(0, len(reply), size)):
            if number and delay:
                time.sleep(delay)
            self.delta(reply[start:start + size])

    def end(self) -> None:
        """The block's and the message's end (printed after the `assistant` line, as claude does)."""
        if self.started:
            self._event({"type": "content_block_stop", "index": 0})
            self._event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                         "usage": _usage(c.OUT)})
            self._event({"type": "message_stop"})


def _api_retries(session_id: str, status: int, error: str, delays: tuple[float, ...]) -> None:
    """The `api_retry` lines claude prints while it retries a failed API call, each after its delay."""
    for attempt, delay in enumerate(delays, 1):
        c.out(c.dump({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10,
                      "retry_delay_ms": delay * 1000, "error_status": status, "error": error,
                      "session_id": session_id, "uuid": str(uuid.uuid4())}) + "\n")
        time.sleep(delay)
def _endpoint_reply(opts: dict[str, Any], fmt: str, session_id: str, prompt: str,
                    array: dict[str, Any] | None, partials: _Partials | None = None) -> str | None:
    """With ANTHROPIC_BASE_URL, the answer of that Messages API (key: ANTHROPIC_API_KEY), as the real CLI
    gets it; a failure ends the run as the real one does. None without it."""
    base_url = os.environ.get("ANTHROPIC_BASE_URL")
    if not base_url:
        return None
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise SystemExit(_finish(fmt, session_id, NOT_LOGGED_IN, is_error=True, error="authentication_failed",
                                 verbose_init=array))
    import _model  # only here: urllib costs ~20 ms of every fake's start

    try:
        return _model.anthropic(base_url, key, prompt, opts.get("model") or "claude-fake",
                                partials.delta if partials is not None else None)
    except _model.ModelError as exc:
        text = BAD_KEY if exc.status == 401 else f"API Error: {exc}"
        raise SystemExit(_finish(fmt, session_id, text, is_error=True, api_status=exc.status,
                                 error="authentication_failed" if exc.status == 401 else "server_error",
                                 verbose_init=array)) from exc


def _finish(fmt: str, session_id: str, text: str, *, is_error: bool = False, api_status: int | None = None,
            error: str | None = None, denials: list[dict[str, Any]] | None = None,
            verbose_init: dict[str, Any] | None = None, partials: _Partials | None = None) -> int:
    """Prints the assistant message and result in the chosen format; returns the exit code.

    `--output-format json --verbose` prints one JSON array of every message, as the real CLI does.
    """
    code = 1 if is_error else 0
    if fmt == "text":
        c.out(text + "\n")
        return code
    result = {"type": "result", "subtype": "success", "is_error": is_error, "api_error_status": api_status,
              "duration_ms": 12, "duration_api_ms": 0 if is_error else 10, "num_turns": 1, "result": text,
              "stop_reason": "stop_sequence" if is_error else "end_turn", "session_id": session_id,
              "total_cost_usd": 0 if is_error else COST_USD, "usage": _usage(0 if is_error else c.OUT, is_error),
              "modelUsage": {} if is_error else _model_usage(),
              "permission_denials": denials or [], "terminal_reason": "completed", "uuid": str(uuid.uuid4())}
    message = _assistant(session_id, [{"type": "text", "text": text}])
    if error:
        message["error"] = error
    if fmt == "stream-json":
        c.out(c.dump(message) + "\n")
        if partials is not None:
            partials.end()
    if fmt == "json" and verbose_init is not None:
        c.out(c.dump([verbose_init, message, result]) + "\n")
    else:
        c.out(c.dump(result) + "\n")
    return code


def _usage(output: int, empty: bool = False) -> dict[str, Any]:
    """The `usage` of a message or result line (the Messages API's counts, cumulative output)."""
    fresh, write, cached = (0, 0, 0) if empty else (c.FRESH_IN, c.CACHE_WRITE, c.CACHED_IN)
    return {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": cached,
            "output_tokens": output, "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            "service_tier": "standard", "cache_creation": {"ephemeral_1h_input_tokens": 0,
                                                           "ephemeral_5m_input_tokens": 0},
            "inference_geo": "", "iterations": [], "speed": "standard"}


def _model_usage() -> dict[str, Any]:
    return {"claude-opus-4-8[1m]": {"inputTokens": c.FRESH_IN, "outputTokens": c.OUT,
                                    "cacheReadInputTokens": c.CACHED_IN, "cacheCreationInputTokens": c.CACHE_WRITE,
                                    "webSearchRequests": 0, "costUSD": COST_USD, "contextWindow": 1000000,
                                    "maxOutputTokens": 64000}}


def _init(opts: dict[str, Any], session_id: str) -> dict[str, Any]:
    tools = _tool_list(opts.get("tools"))
    return {"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": session_id, "tools": tools,
            "mcp_servers": [], "model": opts.get("model", "claude-opus-4-8[1m]"),
            "permissionMode": opts.get("permission-mode", "default"),
            "apiKeySource": "ANTHROPIC_API_KEY" if os.environ.get("ANTHROPIC_API_KEY") else "none",
            "claude_code_version": VERSION.split()[0], "output_style": "default", "uuid": str(uuid.uuid4())}


def _tool_list(tools: list[str] | None) -> list[str]:
    if tools is None or tools == ["default"]:
        return ["Task", "Bash", "Edit", "Glob", "Grep", "Read", "WebFetch", "WebSearch", "Write"]
    return [name for word in tools for name in word.replace(",", " ").split()]


def _assistant(session_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": f"msg_{uuid.uuid4().hex[:20]}", "model": "claude-fake",
                                             "role": "assistant", "type": "message", "content": content,
                                             "usage": _usage(1)},
            "parent_tool_use_id": None, "session_id": session_id, "uuid": str(uuid.uuid4())}
