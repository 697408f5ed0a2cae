"""A ProviderRunner whose `transport: acp` providers run the fake adapters of tests/fakes/acp/fake_agent.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from orchestrator.agents.live import PermissionAsker, TextSink
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from tests.fakes.acp.procs import group_members
from tests.fakes.orchestrator import API_PREFIX
from tests.fakes.stores import file_sessions
from tests.process import pid_alive

FAKE_AGENT = Path(__file__).resolve().with_name("fake_agent.py")
CONV = "conv:console/main/c1"
ACP_BIN = Path(os.environ.get("ACP_PREFIX", "/opt/acp")) / "node_modules" / ".bin"
CLIS_BIN = Path(os.environ.get("AGENT_CLIS_PREFIX", "/opt/agent-clis")) / "node_modules" / ".bin"
ADAPTER = {"claude": ACP_BIN / "claude-agent-acp", "codex": ACP_BIN / "codex-acp", "gemini": CLIS_BIN / "gemini"}


def fake_provider(like: str, **settings: Any) -> ProviderSettings:
    """A preset of `like`'s type running the fake adapter that behaves like it."""
    return ProviderSettings(type=like, transport="acp",  # type: ignore[arg-type]
                            acp_command=[sys.executable, str(FAKE_AGENT), "--like", like], **settings)


def real_provider(like: str, url: str, key_variable: str, **settings: Any) -> ProviderSettings:
    """A preset of `like` running its REAL adapter against a fake model at `url` (skips when it is not installed):
    claude and codex through `acp_command`, gemini through `binary` (its `--acp --model` argv)."""
    adapter = ADAPTER[like]
    if not (adapter.exists() and os.access(adapter, os.X_OK)):
        pytest.skip(f"the real {like} ACP adapter is not installed ({adapter})")
    if shutil.which("node") is None:
        pytest.skip("the real ACP adapters need node, which is not on PATH")
    chosen: dict[str, Any] = {"model": {"codex": "gpt-5.4", "gemini": "gemini-fake"}.get(like)}
    if like == "claude":  # the Claude Code the one-shot preset runs, not the adapter's bundled one
        chosen["binary"] = str(CLIS_BIN / "claude") if (CLIS_BIN / "claude").exists() else None
    if like == "gemini":
        chosen["binary"] = str(adapter)
    chosen |= settings
    command = None if like == "gemini" else [str(adapter)]
    return ProviderSettings(type=like, transport="acp", acp_command=chosen.pop("acp_command", command),  # type: ignore[arg-type]
                            base_url=url + API_PREFIX[like], api_key_env=key_variable, timeout_sec=120, **chosen)


class Harness:
    """One runner, its fake agents' state folder, and a turn helper."""

    def __init__(self, home: Home, tmp: Path, providers: dict[str, ProviderSettings],
                 secret_env: frozenset[str] = frozenset(), minute_sec: float = 0.001):
        self.home, self.state = home, tmp / "agents"
        self.events = EventLog(home.events_file) if hasattr(home, "events_file") else None
        self.runner = ProviderRunner(home, providers, {}, hidden_env=secret_env, events=self.events,
                                     sessions=file_sessions(home))
        self.cwd = tmp / "ws"
        self.env = {"FAKE_ACP_STATE": str(self.state), "FAKE_ACP_MINUTE_SEC": str(minute_sec)}

    async def turn(self, name: str, prompt: str, *, conversation: str | None = CONV, on_text: TextSink | None = None,
                   ask: PermissionAsker | None = None) -> str:
        turn = TurnRequest(prompt, self.cwd, env=self.env, conversation=conversation, on_text=on_text, ask=ask)
        result = await self.runner.run(name, turn)
        return result.stdout

    def agent_pids(self) -> list[int]:
        """Every fake agent process started so far (each writes a mark into the state folder)."""
        return [int(p.name.removeprefix("pid-")) for p in self.state.glob("pid-*")]

    def live_pids(self) -> list[int]:
        """The pids of the adapter processes the pool runs now."""
        pool = self.runner.acp.pool
        return [] if pool is None else [a.pid for a in pool.agents() if a.pid is not None]

    async def close(self) -> None:
        await self.runner.close()


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in the process group `pgid`."""
    return any(pid_alive(int(str(member["pid"]))) for member in group_members(pgid))


def kill9(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)


def any_alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if pid_alive(pid) or group_alive(pid)]


def kill_left(pids: list[int]) -> None:
    """SIGKILLs what a failed test left of these agents' groups."""
    for pid in any_alive(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
