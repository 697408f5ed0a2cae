"""How a provider whose program is missing from PATH is reported (`doctor`, `status`, the start-up check);
no pydantic here: `status` answered from its cache uses it."""

from __future__ import annotations

from collections.abc import Iterable


def not_found(binary: str) -> str:
    """The problem of a provider whose program is not on PATH."""
    return f"`{binary}` not found on PATH"


def provider_line(name: str, problem: str, used_by: Iterable[str]) -> str:
    """One line naming a provider's problem and the orchestrator keys that use it."""
    return f"provider {name}: {problem} (used by {', '.join(used_by)})"
