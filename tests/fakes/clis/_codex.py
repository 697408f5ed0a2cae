"""Fake `codex` 0.169.0 (`codex exec` and `codex exec resume`): clap-style argv, JSONL events, as in CLIS.md."""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import _common as c

VERSION = "codex-cli 0.169.0"
UNAUTHORIZED = ("unexpected status 401 Unauthorized: Incorrect API key provided: bad. You can find your API key at "
                "https://platform.openai.com/account/api-keys., url: https://api.openai.com/v1/responses")
DNS = "stream disconnected before completion: failed to lookup address information: Name does not resolve"
TOO_LONG = ("Codex ran out of room in the model's context window. Start a new thread or clear earlier history "
            "before retrying.")
USAGE_LIMIT = "You’ve hit your usage limit. Try again later."  # a 429 `usage_limit_reached`: at once, no retry
SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
COLORS = ("always", "never", "auto")
_SHARED = {"-c": ("config", "value"), "--config": ("config", "value"), "--enable": ("enable", "value"),
           "--disable": ("disable", "value"), "--strict-config": ("strict-config", "bool"),
           "-i": ("image", "variadic"), "--image": ("image", "variadic"), "-m": ("model", "value"),
           "--model": ("model", "value"),
           "--dangerously-bypass-approvals-and-sandbox": ("dangerously-bypass-approvals-and-sandbox", "bool"),
           "--dangerously-bypass-hook-trust": ("dangerously-bypass-hook-trust", "bool"),
           "--worktree": ("worktree", "bool"), "--thread-source": ("thread-source", "value"),
           "--cyber-access-program": ("cyber-access-program", "value"),
           "--skip-git-repo-check": ("skip-git-repo-check", "bool"), "--trust": ("trust", "bool"),
           "--ephemeral": ("ephemeral", "bool"), "--ignore-user-config": ("ignore-user-config", "bool"),
           "--ignore-rules": ("ignore-rules", "bool"), "--output-schema": ("output-schema", "value"),
           "--json": ("json", "bool"), "-o": ("output-last-message", "value"),
           "--output-last-message": ("output-last-message", "value"), "-h": ("help", "bool"),
           "--help": ("help", "bool")}
EXEC_SPEC = {**_SHARED, "--oss": ("oss", "bool"), "--local-provider": ("local-provider", "value"),
             "-p": ("profile", "value"), "--profile": ("profile", "value"), "-s": ("sandbox", "value"),
             "--sandbox": ("sandbox", "value"), "--approve-for-me": ("approve-for-me", "bool"),
             "-C": ("cd", "value"), "--cd": ("cd", "value"), "--add-dir": ("add-dir", "value"),
             "--color": ("color", "value"), "-V": ("version", "bool"), "--version": ("version", "bool")}
RESUME_SPEC = {**_SHARED, "--last": ("last", "bool"), "--all": ("all", "bool")}
EXEC_USAGE = "Usage: codex exec [OPTIONS] [PROMPT]\n       codex exec [OPTIONS] <COMMAND> [ARGS]"
RESUME_USAGE = "Usage: codex exec resume [OPTIONS] [SESSION_ID] [PROMPT]"


def main(argv: list[str]) -> int:
    """Runs the fake; returns the exit code."""
    if argv[:1] in (["--version"], ["-V"]):
        c.out(VERSION + "\n")
        return 0
    if argv[:1] not in (["exec"], ["e"]):
        c.fail("fake codex: only `codex exec` is faked", 2)
    opts, positionals = _parse(argv[1:], EXEC_SPEC, EXEC_USAGE, stop_at=("resume",))
    resume_id: str | None = None
    if positionals[:1] == ["resume"]:
        resume_opts, positionals = _parse(positionals[1:], RESUME_SPEC, RESUME_USAGE)
        opts.update(resume_opts)
        if not positionals and not opts.get("last"):
            c.fail("fake codex: resume needs a SESSION_ID or --last", 2)
        resume_id = None if opts.get("last") else positionals.pop(0)
    _check_choice(opts, "sandbox", SANDBOXES, "--sandbox <SANDBOX_MODE>")
    _check_choice(opts, "color", COLORS, "--color <COLOR>")
    if opts.get("version"):
        c.out(VERSION + "\n")
        return 0
    workdir = Path(opts.get("cd") or os.getcwd())
    if not opts.get("skip-git-repo-check") and not _in_git_repo(workdir):
        c.fail("Not inside a trusted directory and --skip-git-repo-check was not specified.", 1)
    thread_id, thread_file = _thread(resume_id, bool(opts.get("last")))
    prompt = _prompt(positionals)
    c.log_call("codex", argv, prompt, thread_id=thread_id, resumed=resume_id is not None or bool(opts.get("last")))
    name, seconds = c.scenario("codex")
    return _Run(opts, thread_id, thread_file, prompt).play(name, seconds)


def _parse(argv: list[str], spec: dict[str, tuple[str, str]], usage: str,
           stop_at: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    try:
        opts, positionals, unknown = c.Options(spec).parse(argv, stop_at=stop_at)
    except c.MissingValue as missing:
        c.fail(f"error: a value is required for '{missing}' but none was supplied\n\n"
               "For more information, try '--help'.", 2)
    if unknown:
        word = unknown[0].partition("=")[0]
        c.fail(f"error: unexpected argument '{word}' found\n\n  tip: to pass '{word}' as a value, use '-- {word}'"
               f"\n\n{usage}\n\nFor more information, try '--help'.", 2)
    return opts, positionals


def _check_choice(opts: dict[str, Any], name: str, allowed: tuple[str, ...], shown: str) -> None:
    if name in opts and opts[name] not in allowed:
        c.fail(f"error: invalid value '{opts[name]}' for '{shown}'\n  [possible values: {', '.join(allowed)}]\n\n"
               "For more information, try '--help'.", 2)


def _in_git_repo(path: Path) -> bool:
    probe = subprocess.run(["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"], capture_output=True,
                           check=False)
    return probe.returncode == 0


def _thread(resume_id: str | None, last: bool) -> tuple[str, Path]:
    """A new thread (fresh id) or the stored one being resumed; an unknown id fails as real codex does."""
    threads = _codex_home() / "sessions"
    if last:
        stored = sorted(threads.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        resume_id = stored[-1].stem if stored else None
        if resume_id is None:
            c.fail("Error: thread/resume: thread/resume failed: no rollout found (code -32600)", 1)
    if resume_id is not None:
        if not (threads / f"{resume_id}.jsonl").exists():
            c.fail(f"Error: thread/resume: thread/resume failed: no rollout found for thread id {resume_id} "
                   "(code -32600)", 1)
        return resume_id, threads / f"{resume_id}.jsonl"
    thread_id = c.uuid7()
    return thread_id, threads / f"{thread_id}.jsonl"


def _codex_home() -> Path:
    """Where threads are kept: $CODEX_HOME when set (as the real CLI does), else the fakes' state dir."""
    home = os.environ.get("CODEX_HOME")
    return Path(home) if home else c.state_dir() / "codex"


def _provider() -> dict[str, Any] | None:
    """The `model_providers` entry $CODEX_HOME/config.toml selects with `model_provider` (only read when
    CODEX_HOME is set, so a developer's own ~/.codex never changes a test)."""
    home = os.environ.get("CODEX_HOME")
    config_file = Path(home) / "config.toml" if home else None
    if config_file is None or not config_file.exists():
        return None
    config = tomllib.loads(config_file.read_text(encoding="utf-8"))
    provider = config.get("model_providers", {}).get(config.get("model_provider", ""))
    if not isinstance(provider, dict) or "base_url" not in provider:
        return None
    if provider.get("wire_api", "responses") != "responses":
        c.fail(f'Error loading config.toml: `wire_api = "{provider["wire_api"]}"` is no longer supported.', 1)
    return provider


def _prompt(positionals: list[str]) -> str:
    """PROMPT or `-`/none → stdin; a PROMPT plus piped stdin gets a `<stdin>` block, as the help says."""
    argument = positionals[0] if positionals else "-"
    if argument == "-":
        text = c.read_stdin()
        if not text.strip():
            c.fail("No prompt provided via stdin.", 1)
        return text
    piped = c.read_stdin()
    return f"{argument}\n\n<stdin>\n{piped}\n</stdin>" if piped else argument


class _Run:
    """One `codex exec` turn printing JSONL (--json) or text."""

    def __init__(self, opts: dict[str, Any], thread_id: str, thread_file: Path, prompt: str):
        self.json = bool(opts.get("json"))
        self.opts = opts
        self.thread_id = thread_id
        self.thread_file = thread_file
        self.prompt = prompt
        self.items = 0

    def event(self, value: dict[str, Any]) -> None:
        """Prints one JSONL event (only with --json)."""
        if self.json:
            c.out(c.dump(value) + "\n")

    def error(self, message: str, text: str) -> None:
        """A stream error: a JSONL `error` event, or an `ERROR:` line on stderr in text mode."""
        self.event({"type": "error", "message": message})
        if not self.json:
            c.err(f"ERROR: {text}\n")

    def play(self, name: str, seconds: float) -> int:
        """Plays the scenario; returns the exit code."""
        if not self.opts.get("ephemeral"):
            self.thread_file.parent.mkdir(parents=True, exist_ok=True)
            self.thread_file.touch()
        if not self.json:
            model = self.opts.get("model", "gpt-fake")
            c.err(f"OpenAI Codex v0.169.0\n--------\nworkdir: {os.getcwd()}\nmodel: {model}"
                  f"\nprovider: openai\napproval: never\nsandbox: {self.opts.get('sandbox', 'read-only')}\n"
                  f"session id: {self.thread_id}\n--------\nuser\n{self.prompt}\n")
        self.event({"type": "thread.started", "thread_id": self.thread_id})
        self.event({"type": "turn.started"})
        if name == "hang":
            c.hang_forever()
        if name in ("network_hang", "network"):
            for attempt in range(2, 6):
                self.error(f"Reconnecting... {attempt}/5 ({DNS})", f"Reconnecting... {attempt}/5")
            while True:
                self.error("Reconnecting... waiting for network (Connection failed: error sending request)",
                           "Reconnecting... waiting for network")
                time.sleep(0.2)
        if name == "crash":
            c.fail("thread 'main' panicked at codex-rs/exec/src/lib.rs:1:1:\nfake codex crashed", 101)
        c.sleep_if_slow(name, seconds)
        if name in ("not_logged_in", "bad_key", "prompt_too_large"):
            return self.fail_turn(TOO_LONG if name == "prompt_too_large" else UNAUTHORIZED,
                                  retries=name != "prompt_too_large")
        if name == "usage_limit":
            return self.fail_turn(USAGE_LIMIT, retries=False)
        if name == "untrusted":
            c.fail("Not inside a trusted directory and --skip-git-repo-check was not specified.", 1)
        if name not in ("ok", "slow", "tool_use"):
            c.fail(f"fake codex: scenario {name!r} does not apply", 99)
        if name == "tool_use":
            self.command("bash -lc ls")
        reply = self.endpoint_reply()
        if isinstance(reply, int):
            return reply
        reply = c.answer("codex", self.prompt) if reply is None else reply
        self.item({"type": "agent_message", "text": reply}, "item.completed")
        self.event({"type": "turn.completed", "usage": {
            "input_tokens": c.FRESH_IN + c.CACHED_IN, "cached_input_tokens": c.CACHED_IN,
            "cache_write_input_tokens": 0, "output_tokens": c.OUT, "reasoning_output_tokens": c.REASONING}})
        if not self.opts.get("ephemeral"):
            c.append_turn(self.thread_file, self.prompt, reply)
        if not self.json:
            c.out(reply + "\n")
        if self.opts.get("output-last-message"):
            Path(self.opts["output-last-message"]).write_text(reply, encoding="utf-8")
        return 0

    def endpoint_reply(self) -> str | int | None:
        """With a `model_provider` in $CODEX_HOME/config.toml, the answer of its Responses API (key: the
        variable its `env_key` names; OPENAI_BASE_URL is ignored, as by the real CLI), or the exit code of
        the failed turn. None without one."""
        provider = _provider()
        if provider is None:
            return None
        env_key = provider.get("env_key")
        key = os.environ.get(env_key) if env_key else None
        if env_key and not key:
            return self.fail_turn(f"Missing environment variable: `{env_key}`.", retries=False)
        import _model  # only here: urllib costs ~20 ms of every fake's start

        try:
            return _model.responses(provider["base_url"], key, self.prompt, self.opts.get("model") or "gpt-fake")
        except _model.ModelError as exc:
            status = {401: "401 Unauthorized"}.get(exc.status or 0, str(exc.status))
            return self.fail_turn(f"unexpected status {status}: {exc}", retries=True)

    def item(self, details: dict[str, Any], kind: str, item_id: str | None = None) -> str:
        """Prints an item event; returns its id."""
        if item_id is None:
            item_id = f"item_{self.items}"
            self.items += 1
        self.event({"type": kind, "item": {"id": item_id, **details}})
        return item_id

    def command(self, command: str) -> None:
        """A command_execution item: started, then completed."""
        started = {"type": "command_execution", "command": command, "aggregated_output": "", "exit_code": None,
                   "status": "in_progress"}
        item_id = self.item(started, "item.started")
        if not self.json:
            c.err(f"exec\n{command} in {os.getcwd()}\n")
        done = {**started, "aggregated_output": "notes.txt\n", "exit_code": 0, "status": "completed"}
        self.item(done, "item.completed", item_id)

    def fail_turn(self, message: str, *, retries: bool) -> int:
        """Retries (1/5..5/5), the final error and `turn.failed`; exit code 1."""
        if retries:
            for attempt in range(1, 6):
                self.error(f"Reconnecting... {attempt}/5 ({message})", f"Reconnecting... {attempt}/5")
        self.error(message, message)
        self.event({"type": "turn.failed", "error": {"message": message}})
        return 1
