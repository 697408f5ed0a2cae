"""`switchyard doctor`'s look at an ACP adapter: does it start and answer `initialize`?"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from gateway.settings import ProviderSettings
from orchestrator.agents.acp.specs import adapter_argv, adapter_env


async def initializes(provider: ProviderSettings, env: Mapping[str, str], cwd: Path) -> str:
    """"initializes in N s (…)" or why it does not; the process (run in `cwd`, which exists) is stopped."""
    try:
        from orchestrator.agents.acp.agent import AdapterError, AgentProcess
    except ImportError as exc:
        return f"the `acp` extra is not installed ({exc}): pip install -e '.[acp]' in the clone"
    agent = AgentProcess(adapter_argv(provider), adapter_env(provider, env), cwd)
    started = time.monotonic()
    try:
        await agent.start()
    except AdapterError as exc:
        return f"does not initialize: {exc}"
    finally:
        await agent.stop()
    loads = "session/load supported" if agent.can_load else "no session/load: lost sessions are seeded"
    return f"initializes in {time.monotonic() - started:.1f} s ({loads})"
