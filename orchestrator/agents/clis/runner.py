"""Runs an agent-CLI preset: finds its binary, continues its session, reads its envelope, classifies failures.

A failure retrying cannot fix (the CLI is missing or not executable, not logged in, refuses to run
unattended, the prompt is too large) raises ProviderRefused: the message is dead-lettered at once and
the sender is told what happened and how it is fixed, in the CLI's own words. A model API whose usage limit
or quota is reached raises ProviderExhausted (a ProviderRefused). Anything else (a timeout, a network
error, an exit without a recognised cause) raises ProviderFailed and is retried. Every result, and the
one a failure carries, holds the usage the CLI's own output reported (`ProviderResult.usage`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass, replace

from gateway.api import PermanentError
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog
from orchestrator.agents.clis import (
    MISSING_EXIT,
    NOT_EXECUTABLE_EXIT,
    PRESETS,
    Preset,
    Reading,
    Session,
    StreamEvent,
    short_tail,
    strip_ansi,
)
from orchestrator.agents.live import TextSink, TurnStopped
from orchestrator.agents.request import NoteSink, ProviderCall
from orchestrator.agents.sessions import SessionStore
from orchestrator.agents.spawn import ProviderFailed, ProviderResult, run_process

log = logging.getLogger(__name__)

SESSION_TRIES = 3  # a taken id resumed, that session unknown, a fresh one


class ProviderRefused(PermanentError):
    """A provider failure that retrying cannot fix; `reason` says what happened and how to fix it."""

    def __init__(self, name: str, reason: str, said: str = "", result: ProviderResult | None = None):
        self.name = name
        self.reason = reason
        self.result = result
        words = f' ({name} said: "{said}")' if said and said.lower() not in reason.lower() else ""
        super().__init__(f"{name}: {reason}{words}",
                         reply=f"Sorry, I could not run the agent {name}: {reason}.{words}")


class ProviderExhausted(ProviderRefused):
    """The model API answered that the account's usage limit or quota is reached: retrying now would only
    be refused again."""

    def __init__(self, name: str, said: str = "", result: ProviderResult | None = None):
        super().__init__(name, "its provider's usage limit is reached; your message is kept, and an operator "
                               "runs it again once the limit resets (or gives the agent a `fallback:` provider)",
                         said, result)


def failure_text(result: ProviderResult, reading: Reading | None = None) -> str:
    """The CLI's own words on a failure: its envelope's error, else stderr, else the end of stdout."""
    for text in ((reading.error if reading else None), result.stderr_tail, result.stdout):
        if text and strip_ansi(text).strip():
            return short_tail(text)
    return ""


def cannot_start(name: str, binary: str, result: ProviderResult, install: str = "") -> str | None:
    """Why a process could not even start (missing, not executable, argv too long), else None."""
    said = result.stderr_tail
    if result.exit_code == MISSING_EXIT and ("No such file" in said or "not found" in said.lower()):
        how = f"install it ({install}) or set `binary:` to its full path" if install else "check the command"
        return f"`{binary}` was not found for the user running switchyard: {how}"
    if result.exit_code == NOT_EXECUTABLE_EXIT or "Permission denied" in said:
        return f"`{binary}` is not executable for the user running switchyard: check its permissions"
    if "Argument list too long" in said:
        return "the message is too large to pass as an argument: use `input: stdin`"
    return None


class AgentCliRunner:
    """Runs provider presets one-shot (a CLI process per call) with per-conversation sessions, stream notes
    and failure classification."""

    def __init__(self, sessions: SessionStore, events: EventLog | None):
        self._sessions = sessions
        self._events = events

    async def run(self, call: ProviderCall) -> ProviderResult:
        """Runs one call; returns the answer as `stdout`; raises ProviderRefused or ProviderFailed, or
        TurnStopped once `call.stop` is set (the CLI's process group is killed then)."""
        cli = _Cli.of(call)
        if shutil.which(cli.binary, path=call.turn.env.get("PATH", os.defpath)) is None:
            raise ProviderRefused(call.name, f"`{cli.binary}` was not found on PATH for the user running switchyard: "
                                             f"install it ({cli.preset.install}) or set `binary:` to its full path")
        if call.scope is None:
            return self._checked(call.name, cli, *await self._call(call, cli, None))
        async with self._sessions.hold(call.name, call.scope):
            return await self._in_session(call, cli, call.scope)

    async def _in_session(self, call: ProviderCall, cli: _Cli, scope: str) -> ProviderResult:
        name, preset, env = call.name, cli.preset, call.turn.env
        if call.turn.sandbox is not None:  # its session files are the scope's own (orchestrator/agents/sandbox.py)
            env = call.turn.sandbox.host_env(env)
        session = self._sessions.session(name, scope, assigns_ids=preset.own_session_ids)
        for _ in range(SESSION_TRIES):
            result, reading = await self._call(call, cli, session)
            said = failure_text(result, reading) if _failed(result, reading) else ""
            if said and session.resume and reading.session_id not in (None, session.id):
                preset.superseded(str(reading.session_id), env)  # a failed fork: never recorded, never resumed
            if said and session.resume and preset.unknown_session(said):
                session = self._reset(name, preset, scope, session, said)
            elif said and not session.resume and session.id and preset.session_in_use(said):
                session = self._in_use(name, preset, scope, session, said)
            else:
                break
        checked = self._checked(name, cli, result, reading)
        prompt = call.turn.prompt
        turn = {"prompt": prompt[-2000:], "answer": checked.stdout[-2000:]} if preset.history_in_prompt else None
        recorded = reading.session_id or session.id
        if self.save_session(name, scope, recorded, turn) and session.resume and session.id not in (None, recorded) \
                and not session.kept:
            preset.superseded(str(session.id), env)  # a fork holds it all now, and is what the next turn resumes
        return checked

    def _reset(self, name: str, preset: Preset, scope: str, session: Session, said: str) -> Session:
        """The CLI does not know the session (lost, or one it cannot resume): a fresh one, with an event."""
        if self._events is not None:
            self._events.emit("provider.session_reset", provider=name, scope=scope, session=session.id, reason=said)
        return self._sessions.forget(name, scope, assigns_ids=preset.own_session_ids)

    def _in_use(self, name: str, preset: Preset, scope: str, session: Session, said: str) -> Session:
        """The id of a new session is taken: an earlier attempt started it and failed, or its record was
        lost. A CLI that keeps a failed call's prompt would replay it, so it starts afresh; another
        resumes it (and starts afresh when that session cannot be resumed: gemini's without a reply)."""
        if preset.keeps_failed_prompts:
            return self._reset(name, preset, scope, session, said)
        return replace(session, resume=True)

    def save_session(self, name: str, scope: str, session_id: str | None, turn: dict[str, str] | None) -> bool:
        """Records the session a call used; False when it could not. A failure is logged, not raised: the
        agent has already run, and a retry would run it again; the next call then starts the session again
        (an id of our own that is already in use is resumed, or started afresh by a CLI that keeps failed
        prompts; a CLI's own id is lost with its memory; claude forks the last session recorded)."""
        try:
            self._sessions.save(name, scope, session_id, turn)
        except Exception as exc:  # (OSError, a database error)
            log.warning("%s: could not keep the session of %s: %s", name, scope, exc)
            return False
        return True

    async def _call(self, call: ProviderCall, cli: _Cli, session: Session | None) -> tuple[ProviderResult, Reading]:
        """One run of the CLI; raises TurnStopped when `call.stop` is set before or while it runs."""
        preset, provider, turn, stop = cli.preset, call.provider, call.turn, call.stop
        if stop.is_set():
            raise TurnStopped(f"{preset.binary}: stopped before it started")
        argv = preset.argv(cli.binary, provider, mode=call.mode, session=session,
                           tools=turn.tools.url if turn.tools is not None else None)
        if turn.on_text is not None:
            argv += preset.partial_args
        watch = _Watch(preset, turn.on_note, stop, turn.on_text)
        result = await run_process(
            argv, stdin=preset.stdin(turn.prompt, session).encode(), env=turn.env, cwd=turn.cwd,
            timeout_sec=provider.timeout_sec, max_output=provider.max_output_bytes,
            watcher=watch, first_output_sec=provider.first_output_sec or preset.first_output_sec, stop=watch.stop,
            sandbox=turn.sandbox,
        )
        reading = preset.read(result.stdout, result.stderr_tail)
        if watch.refused is not None:
            stop.clear()  # the watcher stopped it, not /stop
            reading = replace(reading, answer="", error=watch.refused, refused=True)
        elif stop.is_set():
            raise TurnStopped(f"{preset.binary}: stopped after {result.duration_ms / 1000:.1f}s")
        return result, reading

    def _checked(self, name: str, cli: _Cli, result: ProviderResult, reading: Reading) -> ProviderResult:
        preset = cli.preset
        result = replace(result, usage=reading.usage)
        if not _failed(result, reading):
            return replace(result, stdout=made_safe(reading.answer))  # its envelope may spell a NUL, `\\ud800`
        said = failure_text(result, reading)
        refusal = cannot_start(name, cli.binary, result, preset.install)
        everything = strip_ansi("\n".join(filter(None, (reading.error, result.stderr_tail, result.stdout[-4000:]))))
        if refusal is None and preset.exhausted(everything):
            raise ProviderExhausted(name, said, result)
        if refusal is None and reading.refused:
            refusal = preset.permanent(said, None) or preset.not_logged_in()
        if refusal is None and not result.timed_out:
            refusal = preset.permanent(everything, result.exit_code)
        if refusal is not None:
            raise ProviderRefused(name, refusal, said, result)
        raise ProviderFailed(name, replace(result, stderr_tail=said or result.stderr_tail))


@dataclass(frozen=True)
class _Cli:
    """The preset a call runs and the binary it starts (`binary:`, else the preset's own)."""

    preset: Preset
    binary: str

    @classmethod
    def of(cls, call: ProviderCall) -> _Cli:
        assert call.provider.type is not None
        preset = PRESETS[call.provider.type]
        return cls(preset, call.provider.binary or preset.binary)


def _failed(result: ProviderResult, reading: Reading) -> bool:
    return result.timed_out or result.exit_code != 0 or reading.error is not None


class _Watch:
    """Reads a CLI's stream as it arrives: notes go to the chat, the answer so far to `on_text` (when the
    call streams; a note that only repeats the answer's first line is then left out); a refusal the CLI
    would only retry in vain (a refused key) is kept and stops the CLI at once."""

    def __init__(self, preset: Preset, on_note: NoteSink | None, stop: asyncio.Event,
                 on_text: TextSink | None = None):
        self._preset = preset
        self._on_note = on_note
        self._on_text = on_text
        self._text = ""
        self.refused: str | None = None
        self.stop = stop

    def __call__(self, line: str) -> bool:
        event: StreamEvent | None = self._preset.stream_event(line)
        if event is None:
            return False
        if event.refused:
            self.refused = self.refused or event.refused
            self.stop.set()
        elif event.note and self._on_note is not None and not (event.from_text and self._on_text is not None):
            self._on_note(event.note)
        if self._on_text is not None and (event.text or event.new_message):
            self._text = event.text if event.new_message else self._text + event.text
            if self._text:
                self._on_text(self._text)
        return True
