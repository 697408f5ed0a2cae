"""Shared plumbing of the fake agent CLIs: state dir, call log, scenario and answer from the environment.

Environment read by every fake (see CLIS.md for what the real CLIs do):
- FAKE_CLI_STATE: directory for sessions and `calls.jsonl` (one line per call: cli, argv, stdin, cwd, env).
- FAKE_CLI_SCENARIO_<CLI> (e.g. FAKE_CLI_SCENARIO_CLAUDE), else FAKE_CLI_SCENARIO: ok (default) | not_logged_in |
  bad_key | untrusted | network | network_hang | hang | crash | slow:<seconds> | tool_use | prompt_too_large |
  overloaded, token_refreshed (claude) | not_running (ollama) | model_missing (ollama). A comma-separated list
  plays one per call of that CLI, the last one for every later call (`network,ok`: the first call fails, the
  retry works).
- FAKE_CLI_ANSWER_<CLI>, else FAKE_CLI_ANSWER: the answer text; default `echo: <last non-empty prompt line>`.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

SCENARIOS = ("ok", "not_logged_in", "bad_key", "untrusted", "network", "network_hang", "hang", "crash", "slow",
             "tool_use", "prompt_too_large", "not_running", "model_missing", "overloaded",
             "token_refreshed", "stream", "usage_limit")
FRESH_IN, CACHE_WRITE, CACHED_IN, OUT, REASONING = 1200, 300, 4000, 70, 20
"""The tokens each fake reports for a turn, spelled as its real CLI prints them: the numbers the real CLIs
printed for the fake model server's default answer (tests/fakes/model_server.py `Usage`; CLIS.md, "Usage")."""


def state_dir() -> Path:
    """The fakes' state directory (FAKE_CLI_STATE, else ~/.fake-cli-state), created."""
    root = Path(os.environ.get("FAKE_CLI_STATE") or Path.home() / ".fake-cli-state")
    root.mkdir(parents=True, exist_ok=True)
    return root


def setting(cli: str, name: str) -> str | None:
    """FAKE_CLI_<NAME>_<CLI> if set, else FAKE_CLI_<NAME>."""
    specific = os.environ.get(f"FAKE_CLI_{name}_{cli.upper()}")
    return specific if specific is not None else os.environ.get(f"FAKE_CLI_{name}")


def scenario(cli: str) -> tuple[str, float]:
    """The scenario for this CLI and its number (slow:<sec>); unknown names fail loudly. Of a list
    (`network,ok`), this call's entry: each call of the CLI takes the next, the last one stays."""
    raw = setting(cli, "SCENARIO") or "ok"
    if "," in raw:
        plays = raw.split(",")
        raw = plays[min(_next_play(cli), len(plays) - 1)].strip()
    name, _, arg = raw.partition(":")
    if name not in SCENARIOS:
        fail(f"fake {cli}: unknown FAKE_CLI_SCENARIO {raw!r}", 99)
    return name, float(arg or 0)


def _next_play(cli: str) -> int:
    """How many calls of this CLI played a scenario list before this one (counted in the state dir)."""
    with (state_dir() / f"{cli}.plays").open("a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        played = len(handle.read())
        handle.write(".")
    return played


def answer(cli: str, prompt: str) -> str:
    """The answer text: FAKE_CLI_ANSWER[_<CLI>] or an echo of the prompt's last non-empty line."""
    configured = setting(cli, "ANSWER")
    if configured is not None:
        return configured
    lines = [line for line in prompt.splitlines() if line.strip()]
    return f"echo: {lines[-1].strip() if lines else ''}"


def read_stdin() -> str:
    """All of stdin when it is not a terminal, else empty."""
    if sys.stdin is None or sys.stdin.isatty():
        return ""
    return sys.stdin.read()


def log_call(cli: str, argv: list[str], stdin: str, **extra: Any) -> None:
    """Appends one call record to FAKE_CLI_STATE/calls.jsonl (locked, so parallel calls do not interleave)."""
    record = {"cli": cli, "argv": argv, "stdin": stdin, "cwd": os.getcwd(), "env": dict(os.environ),
              "env_keys": sorted(os.environ), "pid": os.getpid(), "time": time.time(), **extra}
    with (state_dir() / "calls.jsonl").open("a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(json.dumps(record) + "\n")


def out(text: str) -> None:
    """Writes to stdout and flushes (streams are read line by line)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    """Writes to stderr and flushes."""
    sys.stderr.write(text)
    sys.stderr.flush()


def fail(message: str, code: int, *, stream: str = "stderr") -> None:
    """Prints `message` (plus newline) on the stream and exits with `code`."""
    (out if stream == "stdout" else err)(message + "\n")
    raise SystemExit(code)


def hang_forever() -> None:
    """Blocks until killed."""
    while True:
        time.sleep(3600)


def cwd_slug(path: str) -> str:
    """claude's project folder name for a cwd: every '/' and '.' becomes '-'."""
    return path.replace("/", "-").replace(".", "-")


def is_uuid(value: str) -> bool:
    """Whether `value` parses as a UUID."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def uuid7() -> str:
    """A time-ordered UUID like codex's thread ids."""
    millis = time.time_ns() // 1_000_000
    raw = (millis << 80) | (0x7 << 76) | (uuid.uuid4().int & ((1 << 76) - 1))
    raw = (raw & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=raw))


def read_turns(path: Path) -> list[dict[str, Any]]:
    """The turns stored in a session file (JSONL)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_turn(path: Path, prompt: str, reply: str | None) -> int:
    """Stores one turn in a session file (`reply` None: the model call failed) and returns how many turns it
    now holds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"prompt": prompt, "answer": reply}) + "\n")
    return len(read_turns(path))


def model_input(path: Path, prompt: str) -> list[str]:
    """The user messages the model receives when `prompt` is sent in the session stored at `path`: every
    prompt the session holds (answered or not), then `prompt`."""
    return [str(turn.get("prompt", "")) for turn in read_turns(path) if "prompt" in turn] + [prompt]


def sleep_if_slow(name: str, seconds: float) -> None:
    """The `slow:<sec>` scenario: waits, then behaves as `ok`."""
    if name == "slow":
        time.sleep(seconds)


class Options:
    """A small option parser: `spec` maps every spelling (e.g. "-m", "--model") to (canonical name, kind).

    Kinds: "bool", "value" (next word), "optional" (next word unless it starts with "-"),
    "variadic" (following words up to the next one starting with "-"). `--name=value` is accepted.
    """

    def __init__(self, spec: dict[str, tuple[str, str]]):
        self.spec = spec

    def parse(self, argv: list[str], stop_at: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str], list[str]]:
        """Returns (options, positionals, unknown options); parsing stops at the first positional in `stop_at`."""
        opts: dict[str, Any] = {}
        positionals: list[str] = []
        unknown: list[str] = []
        index = 0
        while index < len(argv):
            word = argv[index]
            index += 1
            if word == "--":
                positionals.extend(argv[index:])
                break
            if not word.startswith("-") or word == "-":
                positionals.append(word)
                if word in stop_at and len(positionals) == 1:
                    positionals.extend(argv[index:])
                    break
                continue
            name, has_inline, inline = word.partition("=")
            if name not in self.spec:
                unknown.append(word)
                continue
            canonical, kind = self.spec[name]
            if kind == "bool":
                opts[canonical] = True
            elif has_inline:
                opts[canonical] = [inline] if kind == "variadic" else inline
            elif kind == "value":
                if index >= len(argv):
                    raise MissingValue(name)
                opts[canonical] = argv[index]
                index += 1
            elif kind == "optional":
                if index < len(argv) and not argv[index].startswith("-"):
                    opts[canonical] = argv[index]
                    index += 1
                else:
                    opts[canonical] = True
            else:
                values: list[str] = []
                while index < len(argv) and not argv[index].startswith("-"):
                    values.append(argv[index])
                    index += 1
                opts[canonical] = values
        return opts, positionals, unknown


class MissingValue(Exception):
    """An option that takes a value came last."""


def dump(value: Any) -> str:
    """Compact JSON as the real CLIs print it (no spaces after separators, UTF-8 kept; a lone surrogate
    escaped, `\\ud800`, as JavaScript's JSON.stringify writes one)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return re.sub("[\ud800-\udfff]", lambda found: f"\\u{ord(found.group()):04x}", text)
