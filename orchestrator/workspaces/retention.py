"""What `switchyard workspaces` lists and cleans: each owner workspace, its size, its last use."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.workspaces.owners import OwnWorkspaces

DAY_SEC = 86400.0


@dataclass(frozen=True)
class WorkspaceInfo:
    """One owner workspace as the operator sees it."""

    name: str
    path: Path
    size_bytes: int
    last_used: float  # epoch seconds: its `.used` stamp, else the folder's own time
    worktree: bool


def listed(workspaces: OwnWorkspaces) -> list[WorkspaceInfo]:
    """Every owner workspace of one orchestrator, oldest use first."""
    if not workspaces.root.is_dir():
        return []
    found = []
    for entry in workspaces.root.iterdir():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        stamp = workspaces.root / ".used" / entry.name
        used = stamp.stat().st_mtime if stamp.exists() else entry.stat().st_mtime
        found.append(WorkspaceInfo(entry.name, entry, size_of(entry) + size_of(workspaces.sessions(entry.name)),
                                   used, (entry / ".git").is_file()))
    return sorted(found, key=lambda info: info.last_used)


def size_of(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed)."""
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    return total


def stale(workspaces: OwnWorkspaces, older_than_days: float, now: float | None = None) -> list[WorkspaceInfo]:
    """The workspaces unused for longer than `older_than_days`."""
    cutoff = (now if now is not None else time.time()) - older_than_days * DAY_SEC
    return [info for info in listed(workspaces) if info.last_used < cutoff]


def remove(workspaces: OwnWorkspaces, info: WorkspaceInfo) -> None:
    """Removes a workspace, its CLIs' session history and its stamp; a worktree leaves its branch (the work
    committed there stays in the repository) and is pruned from it."""
    git_dir = workspaces.git_dir(info.path) if info.worktree else None
    shutil.rmtree(info.path, ignore_errors=True)
    shutil.rmtree(workspaces.sessions(info.name), ignore_errors=True)
    for leftover in (workspaces.root / ".used" / info.name, workspaces.root / ".used" / f"{info.name}.lock"):
        leftover.unlink(missing_ok=True)
    if git_dir is not None:
        subprocess.run(["git", "--git-dir", str(git_dir), "worktree", "prune"], capture_output=True, check=False,
                       timeout=60)
