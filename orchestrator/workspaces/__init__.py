"""A workspace of one's own: each conversation's (or sender's) folder, its seed, and its retention."""

from orchestrator.workspaces.owners import Owner, OwnWorkspaces, owner_of

__all__ = ["Owner", "OwnWorkspaces", "owner_of"]
