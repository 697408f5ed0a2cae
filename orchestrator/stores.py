"""The orchestrator's stores on the backend the gateway composed (gateway/composition.py): runs, provider
sessions and conversation history. The file backend's are declared here (`switchyard_stores`, through
orchestrator/plugin.py), PostgreSQL's by orchestrator/pgplugin.py; the orchestrator opens them by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.composition import Backend, StoreFactory
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.runs import RunStore
    from orchestrator.sessions import ConversationHistory, SessionStore


def backend_for(home: Home, settings: Settings) -> Backend:
    """The backend `settings` configure (for a command or a hook that is given no backend)."""
    from gateway.composition import open_backend

    return open_backend(home, settings)


def open_run_store(backend: Backend, *, fsync: bool | None = None) -> RunStore:
    """The backend's run store; `fsync` defaults to `queue.fsync`."""
    store: RunStore = backend.store("runs", fsync=backend.settings.queue.fsync if fsync is None else fsync)
    return store


def open_sessions(backend: Backend) -> SessionStore:
    """The backend's provider sessions."""
    store: SessionStore = backend.store("sessions")
    return store


def open_history(backend: Backend) -> ConversationHistory:
    """The backend's conversation history."""
    store: ConversationHistory = backend.store("history")
    return store


def file_stores() -> dict[str, dict[str, StoreFactory]]:
    """The orchestrator's stores on the file backend: folders under runs/ and files in state/."""
    return {"runs": {"files": _runs}, "sessions": {"files": _sessions}, "history": {"files": _history}}


def _runs(backend: Backend, *, fsync: bool) -> Any:
    from orchestrator.runs import RunStore

    return RunStore(backend.home, fsync=fsync)


def _sessions(backend: Backend) -> Any:
    from orchestrator.sessions import SessionStore

    return SessionStore.in_home(backend.home)


def _history(backend: Backend) -> Any:
    from orchestrator.sessions import ConversationHistory

    return ConversationHistory.in_home(backend.home)
