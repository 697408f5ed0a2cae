"""Runs a fake platform server (tests/fakes) on its own asyncio loop in a background thread.

End-to-end tests are synchronous (they drive `switchyard run` as a process), while the fakes are
aiohttp apps entered with `async with`. `FakeThread` owns a private loop in a daemon thread, builds
and enters the fake there, and lets the test call into it:

    with FakeThread(FakeTelegram) as telegram:
        telegram.server.url                       # plain attributes are fine to read
        telegram.call(telegram.server.deliver, m) # a coroutine function, run on the fake's loop
        telegram.run(lambda: list(server.sent))   # a plain function, run on the fake's loop

Every call waits at most `timeout` seconds; leaving the block exits the fake and stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import Any, Generic, TypeVar

from tests.fakes.base import FakeServer

S = TypeVar("S", bound=FakeServer)
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 15.0


class FakeThread(Generic[S]):
    """A context manager: a loop thread with one entered fake server (`.server`) and `call`/`run`."""

    def __init__(self, factory: Callable[[], S], *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._factory = factory
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=f"fake:{getattr(factory, '__name__', 'server')}",
                                        daemon=True)
        self._server: S | None = None
        self._entered = False

    @property
    def server(self) -> S:
        assert self._server is not None, "the fake is not started"
        return self._server

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            # Whatever is still pending (e.g. a handler of a connection the bot kept open) is cancelled.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def call(self, coro_fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None,
             **kwargs: Any) -> T:
        """Runs `coro_fn(*args, **kwargs)` on the fake's loop and returns its result (bounded wait)."""
        async def invoke() -> T:
            return await coro_fn(*args, **kwargs)

        future = asyncio.run_coroutine_threadsafe(invoke(), self._loop)
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except FutureTimeout:
            future.cancel()
            raise AssertionError(f"{getattr(coro_fn, '__qualname__', coro_fn)} did not finish within "
                                 f"{self.timeout if timeout is None else timeout}s on the fake's loop") from None

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs a plain function on the fake's loop (safe access to the fake's state)."""
        async def invoke() -> T:
            return fn(*args, **kwargs)

        return self.call(invoke)

    def __enter__(self) -> FakeThread[S]:
        self._thread.start()
        try:
            self._server = self.call(self._enter)
        except BaseException:
            self._stop_loop()
            raise
        return self

    async def _enter(self) -> S:
        server = self._factory()  # built on its own loop, so its asyncio primitives belong there
        await server.__aenter__()
        self._entered = True
        return server

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self._entered and self._server is not None:
                self._entered = False
                self.call(self._leave, self._server)
        finally:
            self._stop_loop()

    @staticmethod
    async def _leave(server: FakeServer) -> None:
        # A bot still connected (a test failed before stopping the gateway) would hold aiohttp's
        # shutdown for its full grace period: close the fake's long-lived connections first.
        drop = getattr(server, "drop_connections", None)
        if drop is not None:
            await drop()
        await server.__aexit__(None, None, None)

    def _stop_loop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout)
        assert not self._thread.is_alive(), "the fake's loop thread did not stop"
