"""The console channel itself: reads the terminal, prints replies (imported when a console profile is built)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from gateway import (
    INTAKE_FAILED_REPLY,
    ChannelContext,
    ChannelProfile,
    DeliveryRecord,
    IncomingPayload,
    OutgoingPayload,
    PermanentError,
    Sink,
    divert_log_lines,
    now_ms,
    numbered,
)
from plugins.console import CHANNEL_TYPE

log = logging.getLogger("switchyard.console")


class ConsoleChannel:
    """Reads one message per line from the terminal and prints the replies to its conversation.

    It reads only a terminal it owns (stdin a TTY, the process in the terminal's foreground): a service,
    a pipe or `switchyard run &` leave stdin alone, and the channel is disabled saying why. Lines are
    read on a daemon thread (a blocking read must not hold the event loop) and handed to the loop
    thread-safely. End of input (Ctrl-D) stops the channel: work already queued still completes, and
    with no other channel running the gateway stops. Streams passed in (tests) are read as given.
    """

    name = CHANNEL_TYPE

    def __init__(self, profile: ChannelProfile, *, context: ChannelContext | None = None,
                 stdin: TextIO | None = None, stdout: TextIO | None = None):
        self.profile_id = profile.id
        self._context = context
        self._given_stdin = stdin is not None
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._user = profile.option("sender") or _login_name()
        self._conversation = profile.option("conversation_id", "console")
        self._sink: Sink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Future[Path]] = set()
        self._terminal: Terminal | None = None
        self._restore_logs: Callable[[], None] | None = None

    async def start(self, sink: Sink) -> None:
        """Starts reading lines; raises PermanentError (the channel is disabled) without a terminal to own."""
        if not self._given_stdin:
            problem = why_not_interactive(self._stdin)
            if problem is not None:
                raise PermanentError(problem)
            if self._stdout.isatty():
                self._terminal = Terminal(self._stdin, self._stdout)
                if sys.stderr.isatty():  # log lines would land in the line being typed: printed above it
                    self._restore_logs = divert_log_lines(self._terminal.show, self._full_log())
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        print("Switchyard console: type a message and press Enter (Ctrl-D or Ctrl-C to quit).", file=sys.stderr)
        threading.Thread(target=self._read_lines, name=f"console:{self.profile_id}", daemon=True).start()

    def _full_log(self) -> Path | None:
        """Where every log line goes whole, tracebacks included, while this console owns the terminal."""
        return self._context.home.logs / FULL_LOG if self._context is not None else None

    def _read_lines(self) -> None:
        assert self._loop is not None
        lines = self._terminal.lines() if self._terminal is not None else (line.rstrip("\n") for line in self._stdin)
        try:
            for text in lines:
                if text.strip():
                    self._loop.call_soon_threadsafe(self._submit, text)
            self._loop.call_soon_threadsafe(self._input_ended)
        except (RuntimeError, ValueError, OSError):
            return  # the loop or stdin has closed: the gateway is shutting down
        finally:
            if self._given_stdin:
                self._stdin.close()

    def _input_ended(self) -> None:
        if self._context is not None:
            self._context.ended("end of input (Ctrl-D)")

    def _submit(self, text: str) -> None:
        assert self._sink is not None
        payload = IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=self._user, senderId=self._user,
            message=text, timestamp=now_ms(), messageId=f"console-{time.time_ns()}",
            conversationId=self._conversation,
        )
        future = asyncio.ensure_future(self._sink(payload))
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        future.add_done_callback(self._tell_if_refused)

    def _tell_if_refused(self, future: asyncio.Future[Path]) -> None:
        if future.cancelled() or future.exception() is None:
            return
        log.error("console: could not queue the message: %s", future.exception())
        self._show(f"[switchyard] {INTAKE_FAILED_REPLY}")

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Prints a reply to this console's conversation (with its run id, its buttons as a numbered
        list); others are not shown."""
        if outgoing.conversationId not in (None, self._conversation):
            return DeliveryRecord(platform_ids=[], detail={"shown": False})
        who = outgoing.agent or "switchyard"
        if outgoing.workflowRunId:
            who += f", run {outgoing.workflowRunId}"
        text = numbered(outgoing.message, outgoing.buttons)  # answered by typing the number
        self._show("\n".join([f"[{who}] {text}", *(f"  (file: {path})" for path in outgoing.files)]))
        return DeliveryRecord(platform_ids=[outgoing.messageId])

    def _show(self, text: str) -> None:
        if self._terminal is not None:
            self._terminal.show(text)
        else:
            self._stdout.write(text + "\n")
            self._stdout.flush()

    async def stop(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._restore_logs is not None:
            self._restore_logs()
            self._restore_logs = None
        if self._terminal is not None:
            self._terminal.restore()


PROMPT = "> "
FULL_LOG = "console.log"  # under the home's logs/: the log lines shown above the prompt, whole


def why_not_interactive(stdin: TextIO) -> str | None:
    """Why the console may not read `stdin` (None: it is a terminal this process owns)."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return "stdin is closed"
    if not os.isatty(fd):
        return "stdin is not a terminal"
    try:
        foreground = os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return "stdin is not this process's controlling terminal"
    return None if foreground else "the process runs in the background of its terminal (started with &)"


class Terminal:
    """The terminal a console reads with line editing: a prompt, and replies and log lines printed above
    the line being typed (the line is cleared, the text printed, the prompt and the typed text printed again)."""

    def __init__(self, stdin: TextIO, stdout: TextIO):
        import readline  # noqa: F401  (line editing and history for input(); imported only on a terminal)

        self._readline = readline
        self._stdout = stdout
        self._fd = stdin.fileno()
        self._saved = termios.tcgetattr(self._fd)
        self._lock = threading.Lock()  # replies come from the loop's thread, log lines from any thread
        self._prompting = False

    def lines(self) -> Iterator[str]:
        """The lines typed, until end of input (Ctrl-D)."""
        while True:
            try:
                self._prompting = True
                text = input(PROMPT)
            except EOFError:
                self._prompting = False
                with self._lock:
                    self._stdout.write("\n")
                    self._stdout.flush()
                return
            self._prompting = False
            yield text

    def show(self, text: str) -> None:
        """Prints `text` above the prompt and the line being typed (below the last line without a prompt)."""
        with self._lock:
            if self._prompting:
                self._stdout.write(f"\r\x1b[K{text}\n{PROMPT}{self._readline.get_line_buffer()}")
            else:
                self._stdout.write(f"\r\x1b[K{text}\n")
            self._stdout.flush()

    def restore(self) -> None:
        """Puts the terminal back as it was (a stop while input() is reading leaves it in readline's mode)."""
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._stdout.write("\r\x1b[K")
            self._stdout.flush()


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "console"
