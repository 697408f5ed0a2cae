"""The REAL claude, codex and gemini CLIs (one-shot presets) in `sandbox: bwrap` with `network: model-only`, driven
by the scripted model (tests/fakes/acp/scripted_model.py) whose shell tool call tries every escape: another
conversation's workspace and upload, the home's settings.yaml, queue/, the gateway's /proc environ, a write outside
the workspace. Inside the sandbox each fails and the model is still reached (through the relay); unconfined, the
same tool call reads them all, so the test can fail."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.channelkit.attachments import attachment_folder
from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.sandbox import Sandbox
from tests.fakes.acp.scripted_model import ScriptedModel
from tests.fakes.orchestrator import API_PREFIX, isolate_real_cli
from tests.fakes.stores import file_sessions

CLIS = Path("/opt/agent-clis/node_modules/.bin")
KEY_VARIABLE = "SWITCHYARD_REAL_SANDBOX_TEST_KEY"
CONV = "conv:console/console/alice-chat"
EDIT: dict[str, dict[str, Any]] = {
    "claude": {"mode": "edit", "allowed_tools": ["Bash"]},
    "codex": {"mode": "edit", "model": "gpt-5.4"},
    "gemini": {"mode": "edit", "model": "gemini-fake", "extra_args": ["--allowed-tools", "run_shell_command"]},
}
# the control run goes without any sandbox: codex's own (workspace-write) would refuse the write outside too
UNCONFINED = {"codex": {"extra_args": ["--dangerously-bypass-approvals-and-sandbox"]}}

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("node") is None,
                                reason="needs bubblewrap (bwrap) and node")


@pytest.fixture
def home_off_tmp() -> Iterator[Home]:
    """A home outside /tmp: codex's own sandbox (nested in ours) refuses a CODEX_HOME under /tmp
    (orchestrator/agents/acp/specs.py temp_home_problem), where pytest's tmp_path is."""
    root = Path(tempfile.mkdtemp(prefix="switchyard-sandbox-test-", dir="/var/tmp"))
    try:
        yield Home(root / "home")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _targets(home: Home) -> tuple[dict[str, Path], Path, Path]:
    """The files only Bob's conversation or the gateway may read, Alice's workspace, and where a write escapes."""
    spaces = home.root / "workspaces" / "main"
    alice, bob = spaces / "conversation-alice", spaces / "conversation-bob"
    for folder in (alice, bob):
        folder.mkdir(parents=True, exist_ok=True)
    (bob / "notes.txt").write_text("bob's notes\n")
    (home.root / "settings.yaml").write_text("channels: []\n")
    queued = home.root / "queue" / "incoming" / "m1.json"
    queued.parent.mkdir(parents=True, exist_ok=True)
    queued.write_text("{}\n")
    upload = attachment_folder(home, "console", "bob-chat") / "photo.jpg"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_text("jpeg\n")
    reads = {"ws": bob / "notes.txt", "set": home.root / "settings.yaml", "q": queued, "up": upload,
             "env": Path(f"/proc/{os.getpid()}/environ")}
    return reads, alice, home.root / "escaped.txt"


def _command(reads: dict[str, Path], escape: Path) -> str:
    """One shell line printing `R-<label>` for each read (or write) that succeeded, `D-<label>` for each denied,
    all on one short line (the scripted model quotes the first 400 characters of the tool's output)."""
    tries = "; ".join(f"cat {path} >/dev/null 2>&1 && printf R-{label}, || printf D-{label},"
                      for label, path in reads.items())
    return f"{tries}; (echo x > {escape}) 2>/dev/null && echo R-wr || echo D-wr"


@pytest.mark.parametrize("confined", [True, False], ids=["sandboxed", "unconfined"])
@pytest.mark.parametrize("like", sorted(EDIT))
async def test_a_real_clis_tool_call_reaches_nothing_past_its_workspace(
    home_off_tmp: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str, confined: bool,
) -> None:
    binary = CLIS / like
    if not binary.exists():
        pytest.skip(f"the real {like} CLI is not installed ({binary})")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-sandbox-{like}")
    home = home_off_tmp
    reads, alice, escape = _targets(home)
    async with ScriptedModel() as model:
        settings = EDIT[like] | (UNCONFINED.get(like, {}) if not confined else {})
        provider = ProviderSettings(type=like, binary=str(binary), base_url=model.url + API_PREFIX[like],  # type: ignore[arg-type]
                                    api_key_env=KEY_VARIABLE, timeout_sec=120, **settings)
        runner = ProviderRunner(home, {"agent": provider}, {}, sessions=file_sessions(home))
        sandbox = Sandbox(alice, network="model-only", hidden=(home.root,),
                          state=home.root / "workspaces" / "main" / ".sessions" / "alice") if confined else None
        prompt = f"try these [sandboxed={_command(reads, escape)}]" if like == "codex" else \
            f"try these [run={_command(reads, escape)}]"
        result = await runner.run("agent", TurnRequest(prompt, alice, conversation=CONV, sandbox=sandbox))
    quoted = [call.answer for call in model.calls if call.answer.startswith("the tool said")]
    assert quoted, result.stdout  # the model was reached, the tool ran, its output came back to the model
    said = quoted[-1]
    labels = [*reads, "wr"]
    if confined:
        assert all(f"D-{label}" in said for label in labels), said
        assert not escape.exists()
    else:
        assert all(f"R-{label}" in said for label in labels), said


@pytest.mark.parametrize("like", ["claude", "codex", "gemini"])
async def test_a_real_live_adapters_tool_call_reaches_nothing_past_its_workspace(
    home_off_tmp: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str,
) -> None:
    """The same escapes from a live ACP session (the adapter, and the CLI it runs, inside the sandbox)."""
    from tests.fakes.acp.helpers import real_provider

    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-sandbox-acp-{like}")
    home = home_off_tmp
    reads, alice, escape = _targets(home)
    async with ScriptedModel() as model:
        provider = real_provider(like, model.url, KEY_VARIABLE, permissions="allow")
        runner = ProviderRunner(home, {"agent": provider}, {}, sessions=file_sessions(home))
        sandbox = Sandbox(alice, network="model-only", hidden=(home.root,),
                          state=home.root / "workspaces" / "main" / ".sessions" / "alice")
        try:
            await runner.run("agent", TurnRequest(f"try these [sandboxed={_command(reads, escape)}]", alice,
                                                  conversation=CONV, sandbox=sandbox))
        finally:
            await runner.close()
    assert runner.acp.fallen_back == {}  # the live adapter ran, not the one-shot preset
    quoted = [call.answer for call in model.calls if call.answer.startswith("the tool said")]
    assert quoted, [call.summary() for call in model.calls]
    assert all(f"D-{label}" in quoted[-1] for label in [*reads, "wr"]), quoted[-1]
    assert not escape.exists()


@pytest.mark.parametrize("like", sorted(EDIT))
async def test_a_real_cli_in_the_sandbox_keeps_its_conversations_memory_in_the_scopes_own_history(
    home_off_tmp: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str,
) -> None:
    """The CLI's session folder is the scope's (`.sessions/<scope>/`): a second turn remembers the first, the
    user's own folder gets none of it, and claude's superseded forks are removed there (one transcript)."""
    binary = CLIS / like
    if not binary.exists():
        pytest.skip(f"the real {like} CLI is not installed ({binary})")
    user_home = isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-sandbox-{like}")
    home = home_off_tmp
    _, alice, _ = _targets(home)
    state = home.root / "workspaces" / "main" / ".sessions" / "alice"
    async with ScriptedModel() as model:
        provider = ProviderSettings(type=like, binary=str(binary), base_url=model.url + API_PREFIX[like],  # type: ignore[arg-type]
                                    api_key_env=KEY_VARIABLE, timeout_sec=120, model=EDIT[like].get("model"))
        runner = ProviderRunner(home, {"agent": provider}, {}, sessions=file_sessions(home))
        sandbox = Sandbox(alice, network="model-only", hidden=(home.root,), state=state)
        for prompt in ("remember the word zebra, then say ok", "which word? [recall=zebra]", "still? [recall=zebra]"):
            result = await runner.run("agent", TurnRequest(prompt, alice, conversation=CONV, sandbox=sandbox))
    assert result.stdout.startswith("recall zebra: yes"), result.stdout
    kept = [path for path in (state / like).rglob("*") if path.is_file()]
    assert kept, f"no session history in {state / like}"
    if like == "claude":
        assert len(list((state / "claude" / "projects").glob("*/*.jsonl"))) == 1
        assert not list((user_home / ".claude" / "projects").glob("*/*.jsonl"))


FLOW = """
selector: {provider: rules}
reply_within_sec: 60
workspace: conversation
sandbox: bwrap
agents: {coder: {provider: claude, prompt: "{{message}}"}}
workflows:
  chat: {description: Code, allow: [member], steps: [{id: Code, agent: coder}]}  # an edit workflow: admin-only else
rules: {default_workflow: chat}
"""


async def test_real_claude_through_a_workflow_each_conversation_confined_to_its_own_workspace(
    flow: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """orchestrator.yaml's `workspace: conversation` and `sandbox: bwrap` as a user writes them: Bob's agent writes
    in its workspace, Alice's cannot read it (nor the rest), and writes only in its own."""
    if not (CLIS / "claude").exists():
        pytest.skip("the real claude CLI is not installed")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-sandbox-flow")
    async with ScriptedModel() as model:
        provider = ProviderSettings(type="claude", binary=str(CLIS / "claude"), base_url=model.url + "/anthropic",
                                    api_key_env=KEY_VARIABLE, timeout_sec=120, mode="edit", allowed_tools=["Bash"])
        started = await flow(FLOW, {"claude": provider})
        await started.send("note it [run=echo bob-secret > notes.txt && echo done]", conversationId="bob-chat",
                           senderId="bob")
        [bob] = [p for p in (home.root / "workspaces" / "main").iterdir() if "bob-chat" in p.name]
        assert (bob / "notes.txt").read_text().strip() == "bob-secret"
        reads, _, escape = _targets(home)
        reads["ws"] = bob / "notes.txt"
        answer, _ = await started.send(f"try [run={_command(reads, escape)}; echo mine > own.txt]",
                                       conversationId="alice-chat", senderId="alice")
    assert all(f"D-{label}" in answer.message for label in [*reads, "wr"]), answer.message
    [alice] = [p for p in (home.root / "workspaces" / "main").iterdir() if "alice-chat" in p.name]
    assert (alice / "own.txt").read_text().strip() == "mine" and not escape.exists()
