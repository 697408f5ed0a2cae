"""What every agent-CLI preset shares: the session a call continues, what was read, failure texts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from gateway.settings import ProviderSettings
from orchestrator.usage.records import Invalid, TokenUsage, is_amount, raw_text

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
FAILURE_TEXT_CHARS = 300

MISSING_EXIT = 127
NOT_EXECUTABLE_EXIT = 126


@dataclass
class Session:
    """The CLI session one call continues (`id` None: the CLI assigns one) and the turns kept for CLIs
    without sessions of their own."""

    id: str | None
    resume: bool
    turns: list[dict[str, str]] = field(default_factory=list)
    kept: bool = False  # a session the operator attached (`switchyard sessions attach`): a fork never removes it


@dataclass
class Reading:
    """What a preset read out of a CLI's output: the answer, the session id, the CLI's own error words."""

    answer: str
    session_id: str | None = None
    error: str | None = None
    refused: bool = False  # the stream showed a failure the CLI would only retry in vain (a refused key)
    usage: TokenUsage | None = None  # the cost and tokens its envelope reported, if any


@dataclass(frozen=True)
class StreamEvent:
    """One line of a CLI's stream: a sign the model is working, with a short note for the chat if any.

    `refused` holds the CLI's words for a failure it will only retry in vain (a refused key): the call
    stops at once and fails permanently, the preset's `permanent` naming the fix."""

    note: str | None = None
    refused: str | None = None
    text: str = ""  # a piece of the answer as it streams (partial messages), appended to what came before
    new_message: bool = False  # a new model message starts: the answer so far begins again
    from_text: bool = False  # the note is the first line of the answer (a text preview shows it anyway)


class Preset:
    """A known agent CLI: its argv for an unattended run, how to read its output and its failures."""

    name: ClassVar[str]
    binary: ClassVar[str]
    install: ClassVar[str]  # how a user installs the CLI
    login: ClassVar[str]  # how a user logs it in for the user running switchyard
    first_output_sec: ClassVar[float] = 90.0
    own_session_ids: ClassVar[bool] = False  # the CLI starts a session under an id we choose
    history_in_prompt: ClassVar[bool] = False  # no sessions: the last turns are sent with the prompt
    keeps_failed_prompts: ClassVar[bool] = False  # a failed call leaves its prompt in the session
    login_markers: ClassVar[tuple[str, ...]] = ()
    refusal_markers: ClassVar[tuple[str, ...]] = ()
    too_large_markers: ClassVar[tuple[str, ...]] = ()
    unknown_session_markers: ClassVar[tuple[str, ...]] = ()
    session_in_use_markers: ClassVar[tuple[str, ...]] = ()
    usage_limit_markers: ClassVar[tuple[str, ...]] = ()  # the CLI's words for a used-up quota or usage limit
    partial_args: ClassVar[tuple[str, ...]] = ()  # added to argv when the call streams its text (`on_text`)
    login_exit_codes: ClassVar[frozenset[int]] = frozenset()
    refusal_exit_codes: ClassVar[frozenset[int]] = frozenset()

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None,
             tools: str | None = None) -> list[str]:
        """The full argv; the prompt always goes to stdin. `tools`: the URL of the turn's chat tools (an MCP
        server over Streamable HTTP whose token is in SWITCHYARD_CHAT_TOOLS_TOKEN), for a CLI that takes
        MCP servers on its command line (docs/chat-tools.md); None: no chat tools."""
        raise NotImplementedError

    def stdin(self, prompt: str, session: Session | None) -> str:
        """What the CLI reads on stdin: the prompt."""
        return prompt

    def read(self, stdout: str, stderr: str = "") -> Reading:
        """The answer, session id, error and usage out of the CLI's whole output (and the end of its stderr)."""
        raise NotImplementedError

    def stream_event(self, line: str) -> StreamEvent | None:
        """Reads one line of output as it arrives: None when it shows no work by the model."""
        return None

    def permanent(self, text: str, exit_code: int | None) -> str | None:
        """Why a failure cannot be fixed by retrying (with the fix), or None when it may be transient."""
        lowered = text.lower()
        if exit_code in self.login_exit_codes or _has(lowered, self.login_markers):
            return self.not_logged_in()
        if exit_code in self.refusal_exit_codes or _has(lowered, self.refusal_markers):
            return f"{self.name} refused to run unattended here: check its trust and approval settings"
        if _has(lowered, self.too_large_markers):
            return f"the message is too large for {self.name}: send a shorter one"
        return None

    def not_logged_in(self) -> str:
        """The permanent failure of a missing or refused login, with the fix."""
        return f"{self.name} is not logged in for the user running switchyard: {self.login}"

    def exhausted(self, text: str) -> bool:
        """The model API refused the call because the account's usage limit or quota is reached."""
        return _has(text.lower(), self.usage_limit_markers)

    def unknown_session(self, text: str) -> bool:
        """The CLI no longer knows the session it was asked to continue."""
        return _has(text.lower(), self.unknown_session_markers)

    def session_in_use(self, text: str) -> bool:
        """The CLI refused to start a session under an id it already has."""
        return _has(text.lower(), self.session_in_use_markers)

    def superseded(self, session_id: str, env: Mapping[str, str]) -> None:
        """Called once a later session, recorded in its place, holds all of `session_id`'s turns (a fork):
        a CLI whose sessions are files of their own removes that one. Nothing by default."""

    def tools_env(self, folder: Path) -> dict[str, str]:
        """The variables that give the CLI the chat tools when its command line cannot (gemini: a settings file
        written under `folder`, this provider's private folder); none by default (the argv's `tools` does)."""
        return {}

    def endpoint_env(self, settings: ProviderSettings, key: str | None, folder: Path) -> dict[str, str]:
        """The variables that point the CLI at `settings.base_url` with `key` (its own key variable), writing
        any config file it needs under `folder` (this provider's private folder, never the user's own);
        called only for a provider with `base_url` or `api_key_env`."""
        raise NotImplementedError(f"{self.name} takes no base_url")


def _has(text: str, markers: tuple[str, ...]) -> bool:
    return any(marker in text for marker in markers)


def json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL stream (or one pretty-printed object), skipping lines that are not
    objects."""
    whole = json_object(text) if text.lstrip().startswith("{") and "\n{" not in text else None
    if whole is not None:
        yield whole
        return
    for line in text.splitlines():
        value = json_object(line)
        if value is not None:
            yield value


class Figures:
    """Reads the cost and token counts of one CLI output, field by field: a value reported that is no amount
    (orchestrator.usage.records.is_amount: NaN, infinite, negative, a count that is no whole number) is not counted but
    kept in `invalid` with its field and raw value, for the event `usage.invalid`; an absent one (None) is simply
    not reported."""

    def __init__(self) -> None:
        self.invalid: list[Invalid] = []

    def cost(self, name: str, value: Any) -> float | None:
        """An amount of money as the CLI printed it, else None."""
        return float(value) if self._kept(name, value, whole=False) else None

    def count(self, name: str, value: Any) -> int | None:
        """A token count as the CLI printed it, else None."""
        return int(value) if self._kept(name, value, whole=True) else None

    def usage(self, usd: float | None, tokens_in: int | None, tokens_out: int | None) -> TokenUsage:
        """What the output reported, with the figures found invalid so far."""
        return TokenUsage(usd, tokens_in, tokens_out, tuple(self.invalid))

    def _kept(self, name: str, value: Any, *, whole: bool) -> bool:
        if value is None:
            return False
        if is_amount(value, whole=whole):
            return True
        self.invalid.append((name, raw_text(value)))
        return False


def json_object(line: str) -> dict[str, Any] | None:
    """One line as a JSON object, or None."""
    line = line.strip()
    if not line.startswith("{") or not line.endswith("}"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def strip_ansi(text: str) -> str:
    """Removes terminal colour and cursor codes."""
    return _ANSI.sub("", text)


def short_tail(text: str, limit: int = FAILURE_TEXT_CHARS) -> str:
    """The end of `text` without ANSI codes, at most `limit` characters, starting at a word boundary."""
    text = " ".join(strip_ansi(text).split())
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    space = cut.find(" ")
    if 0 <= space < limit // 3:
        cut = cut[space + 1 :]
    return "…" + cut


def first_line(text: str, limit: int = 120) -> str:
    """The first non-empty line of `text`, shortened at a word boundary."""
    for line in strip_ansi(text).splitlines():
        line = line.strip()
        if line:
            if len(line) <= limit:
                return line
            return line[:limit].rsplit(" ", 1)[0] + "…"
    return ""
