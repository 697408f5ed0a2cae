"""A workspace of one's own: each conversation's (or sender's) folder, its seed, and its retention."""

from orchestrator.workspaces.scopes import Scope, ScopeWorkspaces, scope_of

__all__ = ["Scope", "ScopeWorkspaces", "scope_of"]
