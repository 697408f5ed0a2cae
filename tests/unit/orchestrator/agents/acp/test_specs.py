"""orchestrator/agents/acp/specs.py: the token an adapter's environment carries is its own (an adapter outlives
its turns, so it carries no run's token for a run's end to find), fresh for each adapter process."""

from __future__ import annotations

from gateway.runtime.orphans import TOKEN_VAR
from gateway.settings import ProviderSettings
from orchestrator.agents.acp.specs import adapter_env


def test_each_adapter_gets_a_fresh_token_of_its_own_whatever_it_inherits() -> None:
    codex = ProviderSettings.model_validate({"type": "codex", "transport": "acp"})
    inherited = {"PATH": "/usr/bin:/bin", TOKEN_VAR: "a-run-of-the-process-that-started-the-gateway"}
    first, second = adapter_env(codex, inherited)[TOKEN_VAR], adapter_env(codex, inherited)[TOKEN_VAR]
    assert first != inherited[TOKEN_VAR] and second != inherited[TOKEN_VAR], "an inherited token is replaced"
    assert first != second, "two adapter processes share a token"
