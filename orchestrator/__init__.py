"""The orchestrator: selector, actions, providers, workflow runs and diagnostics behind one handler.

`Orchestrator` is imported on first use, so the CLI can import `orchestrator.cli` cheaply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.chat.handler import Orchestrator

__all__ = ["Orchestrator"]


def __getattr__(name: str) -> Any:
    """Imports the handler the first time `Orchestrator` is asked for."""
    if name != "Orchestrator":
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    from orchestrator.chat.handler import Orchestrator

    return Orchestrator
