"""A handler for `switchyard run` (loaded through $SWITCHYARD_PLUGINS) whose turns ask for a tool approval:
the Orchestrator, except that a message starting with "deploy" is a turn that asks the conversation to
approve `make deploy` and answers with the option chosen (as an agent turn of helper acp will)."""

from __future__ import annotations

from typing import Any

from gateway import hookimpl
from gateway.models import IncomingPayload, OutgoingPayload
from orchestrator.agents.live import ApprovalOption, ToolApproval
from orchestrator.chat.handler import Orchestrator
from orchestrator.storage.stores import open_stores

TOOL = ToolApproval(title="Run: make deploy", options=(ApprovalOption("allow-1", "Allow once", "allow_once"),
                                                       ApprovalOption("reject-1", "Reject", "reject_once")))


class AskingOrchestrator(Orchestrator):
    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        if not message.message.startswith("deploy"):
            return await super().handle(message)
        choice = await self.permission_asker(message)(TOOL)
        return [OutgoingPayload.reply_to(message, f"deploy answered: {choice}", agent="test",
                                         timestamp=message.timestamp)]


@hookimpl
def switchyard_handler(context: Any) -> AskingOrchestrator:
    assert context.backend is not None
    return AskingOrchestrator(context, open_stores(context.backend))
