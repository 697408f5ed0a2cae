"""One provider or command process: argv (never a shell), stdin, env, timeout, capped output, stream lines."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.runtime import containment
from orchestrator.agents.clis.base import MISSING_EXIT, NOT_EXECUTABLE_EXIT, short_tail
from orchestrator.agents.sandbox import Sandbox
from orchestrator.usage.records import TokenUsage

log = logging.getLogger("switchyard.providers")

READ_CHUNK = 65536
STDERR_TAIL_BYTES = 8192
KILL_GRACE_SEC = 5.0


@dataclass(frozen=True)
class ProviderResult:
    """What one provider or command run produced."""

    stdout: str
    stderr_tail: str
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    truncated: bool
    stalled: bool = False  # timed out because it showed no sign of work for `first_output_sec`
    usage: TokenUsage | None = None  # what the CLI's own output said the call used (None: it said nothing)


class ProviderFailed(Exception):
    """A provider or command exited non-zero or timed out (retryable: the next attempt may succeed)."""

    def __init__(self, name: str, result: ProviderResult):
        self.name = name
        self.result = result
        super().__init__(describe_failure(name, result))


def describe_failure(name: str, result: ProviderResult) -> str:
    """One line saying how a run failed, in the process's own words: the end of stderr, else of stdout
    (colour codes removed, cut at a word)."""
    if result.stalled:
        what = f"showed no sign of work for {result.duration_ms / 1000:.0f}s (no network, or stuck?)"
    elif result.timed_out:
        what = f"timed out after {result.duration_ms / 1000:.1f}s"
    elif result.exit_code == 0:
        what = "reported an error"
    else:
        what = f"exited with code {result.exit_code}"
    said = next((short_tail(text) for text in (result.stderr_tail, result.stdout) if text.strip()), "")
    return f"{name} {what}" + (f": {said}" if said else "")


class _Capture:
    """Keeps the head (or the tail) of a stream up to `cap` bytes and discards the rest."""

    def __init__(self, cap: int, *, keep_tail: bool = False):
        self.cap = cap
        self.keep_tail = keep_tail
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        if self.keep_tail:
            self.data += chunk
            if len(self.data) > self.cap:
                del self.data[: len(self.data) - self.cap]
                self.truncated = True
            return
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


LineWatcher = Callable[[str], bool]
"""Sees each line of a provider's stdout as it arrives; True when the line shows the agent at work."""


async def _pump(
    stream: asyncio.StreamReader | None, capture: _Capture, watcher: LineWatcher | None = None,
    alive: asyncio.Event | None = None,
) -> None:
    if stream is None:
        return
    partial = b""
    while chunk := await stream.read(READ_CHUNK):
        capture.add(chunk)
        if alive is not None and watcher is None:
            alive.set()
        if watcher is None:
            continue
        *lines, partial = (partial + chunk).split(b"\n")
        if len(partial) > READ_CHUNK:  # a huge line: its start is enough to read an event
            partial = b""
        for line in lines:
            if _watch(watcher, line) and alive is not None:
                alive.set()
    if watcher is not None and partial and _watch(watcher, partial) and alive is not None:
        alive.set()


def _watch(watcher: LineWatcher, line: bytes) -> bool:
    try:
        return watcher(line.decode("utf-8", errors="replace"))
    except Exception:  # a watcher's bug must not stop the output being read
        log.exception("reading a provider's output line failed")
        return False


async def _feed(writer: asyncio.StreamWriter | None, data: bytes) -> None:
    if writer is None:
        return
    try:
        writer.write(data)
        await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        writer.close()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _terminate(proc: asyncio.subprocess.Process, tasks: list[asyncio.Task[Any]]) -> None:
    """Kills the whole process group, then reaps it and drains its pipes (briefly)."""
    _kill_group(proc.pid)
    _, pending = await asyncio.wait(tasks, timeout=KILL_GRACE_SEC)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if pending:
        # A descendant outside the group still holds the pipes: close our ends. asyncio has no
        # public way to close a subprocess's pipe transports, so this uses the Process's transport.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()


PIPE_GRACE_S = 1.0  # how long output may go on after the process exited
EXIT_POLL_S = 0.1


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Returns once the process has exited, even while a descendant still holds its pipes.

    (`Process.wait()` also waits for the pipes to close, which a descendant that left the
    process group with setsid() can hold open for as long as it lives.)
    """
    waiting = asyncio.ensure_future(proc.wait())
    try:
        while not waiting.done() and proc.returncode is None:
            await asyncio.wait({waiting}, timeout=EXIT_POLL_S)
    finally:
        waiting.cancel()


async def _start(argv: Sequence[str], *, piped_stdin: bool, env: Mapping[str, str], cwd: Path,
                 token: str) -> asyncio.subprocess.Process:
    """Starts argv in its own session. A cancel that comes while it starts ends its whole group once it has
    started: asyncio, cancelled inside the start, would kill only the leader, and a child the leader started by
    then would go on running."""
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if piped_stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
    ))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        await _end_started(starting, token)
        raise


async def _end_started(starting: asyncio.Future[asyncio.subprocess.Process], token: str) -> None:
    """Ends what a start cancelled midway started (nothing when it did not start), as a cancelled run's end."""
    try:
        proc = await starting
    except Exception:  # it did not start
        return
    waiter = asyncio.ensure_future(_exited(proc))
    discarded = _Capture(0)
    tasks: list[asyncio.Task[Any]] = [
        asyncio.ensure_future(_pump(proc.stdout, discarded)), asyncio.ensure_future(_pump(proc.stderr, discarded)),
        asyncio.ensure_future(_feed(proc.stdin, b"")), waiter,
    ]
    await _terminate(proc, tasks)
    await _end_run(proc, waiter, token)


async def run_process(
    argv: Sequence[str], *, stdin: bytes | None, env: Mapping[str, str], cwd: Path,
    timeout_sec: float, max_output: int, watcher: LineWatcher | None = None, first_output_sec: float | None = None,
    stop: asyncio.Event | None = None, sandbox: Sandbox | None = None,
) -> ProviderResult:
    """Runs argv in its own session (never a shell) with capped output; kills what it started when it ends.

    With `sandbox`, argv runs confined by bubblewrap (orchestrator/agents/sandbox.py), and raises
    SandboxUnavailable (permanent) when bwrap is missing: never unconfined instead.

    `watcher` sees each stdout line as it arrives. With `first_output_sec`, a process that shows no
    sign of work by then (no output, or no line the watcher calls work) is stopped as a timeout:
    a CLI retrying an unreachable network says nothing useful for minutes. Setting `stop` (a watcher
    that saw a failure the CLI will not get past) ends the process at once; that is no timeout.
    """
    if sandbox is not None:
        async with sandbox.launched(argv) as confined:
            return await run_process(confined, stdin=stdin, env=env, cwd=cwd, timeout_sec=timeout_sec,
                                     max_output=max_output, watcher=watcher, first_output_sec=first_output_sec,
                                     stop=stop)
    started = time.monotonic()
    env, token = containment.tagged(env)
    try:
        proc = await _start(argv, piped_stdin=stdin is not None, env=env, cwd=cwd, token=token)
    except OSError as exc:
        code = NOT_EXECUTABLE_EXIT if exc.errno in (errno.EACCES, errno.ENOEXEC) else MISSING_EXIT
        return ProviderResult("", f"cannot start {argv[0]!r}: {exc}", code, ms_since(started), False, False)
    out = _Capture(max_output)
    err = _Capture(min(max_output, STDERR_TAIL_BYTES), keep_tail=True)
    alive = asyncio.Event()
    waiter = asyncio.ensure_future(_exited(proc))
    tasks: list[asyncio.Task[Any]] = [
        asyncio.ensure_future(_pump(proc.stdout, out, watcher, alive)), asyncio.ensure_future(_pump(proc.stderr, err)),
        asyncio.ensure_future(_feed(proc.stdin, stdin or b"")), waiter]
    stalled = False
    stopper = asyncio.ensure_future((stop or asyncio.Event()).wait())
    stopped = stop.is_set if stop is not None else lambda: False
    try:
        if first_output_sec is not None and first_output_sec < timeout_sec:
            await _first_sign(waiter, alive, stopper, within_s=first_output_sec)
            stalled = not waiter.done() and not alive.is_set() and not stopped()
        if not stalled and not stopped():
            await asyncio.wait({waiter, stopper}, timeout=max(0.0, timeout_sec - (time.monotonic() - started)),
                               return_when=asyncio.FIRST_COMPLETED)
        # Once the process has exited, its output ends within a moment, unless a descendant that
        # left the process group (setsid) still holds the pipes: stop reading after a short grace.
        grace = min(PIPE_GRACE_S, max(0.0, timeout_sec - (time.monotonic() - started)))
        _, pending = await asyncio.wait(tasks, timeout=grace if waiter.done() else 0)
    except asyncio.CancelledError:
        await _terminate(proc, tasks)
        await _end_run(proc, waiter, token)
        raise
    finally:
        stopper.cancel()
    timed_out = not waiter.done() and not stopped()
    if pending:
        await _terminate(proc, tasks)
    duration = ms_since(started)
    await _end_run(proc, waiter, token)
    return ProviderResult(out.text(), err.text(), proc.returncode, duration, timed_out, out.truncated, stalled)


async def _first_sign(waiter: asyncio.Future[Any], alive: asyncio.Event, stopper: asyncio.Future[Any], *,
                      within_s: float) -> None:
    """Waits until the process exits, shows a sign of work (`alive`) or is stopped: at most `within_s`."""
    signal_of_life = asyncio.ensure_future(alive.wait())
    try:
        await asyncio.wait({waiter, signal_of_life, stopper}, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal_of_life.cancel()


async def _end_run(proc: asyncio.subprocess.Process, waiter: asyncio.Future[None], token: str) -> None:
    """Waits (briefly) until the run's own process is reaped, then kills what it left behind."""
    await asyncio.wait({waiter}, timeout=KILL_GRACE_SEC)
    await containment.end_run(proc.pid, token)


def ms_since(started: float) -> int:
    """Milliseconds since a `time.monotonic()` reading."""
    return int((time.monotonic() - started) * 1000)
