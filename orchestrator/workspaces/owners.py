"""Own workspaces: `<home>/workspaces/<orchestrator>/<owner>/`, made on first use.

`workspace: conversation` gives each conversation (`sender`: each sender of a profile) a folder of its own,
where its agents and command steps run. A new one starts empty, as a copy of `workspaces.template`, or as a
git worktree of `workspaces.repository` on a branch of its own (`switchyard/<owner>`), so two conversations
edit one project without touching each other's files. Beside the folders, `.sessions/<owner>/` holds the
session history of the CLIs that owner's sandbox runs (orchestrator/agents/sandbox.py) and `.used/<owner>`
the time of its last use, which retention reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gateway.home import safe_name
from gateway.models import IncomingPayload

BRANCH_PREFIX = "switchyard/"
GIT_TIMEOUT_SEC = 120


@dataclass(frozen=True)
class Owner:
    """Whose workspace a process works in: `kind` conversation or sender, `key` whom it names."""

    kind: str
    key: str

    @property
    def name(self) -> str:
        """The folder name: readable, and unique by its hash (two keys that clean up alike stay apart)."""
        digest = hashlib.sha256(f"{self.kind}\0{self.key}".encode()).hexdigest()[:16]
        return f"{self.kind}-{safe_name(self.key)[:40]}-{digest}"


def owner_of(kind: str, message: IncomingPayload) -> Owner | None:
    """The owner of a message's processes for `workspace: <kind>`; None for `shared`."""
    profile = message.channelProfileId or message.channel
    if kind == "conversation":
        return Owner(kind, f"{message.channel}/{profile}/{message.conversationId or message.senderId}")
    if kind == "sender":
        return Owner(kind, f"{message.channel}/{profile}/{message.senderId or message.sender}")
    return None


class OwnWorkspaces:
    """The owner workspaces of one orchestrator, under `root` (`<home>/workspaces/<orchestrator>`)."""

    def __init__(self, root: Path):
        self.root = root

    def folder(self, owner: Owner) -> Path:
        return self.root / owner.name

    def sessions(self, name: str) -> Path:
        """Where a owner's sandboxed CLIs keep their session history."""
        return self.root / ".sessions" / name

    def ensure(self, owner: Owner, *, template: Path | None = None, repository: Path | None = None) -> Path:
        """The owner's folder, made (and seeded) on first use under a lock, so two steps of one owner starting
        at once make it once; its last use is stamped."""
        folder = self.folder(owner)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / ".used").mkdir(exist_ok=True)
        if not folder.is_dir():
            with (self.root / ".used" / f"{owner.name}.lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not folder.is_dir():
                    _seed(folder, template, repository)
        self.stamp(owner.name)
        return folder

    def stamp(self, name: str) -> None:
        (self.root / ".used" / name).touch()

    def git_dir(self, folder: Path) -> Path | None:
        """The repository folder a worktree workspace commits into (its sandbox must reach it), else None."""
        marker = folder / ".git"
        if not marker.is_file():
            return None
        text = marker.read_text(encoding="utf-8").strip()
        if not text.startswith("gitdir:"):
            return None
        worktree = Path(text.removeprefix("gitdir:").strip())
        return worktree.parent.parent if worktree.parent.name == "worktrees" else None


def _seed(folder: Path, template: Path | None, repository: Path | None) -> None:
    """Makes a new workspace: a git worktree on its own branch, a copy of the template, or an empty folder."""
    if repository is not None:
        branch = BRANCH_PREFIX + folder.name
        exists = _git(repository, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0
        args = ["worktree", "add", str(folder), branch] if exists else ["worktree", "add", "-b", branch, str(folder)]
        done = _git(repository, *args)
        if done.returncode != 0:
            raise OSError(f"git worktree add in {repository} failed: {done.stderr.strip()[-300:]}")
        return
    partial = folder.with_name(f".{folder.name}.new")
    shutil.rmtree(partial, ignore_errors=True)
    if template is not None and template.is_dir():
        shutil.copytree(template, partial, symlinks=True)
    else:
        partial.mkdir(parents=True)
    os.replace(partial, folder)


def _git(repository: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_SEC, check=False)
