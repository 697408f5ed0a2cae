"""The fake ACP adapter of tests/fakes/acp/fake_agent.py (`--like claude|codex|gemini`), except that a tool
call the user allowed really runs: `[run=CMD]` runs CMD (split as a shell would, no shell) once the
permission came back allowed, as a real agent runs its tool. What a test then checks is the tool's effect
(a file it created), not the agent's word for it."""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.fakes.acp import fake_agent  # noqa: E402


class ToolRunningAgent(fake_agent.FakeAgent):
    """The fake agent whose allowed `[run=CMD]` runs CMD."""

    async def _ask(self, session_id: str, command: str) -> bool | None:
        allowed = await super()._ask(session_id, command)
        if allowed:
            tool = await asyncio.create_subprocess_exec(*shlex.split(command))
            if await asyncio.wait_for(tool.wait(), 30) != 0:
                raise RuntimeError(f"the tool failed: {command}")
        return allowed


if __name__ == "__main__":
    fake_agent.FakeAgent = ToolRunningAgent  # type: ignore[misc]  # main() builds the agent by this name
    fake_agent.main()
