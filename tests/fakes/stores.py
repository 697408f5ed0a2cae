"""The stores a test builds an orchestrator part on, opened through the composition (gateway/composition.py) as
`switchyard run` opens them: no part falls back to a store of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.api import HandlerContext
from gateway.backends import Backend
from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import Settings
from orchestrator.agents.sessions import ConversationHistory, SessionStore
from orchestrator.chat.handler import Orchestrator
from orchestrator.storage.stores import open_history, open_sessions, open_stores


class OwnBackendOrchestrator(Orchestrator):
    """An Orchestrator on a backend the test opened for it alone, closed when it stops (as the gateway closes
    its backend after stopping its handler)."""

    def __init__(self, context: HandlerContext, backend: Backend, **options: Any):
        super().__init__(context, open_stores(backend), **options)
        self.backend = backend

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            await asyncio.to_thread(self.backend.close)


def orchestrator_for(context: HandlerContext, **options: Any) -> Orchestrator:
    """An Orchestrator on the stores of `context.backend`, else on a backend of its own: the one its settings
    configure, closed when it stops."""
    if context.backend is not None:
        return Orchestrator(context, open_stores(context.backend), **options)
    return OwnBackendOrchestrator(context, open_backend(context.home, context.settings), **options)


def file_sessions(home: Home) -> SessionStore:
    """The file backend's provider sessions of `home` (`<home>/sessions/`)."""
    return open_sessions(open_backend(home, Settings()))


def file_history(home: Home) -> ConversationHistory:
    """The file backend's conversation history of `home` (`<home>/sessions/history/`)."""
    return open_history(open_backend(home, Settings()))
