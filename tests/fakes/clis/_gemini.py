"""Fake `gemini` 0.61.0 in headless mode: yargs-style argv, json/stream-json envelopes, exit codes as in CLIS.md."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _common as c

VERSION = "0.61.0"
AUTH = ("Please set an Auth method in your {home}/.gemini/settings.json or specify one of the following environment "
        "variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA")
UNTRUSTED = ("\x1b[31mGemini CLI is not running in a trusted directory. To proceed, either use `--skip-trust`, set the "
             "`GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, or trust this directory in interactive mode. "
             "For more details, see https://geminicli.com/docs/cli/trusted-folders/"
             "#headless-and-automated-environments\x1b[0m")
NETWORK = "exception TypeError: fetch failed sending request"
BAD_KEY = "[API Error: API key not valid. Please pass a valid API key.]"
INVALID_AUTH = "Invalid auth method selected."
NO_KEY = ("When using Gemini API, you must specify the GEMINI_API_KEY environment variable.\nUpdate your environment "
          "and try again (no reload needed if using .env)!")
DAILY_QUOTA = ("[API Error: You have exhausted your daily quota on this model.]\nPlease wait and try again later. "
               "To increase your limits, request a quota increase through AI Studio, or switch to another /auth "
               "method")
QUOTA_EXIT = 173  # what 0.61.0 exited with on a 429 daily quota (TerminalQuotaError, no retry)
TOO_LONG = "[API Error: The input token count exceeds the maximum number of tokens allowed.]"
CHOICES = {"approval-mode": ("default", "auto_edit", "yolo", "plan"), "output-format": ("text", "json", "stream-json")}
_KINDS = {"debug": "bool", "model": "value", "prompt": "value", "prompt-interactive": "value", "skip-trust": "bool",
          "worktree": "optional", "sandbox": "bool", "yolo": "bool", "approval-mode": "value", "policy": "variadic",
          "admin-policy": "variadic", "acp": "bool", "experimental-acp": "bool",
          "allowed-mcp-server-names": "variadic", "allowed-tools": "variadic", "extensions": "variadic",
          "list-extensions": "bool", "resume": "value", "session-file": "value", "session-id": "value",
          "list-sessions": "bool", "delete-session": "value", "include-directories": "variadic",
          "screen-reader": "bool", "output-format": "value", "raw-output": "bool", "accept-raw-output-risk": "bool",
          "version": "bool", "help": "bool"}
_SHORT = {"-d": "debug", "-m": "model", "-p": "prompt", "-i": "prompt-interactive", "-w": "worktree",
          "-s": "sandbox", "-y": "yolo", "-e": "extensions", "-l": "list-extensions", "-r": "resume",
          "-o": "output-format", "-v": "version", "-h": "help"}
HELP = "Usage: gemini [options] [command]\n\nGemini CLI - Defaults to interactive mode. Use -p/--prompt for " \
       "non-interactive (headless) mode.\n"


def _spec() -> dict[str, tuple[str, str]]:
    spec: dict[str, tuple[str, str]] = {}
    for name, kind in _KINDS.items():
        spec[f"--{name}"] = (name, kind)
        camel = name.split("-")[0] + "".join(part.title() for part in name.split("-")[1:])
        spec[f"--{camel}"] = (name, kind)
    spec.update({short: (name, _KINDS[name]) for short, name in _SHORT.items()})
    return spec


def main(argv: list[str]) -> int:
    """Runs the fake; returns the exit code."""
    try:
        opts, _positionals, unknown = c.Options(_spec()).parse(argv)
    except c.MissingValue as missing:
        c.fail(f"Not enough arguments following: {str(missing).lstrip('-')}\n{HELP}", 1)
    if unknown:
        names = [word.lstrip("-").partition("=")[0] for word in unknown]
        label = "Unknown argument" if len(names) == 1 else "Unknown arguments"
        c.fail(f"{label}: {', '.join(names)}\n{HELP}", 1)
    for name, allowed in CHOICES.items():
        if name in opts and opts[name] not in allowed:
            shown = ", ".join(f'"{value}"' for value in allowed)
            c.fail(f'Invalid values:\n  Argument: {name}, Given: "{opts[name]}", Choices: {shown}\n{HELP}', 1)
    if opts.get("version"):
        c.out(VERSION + "\n")
        return 0
    fmt = opts.get("output-format", "text")
    session_id, chat = _session(opts)
    stdin = c.read_stdin()
    flag = opts.get("prompt")
    prompt = f"{stdin}\n\n{flag}" if stdin and flag else (stdin or flag or "")
    c.log_call("gemini", argv, prompt, session_id=session_id, model_input=c.model_input(chat, prompt))
    name, seconds = c.scenario("gemini")
    if name == "not_logged_in":
        _error(fmt, session_id, AUTH.format(home=Path.home()), 41)
    _check_endpoint_auth(fmt, session_id)
    trusted = opts.get("skip-trust") or os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true"
    if name == "untrusted" or not trusted:
        c.fail(UNTRUSTED + "\n", 55)
    return _run(fmt, name, seconds, prompt, session_id, chat, opts)


def _project() -> Path:
    """Where this cwd's sessions are kept: under $GEMINI_CLI_HOME/.gemini when set (as the real CLI does),
    else in the fakes' state dir."""
    home = os.environ.get("GEMINI_CLI_HOME")
    root = Path(home) / ".gemini" if home else c.state_dir() / "gemini"
    return root / "tmp" / c.cwd_slug(os.getcwd()) / "chats"


def _selected_auth() -> str | None:
    """`security.auth.selectedType` of $GEMINI_CLI_HOME/.gemini/settings.json (only read when GEMINI_CLI_HOME
    is set, so a developer's own ~/.gemini never changes a test)."""
    home = os.environ.get("GEMINI_CLI_HOME")
    settings = Path(home) / ".gemini" / "settings.json" if home else None
    if settings is None or not settings.exists():
        return None
    selected = json.loads(settings.read_text(encoding="utf-8")).get("security", {}).get("auth", {})
    return selected.get("selectedType") if isinstance(selected, dict) else None


def _check_endpoint_auth(fmt: str, session_id: str) -> None:
    """With GOOGLE_GEMINI_BASE_URL the auth type from the environment is "gateway", which the CLI rejects
    (exit 41) unless settings.json selects gemini-api-key, which then needs GEMINI_API_KEY."""
    if not os.environ.get("GOOGLE_GEMINI_BASE_URL"):
        return
    selected = _selected_auth()
    problem = INVALID_AUTH if selected != "gemini-api-key" else None if os.environ.get("GEMINI_API_KEY") else NO_KEY
    if problem is None:
        return
    if fmt == "json":
        _error(fmt, session_id, problem, 41)
    c.fail(problem, 41)


def _endpoint_reply(fmt: str, session_id: str, prompt: str, model: str) -> str | None:
    """With GOOGLE_GEMINI_BASE_URL, the answer of that API (key: GEMINI_API_KEY); None without it."""
    base_url = os.environ.get("GOOGLE_GEMINI_BASE_URL")
    if not base_url:
        return None
    import _model  # only here: urllib costs ~20 ms of every fake's start

    try:
        return _model.gemini(base_url, os.environ.get("GEMINI_API_KEY"), prompt, model)
    except _model.ModelError as exc:
        _error(fmt, session_id, f"[API Error: {exc}]", 1)
        raise


def _session(opts: dict[str, Any]) -> tuple[str, Path]:
    """--session-id (new, must not exist) or --resume (latest | 1-based index | UUID); rc 42 on errors."""
    chats = _project()
    stored = sorted((p for p in chats.glob("*.jsonl") if _answered(p)), key=lambda p: p.stat().st_mtime) \
        if chats.exists() else []  # a session without a model reply is not listed, so it cannot be resumed
    wanted = opts.get("session-id")
    resume = opts.get("resume")
    if wanted is not None and resume is None:
        if (chats / f"{wanted}.jsonl").exists():
            c.fail(f'Error starting session: Session ID "{wanted}" already exists. Use --resume to resume it, or '
                   "provide a different ID.", 42)
        return wanted, chats / f"{wanted}.jsonl"
    if resume is None:
        new_id = str(uuid.uuid4())
        return new_id, chats / f"{new_id}.jsonl"
    if not stored:
        if resume == "latest":
            new_id = str(uuid.uuid4())
            return new_id, chats / f"{new_id}.jsonl"
        c.fail("Error resuming session: No previous sessions found for this project.", 42)
    if resume == "latest":
        return stored[-1].stem, stored[-1]
    if (chats / f"{resume}.jsonl") in stored:
        return resume, chats / f"{resume}.jsonl"
    if resume.isdigit() and 0 < int(resume) <= len(stored):
        return stored[int(resume) - 1].stem, stored[int(resume) - 1]
    c.fail(f'Error resuming session: Invalid session identifier "{resume}".\n  Searched for sessions in {chats}.\n'
           "  Use --list-sessions to see available sessions, then use --resume {number}, --resume {uuid}, or "
           "--resume latest.", 42)
    raise AssertionError("unreachable")


def _answered(chat: Path) -> bool:
    return any(turn.get("answer") is not None for turn in c.read_turns(chat))


def _error(fmt: str, session_id: str, message: str, code: int, models: tuple[str, ...] = ()) -> None:
    """The error envelope: pretty JSON on stderr (json), a result event (stream-json) or plain text; exits."""
    if fmt == "json":
        body = {"session_id": session_id, "error": {"type": "Error", "message": message, "code": code}}
        c.fail(json.dumps(body, indent=2, ensure_ascii=False), code)
    if fmt == "stream-json":
        _event("result", status="error", error={"type": "unknown" if models else "Error", "message": message},
               stats=_stats(models, spent=False))
        raise SystemExit(code)
    c.fail(message, code)


def _run(fmt: str, name: str, seconds: float, prompt: str, session_id: str, chat: Path,
         opts: dict[str, Any]) -> int:
    if fmt == "stream-json":
        _event("init", session_id=session_id, model=opts.get("model", "gemini-fake"))
        _event("message", role="user", content=prompt)
    if not chat.exists():  # the session file is written before the model is called (and stays if that fails)
        chat.parent.mkdir(parents=True, exist_ok=True)
        chat.write_text(c.dump({"sessionId": session_id, "kind": "main"}) + "\n", encoding="utf-8")
    if name == "hang":
        c.hang_forever()
    if name in ("network_hang", "network"):
        for attempt in range(1, 10_000):
            c.err(f"Attempt {attempt} failed. Retrying with backoff... Error: {NETWORK}\n")
            if name == "network" and attempt == 9:
                c.append_turn(chat, prompt, None)
                _error(fmt, session_id, NETWORK, 1)
            time.sleep(0.2 if name == "network_hang" else 0)
    if name == "crash":
        c.fail("FATAL ERROR: fake gemini crashed", 134)
    c.sleep_if_slow(name, seconds)
    if name == "usage_limit":
        c.append_turn(chat, prompt, None)
        c.err("[Routing] NumericalClassifierStrategy failed: Error: Failed to generate content: You have exhausted "
              "your daily quota on this model.\nError when talking to Gemini API Full report available at: "
              "/tmp/gemini-client-error.json TerminalQuotaError: You have exhausted your daily quota on this model.\n")
        _error(fmt, session_id, DAILY_QUOTA, QUOTA_EXIT, _models(opts))
    if name in ("bad_key", "prompt_too_large"):
        c.append_turn(chat, prompt, None)
        _error(fmt, session_id, BAD_KEY if name == "bad_key" else TOO_LONG, 1)
    if name not in ("ok", "slow", "tool_use"):
        c.fail(f"fake gemini: scenario {name!r} does not apply", 99)
    reply = _endpoint_reply(fmt, session_id, prompt, opts.get("model") or "gemini-fake")
    reply = c.answer("gemini", prompt) if reply is None else reply
    if name == "tool_use" and fmt == "stream-json":
        _event("tool_use", tool_name="read_file", tool_id="read_file-1", parameters={"file_path": "notes.txt"})
        _event("tool_result", tool_id="read_file-1", status="success", output="")
    c.append_turn(chat, prompt, reply)
    if fmt == "json":
        c.out(json.dumps({"session_id": session_id, "response": reply, "stats": _json_stats(_models(opts))},
                         indent=2, ensure_ascii=False) + "\n")
    elif fmt == "stream-json":
        _event("message", role="assistant", content=reply, delta=True)
        _event("result", status="success", stats=_stats(_models(opts)))
    else:
        c.out(reply + "\n")
    return 0


def _event(kind: str, **fields: Any) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    c.out(c.dump({"type": kind, "timestamp": stamp, **fields}) + "\n")


def _models(opts: dict[str, Any]) -> tuple[str, ...]:
    """The models a turn asks: without `-m`, the router's (flash-lite) and the one it picks."""
    return (opts["model"],) if opts.get("model") else ("gemini-3.5-flash-lite", "gemini-3.8-flash")


def _tokens() -> dict[str, int]:
    """One model call's tokens, as gemini keeps them (`prompt` includes `cached`; `total` the thoughts)."""
    prompt, candidates = c.FRESH_IN + c.CACHED_IN, c.OUT - c.REASONING
    return {"input": c.FRESH_IN, "prompt": prompt, "candidates": candidates, "total": prompt + c.OUT,
            "cached": c.CACHED_IN, "thoughts": c.REASONING, "tool": 0}


def _stats(models: tuple[str, ...], *, spent: bool = True) -> dict[str, Any]:
    """`-o stream-json`'s result stats: each model's tokens and their sums (no thoughts field); all 0 when
    no call was answered."""
    t = _tokens() if spent else dict.fromkeys(_tokens(), 0)
    each = {"total_tokens": t["total"], "input_tokens": t["prompt"], "output_tokens": t["candidates"],
            "cached": t["cached"], "input": t["input"]}
    sums = {key: value * len(models) for key, value in each.items()}
    return {**sums, "duration_ms": 5, "tool_calls": 0, "models": dict.fromkeys(models, each)}


def _json_stats(models: tuple[str, ...]) -> dict[str, Any]:
    """`-o json`'s stats: per model its API calls and tokens (thoughts included), then the tools."""
    api = {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 30, "errorsByType": {}}
    return {"models": {model: {"api": api, "tokens": _tokens()} for model in models},
            "tools": {"totalCalls": 0, "totalSuccess": 0, "totalFail": 0, "totalDurationMs": 0}}
