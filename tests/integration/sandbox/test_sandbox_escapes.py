"""`sandbox: bwrap` with `workspace: conversation`: an agent of one conversation cannot read another's workspace
or uploads, the home's settings.yaml, the queue, another process's environment, nor write outside its workspace
(a fake CLI tries each directly); without the sandbox the same attempts succeed, so the test can fail."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.channelkit.attachments import attachment_folder
from gateway.home import Home
from gateway.settings import ProviderSettings
from tests.fakes.orchestrator import Flow

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

TRIER = """
import json, os, sys
asked = json.loads(sys.stdin.read().split("\\n", 1)[1])
done = {}
for name, path in asked["read"].items():
    try:
        with open(path, "rb") as handle:
            done[name] = "read " + str(len(handle.read()))
    except OSError as exc:
        done[name] = "failed: " + type(exc).__name__
try:
    with open(asked["write"], "w") as handle:
        handle.write("escaped")
    done["write outside"] = "wrote"
except OSError as exc:
    done["write outside"] = "failed: " + type(exc).__name__
with open("own.txt", "w") as handle:
    handle.write("mine")
done["write own"] = "wrote"
print(json.dumps(done))
"""

CONFIG = """
selector: {{provider: rules}}
reply_within_sec: 15
workspace: conversation
sandbox: {sandbox}
network: none
agents: {{trier: {{provider: trier, prompt: "{{{{message}}}}"}}}}
workflows:
  chat: {{description: Try, steps: [{{id: Try, agent: trier}}]}}
rules: {{default_workflow: chat}}
"""


def _targets(home: Home, bob_workspace: Path) -> dict[str, Any]:
    """The files an agent of Alice's conversation must not reach, made real first."""
    (home.root / "settings.yaml").write_text("channels: []\n", encoding="utf-8")
    queued = home.root / "queue" / "incoming" / "m9.json"
    queued.parent.mkdir(parents=True, exist_ok=True)
    queued.write_text('{"message": "bob\'s"}', encoding="utf-8")
    upload = attachment_folder(home, "console", "bob-chat") / "photo.jpg"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_bytes(b"bob's photo")
    return {"read": {"other workspace": str(bob_workspace / "own.txt"),
                     "settings.yaml": str(home.root / "settings.yaml"), "queue": str(queued),
                     "other upload": str(upload),
                     "gateway environ": f"/proc/{os.getpid()}/environ"},
            "write": str(home.root / "escaped.txt")}


async def _tries(flow: Callable[..., Any], home: Home, tmp_path: Path, sandbox: str) -> dict[str, str]:
    trier = tmp_path / "trier" / "trier.py"
    trier.parent.mkdir()
    trier.write_text(TRIER, encoding="utf-8")
    provider = ProviderSettings(command=["/usr/bin/python3", str(trier)], sandbox_paths=[str(trier.parent)])
    started: Flow = await flow(CONFIG.format(sandbox=sandbox), {"trier": provider})
    bob, _ = await started.send("bob\n{\"read\": {}, \"write\": \"own.txt\"}", conversationId="bob-chat",
                                senderId="bob")
    assert "write own" in bob.message, bob.message
    [bob_workspace] = [p for p in (home.root / "workspaces" / "main").iterdir() if "bob-chat" in p.name]
    assert (bob_workspace / "own.txt").read_text() == "mine"
    answer, _ = await started.send("alice\n" + json.dumps(_targets(home, bob_workspace)),
                                   conversationId="alice-chat", senderId="alice")
    tried: dict[str, str] = json.loads(answer.message)
    [alice_workspace] = [p for p in (home.root / "workspaces" / "main").iterdir() if "alice-chat" in p.name]
    assert (alice_workspace / "own.txt").read_text() == "mine"  # its own workspace stays writable
    return tried


async def test_every_escape_fails_in_the_sandbox(flow: Callable[..., Any], home: Home, tmp_path: Path) -> None:
    tried = await _tries(flow, home, tmp_path, "bwrap")
    assert tried.pop("write own") == "wrote"
    assert all(result.startswith("failed") for result in tried.values()), json.dumps(tried)
    assert not (home.root / "escaped.txt").exists()


async def test_without_the_sandbox_the_same_reads_succeed(flow: Callable[..., Any], home: Home,
                                                          tmp_path: Path) -> None:
    tried = await _tries(flow, home, tmp_path, "none")
    assert all(result.startswith(("read", "wrote")) for result in tried.values()), tried
    assert (home.root / "escaped.txt").read_text() == "escaped"


async def test_a_shared_workspace_keeps_its_orchestrator_yaml_read_only(flow: Callable[..., Any],
                                                                         workspace: Path) -> None:
    config = CONFIG.format(sandbox="bwrap").replace("workspace: conversation", "workspace: shared").replace(
        "agents: {trier: {provider: trier, prompt: \"{{message}}\"}}", "").replace(
        "steps: [{id: Try, agent: trier}]",
        "steps: [{id: Try, command: [sh, -c, \"echo x >> orchestrator.yaml || echo refused; touch mine && echo ok\"]}]")
    started: Flow = await flow(config)
    answer, _ = await started.send("try", conversationId="alice-chat", senderId="alice")
    assert "refused" in answer.message and "ok" in answer.message, answer.message
    assert "x" not in (workspace / "orchestrator.yaml").read_text().splitlines()
    assert (workspace / "mine").exists()  # the rest of the shared workspace is its to write
