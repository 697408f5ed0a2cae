"""What an agent turn's span says (gateway/telemetry/tracing.py): the provider, how it ran, what it spent.

The prompt and the answer are content (`switchyard.content.*`): they reach a span only with
`telemetry.content: true`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gateway.telemetry.tracing import CONTENT

if TYPE_CHECKING:
    from gateway.settings import ProviderSettings
    from orchestrator.agents.request import TurnRequest
    from orchestrator.agents.spawn import ProviderResult


class ProviderRunner(Protocol):
    """What a turn's span reads of the runner (orchestrator.agents.providers.ProviderRunner, which imports this)."""

    def settings_of(self, name: str) -> ProviderSettings | None: ...


def turn_attributes(runner: ProviderRunner, name: str, turn: TurnRequest) -> dict[str, Any]:
    """At the turn's start: the provider, its type, transport and model, the run it is a step of."""
    provider = runner.settings_of(name)
    kind = "builtin" if provider is None else provider.type or "command"
    return {"switchyard.provider": name, "switchyard.provider_type": kind,
            "switchyard.transport": None if provider is None else provider.transport,
            "switchyard.model": None if provider is None else provider.model,
            "switchyard.run_id": turn.run, "switchyard.mode": turn.mode, CONTENT + "prompt": turn.prompt}


def turn_outcome(result: ProviderResult) -> dict[str, Any]:
    """At its end: how long it took, its exit code, the tokens and cost its CLI reported (and the answer)."""
    usage = result.usage
    return {"switchyard.duration_ms": result.duration_ms, "switchyard.exit_code": result.exit_code,
            "switchyard.timed_out": result.timed_out,
            "gen_ai.usage.input_tokens": None if usage is None else usage.tokens_in,
            "gen_ai.usage.output_tokens": None if usage is None else usage.tokens_out,
            "switchyard.cost_usd": None if usage is None else usage.usd, CONTENT + "answer": result.stdout}
