"""Provider runs: a CLI as a subprocess (argv, stdin or arg, env, timeout, capped output) or a built-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import containment
from gateway.api import BuiltinProvider, PermanentError
from gateway.home import Home, atomic_write
from gateway.settings import ProviderSettings

READ_CHUNK = 65536
STDERR_TAIL_BYTES = 8192
KILL_GRACE_SEC = 5.0
BUILTIN_MAX_OUTPUT = 1_048_576


@dataclass(frozen=True)
class ProviderResult:
    """What one provider or command run produced."""

    stdout: str
    stderr_tail: str
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    truncated: bool


class ProviderFailed(Exception):
    """A provider or command exited non-zero or timed out (retryable: the next attempt may succeed)."""

    def __init__(self, name: str, result: ProviderResult):
        self.name = name
        self.result = result
        super().__init__(describe_failure(name, result))


def describe_failure(name: str, result: ProviderResult) -> str:
    """One line saying how a run failed, with the end of its stderr."""
    if result.timed_out:
        what = f"timed out after {result.duration_ms / 1000:.1f}s"
    else:
        what = f"exited with code {result.exit_code}"
    tail = result.stderr_tail.strip()[-300:]
    return f"{name} {what}" + (f": {tail}" if tail else "")


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


async def _pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK):
        capture.add(chunk)


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


async def run_process(
    argv: Sequence[str], *, stdin: bytes | None, env: Mapping[str, str], cwd: Path,
    timeout_sec: float, max_output: int,
) -> ProviderResult:
    """Runs argv in its own session (never a shell) with capped output; kills what it started when it ends."""
    started = time.monotonic()
    env, token = containment.tagged(env)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, cwd=cwd, start_new_session=True,
        )
    except OSError as exc:
        return ProviderResult("", f"cannot start {argv[0]!r}: {exc}", 127, _ms_since(started), False, False)
    out = _Capture(max_output)
    err = _Capture(min(max_output, STDERR_TAIL_BYTES), keep_tail=True)
    waiter = asyncio.ensure_future(_exited(proc))
    tasks: list[asyncio.Task[Any]] = [
        asyncio.ensure_future(_pump(proc.stdout, out)), asyncio.ensure_future(_pump(proc.stderr, err)),
        asyncio.ensure_future(_feed(proc.stdin, stdin or b"")), waiter,
    ]
    try:
        await asyncio.wait({waiter}, timeout=timeout_sec)
        # Once the process has exited, its output ends within a moment, unless a descendant that
        # left the process group (setsid) still holds the pipes: stop reading after a short grace.
        grace = min(PIPE_GRACE_S, max(0.0, timeout_sec - (time.monotonic() - started)))
        _, pending = await asyncio.wait(tasks, timeout=grace if waiter.done() else 0)
    except asyncio.CancelledError:
        await _terminate(proc, tasks)
        await _end_run(proc, waiter, token)
        raise
    timed_out = not waiter.done()
    if pending:
        await _terminate(proc, tasks)
    duration = _ms_since(started)
    await _end_run(proc, waiter, token)
    return ProviderResult(out.text(), err.text(), proc.returncode, duration, timed_out, out.truncated)


async def _end_run(proc: asyncio.subprocess.Process, waiter: asyncio.Future[None], token: str) -> None:
    """Waits (briefly) until the run's own process is reaped, then kills what it left behind."""
    await asyncio.wait({waiter}, timeout=KILL_GRACE_SEC)
    await containment.end_run(proc.pid, token)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


class ProviderRunner:
    """Runs providers by name: settings.yaml commands as subprocesses, built-ins in process."""

    def __init__(
        self, home: Home, providers: Mapping[str, ProviderSettings], builtins: Mapping[str, BuiltinProvider]
    ):
        self._home = home
        self._providers = dict(providers)
        self._builtins = dict(builtins)

    def known(self) -> set[str]:
        """Every provider name that can run: settings.yaml ones and built-ins."""
        return set(self._providers) | set(self._builtins)

    def in_process(self, name: str) -> bool:
        """True for a built-in provider that settings.yaml does not override (it reads no request file)."""
        return name not in self._providers and name in self._builtins

    async def run(
        self, name: str, prompt: str, *, request: dict[str, Any], request_file: Path | None, cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> ProviderResult:
        """Writes the request file (when given), runs the provider; raises ProviderFailed (PermanentError
        if unknown)."""
        configured = self._providers.get(name)
        if configured is None and name not in self._builtins:
            raise PermanentError(f"unknown provider {name!r}; known: {', '.join(sorted(self.known()))}")
        if configured is not None or request_file is not None:  # a built-in needs no working directory
            _prepare(cwd, request_file, request)
        if configured is not None:
            result = await self._run_configured(configured, prompt, request_file, cwd, env or {})
        else:
            result = await self._run_builtin(self._builtins[name], prompt, request)
        return _checked(name, result)

    async def run_command(
        self, name: str, argv: Sequence[str], *, stdin: str | None, cwd: Path, timeout_sec: float,
        max_output: int, env: Mapping[str, str] | None = None,
    ) -> ProviderResult:
        """Runs a command step or function argv with the gateway's environment; raises ProviderFailed."""
        _prepare(cwd)
        result = await run_process(
            argv, stdin=None if stdin is None else stdin.encode(), env=self.environment(env),
            cwd=cwd, timeout_sec=timeout_sec, max_output=max_output,
        )
        return _checked(name, result)

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The process environment: os.environ plus SWITCHYARD_HOME and the given variables."""
        return {**os.environ, "SWITCHYARD_HOME": str(self._home.root), **(extra or {})}

    async def _run_configured(
        self, provider: ProviderSettings, prompt: str, request_file: Path | None, cwd: Path,
        env: Mapping[str, str],
    ) -> ProviderResult:
        argv = [*provider.command, prompt] if provider.input == "arg" else list(provider.command)
        stdin = prompt.encode() if provider.input == "stdin" else None
        request_env = {"SWITCHYARD_REQUEST": str(request_file)} if request_file is not None else {}
        full_env = {**os.environ, **provider.env, "SWITCHYARD_HOME": str(self._home.root), **request_env, **env}
        return await run_process(argv, stdin=stdin, env=full_env, cwd=cwd, timeout_sec=provider.timeout_sec,
                                 max_output=provider.max_output_bytes)

    async def _run_builtin(
        self, provider: BuiltinProvider, prompt: str, request: dict[str, Any]
    ) -> ProviderResult:
        started = time.monotonic()
        try:
            answer = await provider(prompt, request)
        except Exception as exc:
            return ProviderResult("", f"{type(exc).__name__}: {exc}", 1, _ms_since(started), False, False)
        truncated = len(answer) > BUILTIN_MAX_OUTPUT
        return ProviderResult(answer[:BUILTIN_MAX_OUTPUT], "", 0, _ms_since(started), False, truncated)


def _prepare(cwd: Path, request_file: Path | None = None, request: dict[str, Any] | None = None) -> None:
    """Creates the working directory and writes the request file a provider reads."""
    cwd.mkdir(parents=True, exist_ok=True)
    if request_file is not None:
        request_file.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(request, ensure_ascii=False, indent=2, default=str).encode()
        atomic_write(request_file, data, fsync=False)


def _checked(name: str, result: ProviderResult) -> ProviderResult:
    if result.timed_out or result.exit_code != 0:
        raise ProviderFailed(name, result)
    return result
