"""`workspace: conversation` with `workspaces.repository`: each conversation edits the project in a git worktree of
its own (branch `switchyard/<scope>`), so two conversations never see each other's changes; `template` seeds a copy;
`switchyard workspaces` lists and cleans them."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from orchestrator.workspaces.owners import Owner, OwnWorkspaces
from orchestrator.workspaces.retention import listed, remove, stale
from tests.fakes.orchestrator import Flow

CONFIG = """
selector: {{provider: rules}}
reply_within_sec: 15
workspace: conversation
workspaces: {{{seed}}}
sandbox: {sandbox}
network: none
workflows:
  chat:
    description: Edit
    steps:
      - id: Edit
        command: [sh, -c, "echo '{{{{message}}}}' >> notes.txt; cat notes.txt; git status --short 2>/dev/null || true"]
rules: {{default_workflow: chat}}
"""


def _project(workspace: Path) -> Path:
    project = workspace / "project"
    project.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@example.com"], ["config", "user.name", "T"]):
        subprocess.run(["git", "-C", str(project), *args], check=True)
    (project / "notes.txt").write_text("start\n")
    subprocess.run(["git", "-C", str(project), "add", "."], check=True)
    subprocess.run(["git", "-C", str(project), "commit", "-qm", "start"], check=True)
    return project


def _branches(project: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(project), "branch", "--list", "--format=%(refname:short)", "switchyard/*"],
                          capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_two_conversations_edit_one_project_each_seeing_only_its_own_changes(
    flow: Callable[..., Any], workspace: Path, home: Home, sandbox: str,
) -> None:
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    project = _project(workspace)
    started: Flow = await flow(CONFIG.format(seed="repository: project", sandbox=sandbox))
    alice, _ = await started.send("alice was here", conversationId="alice-chat", senderId="alice")
    bob, _ = await started.send("bob was here", conversationId="bob-chat", senderId="bob")
    again, _ = await started.send("alice again", conversationId="alice-chat", senderId="alice")
    assert "alice was here" in alice.message and "bob" not in alice.message, alice.message
    assert "bob was here" in bob.message and "alice" not in bob.message, bob.message
    assert "alice again" in again.message and "bob" not in again.message, again.message
    assert "M notes.txt" in again.message  # a worktree: git sees its own change
    assert (project / "notes.txt").read_text() == "start\n"  # the project itself is untouched
    branches = _branches(project)
    assert len(branches) == 2, branches


async def test_a_template_seeds_each_new_workspace(flow: Callable[..., Any], workspace: Path) -> None:
    (workspace / "seed").mkdir()
    (workspace / "seed" / "notes.txt").write_text("from the template\n")
    started: Flow = await flow(CONFIG.format(seed="template: seed", sandbox="none"))
    answer, _ = await started.send("mine", conversationId="carol-chat", senderId="carol")
    assert answer.message.startswith("from the template\nmine"), answer.message
    assert (workspace / "seed" / "notes.txt").read_text() == "from the template\n"


def test_unused_workspaces_are_listed_with_their_size_and_cleaned(home: Home) -> None:
    spaces = OwnWorkspaces(home.root / "workspaces" / "main")
    old, new = Owner("conversation", "console/console/old"), Owner("conversation", "console/console/new")
    (spaces.ensure(old) / "big.bin").write_bytes(b"x" * 5000)
    spaces.ensure(new)
    stamp = spaces.root / ".used" / old.name
    ten_days_ago = time.time() - 10 * 86400
    os.utime(stamp, (ten_days_ago, ten_days_ago))
    infos = {info.name: info for info in listed(spaces)}
    assert infos[old.name].size_bytes == 5000 and infos[new.name].size_bytes == 0
    [gone] = stale(spaces, older_than_days=7)
    assert gone.name == old.name
    remove(spaces, gone)
    assert [info.name for info in listed(spaces)] == [new.name]


async def test_a_running_orchestrator_removes_workspaces_unused_past_their_retention(
    flow: Callable[..., Any], home: Home,
) -> None:
    spaces = OwnWorkspaces(home.root / "workspaces" / "main")
    old = Owner("conversation", "console/console/long-gone")
    spaces.ensure(old)
    long_ago = time.time() - 30 * 86400
    os.utime(spaces.root / ".used" / old.name, (long_ago, long_ago))
    started: Flow = await flow(CONFIG.format(seed="retention_days: 7", sandbox="none"))
    answer, _ = await started.send("hello", conversationId="dave-chat", senderId="dave")
    assert "hello" in answer.message
    assert [info.name for info in listed(spaces)] == [Owner("conversation", "console/console/dave-chat").name]


async def test_a_workflows_sender_workspace_follows_its_sender_across_conversations(flow: Callable[..., Any]) -> None:
    config = CONFIG.format(seed="", sandbox="none").replace("workspace: conversation", "workspace: shared").replace(
        "    description: Edit\n", "    description: Edit\n    workspace: sender\n")
    started: Flow = await flow(config)
    await started.send("erin in a", conversationId="a", senderId="erin")
    both, _ = await started.send("erin in b", conversationId="b", senderId="erin")
    other, _ = await started.send("frank in a", conversationId="a", senderId="frank")
    assert both.message.splitlines()[:2] == ["erin in a", "erin in b"], both.message
    assert other.message.splitlines()[:1] == ["frank in a"], other.message
