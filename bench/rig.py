"""An in-process gateway on a fresh home with the bench channel, and the payloads the bench sends."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.plugin import BenchChannel, BenchPlugin
from gateway.app import Gateway
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.runtime.containment import supervise_children
from gateway.settings import ChannelProfile, QueueSettings, Settings

# No workflows: the built-in `rules` selector answers every message with command_invoke list_workflows,
# so each message runs the whole selector phase (request file, in-process provider, result file, action).
LIGHT_ORCHESTRATOR = "selector: {provider: rules}\ndiagnostics: {provider: rules}\nworkflows: {}\n"
# The embedded default: rules → workflow `chat` → the echo agent (a run per message, in runs/).
WORKFLOW_ORCHESTRATOR = (
    "selector: {provider: rules}\ndiagnostics: {provider: rules}\n"
    "agents: {echo: {provider: echo, prompt: 'You said: {{message}}'}}\n"
    "workflows: {chat: {description: Reply, steps: [{id: Reply, agent: echo}]}}\n"
    "rules: {default_workflow: chat}\n"
)


def payload(index: int, conversations: int, *, channel: str = "bench", profile: str = "bench") -> IncomingPayload:
    """Message `index` of a batch spread round-robin over `conversations` conversations."""
    conversation = f"c{index % conversations}"
    return IncomingPayload(channel=channel, channelProfileId=profile, sender="Ada", senderId=conversation,
                           message=f"hello, this is benchmark message number {index}", timestamp=1_700_000_000_000,
                           messageId=f"m{index:07d}", conversationId=conversation)


def bench_settings(*, fsync: bool, channels: bool = True, **queue: Any) -> Settings:
    """Settings with the given queue options and (optionally) one `bench` channel profile."""
    profiles = [ChannelProfile(id="bench", type="bench")] if channels else []
    return Settings(queue=QueueSettings(fsync=fsync, **queue), channels=profiles)


def write_home(root: Path, settings: Settings, orchestrator: str = LIGHT_ORCHESTRATOR) -> Home:
    """Creates a home with settings.yaml (JSON is YAML) and the orchestrator.yaml given."""
    home = Home(root)
    home.create()
    home.settings_file.write_text(json.dumps(settings.model_dump(mode="json", exclude_defaults=True)))
    workspace = home.orchestrators / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(orchestrator)
    return home


def order_problems(delivered: list[tuple[str, str, int]]) -> int:
    """How many deliveries came before an earlier message of their own conversation."""
    last: dict[str, str] = {}
    problems = 0
    for conversation, message_id, _ in delivered:
        if last.get(conversation, "") > message_id:
            problems += 1
        last[conversation] = message_id
    return problems


class Rig:
    """`async with Rig(...) as rig`: a started Gateway object and its bench channel."""

    def __init__(self, root: Path, settings: Settings, orchestrator: str = LIGHT_ORCHESTRATOR, *,
                 expected: int = 0, extra: Sequence[object] = ()):
        self.home = write_home(root, settings, orchestrator)
        self.settings = settings
        self.plugin = BenchPlugin(expected)
        plugins = [self.plugin, *extra]
        self.gateway = Gateway(self.home, settings, build_plugin_manager(settings, extra=plugins))

    @property
    def channel(self) -> BenchChannel:
        return self.plugin.channels[0]

    async def __aenter__(self) -> Rig:
        logging.getLogger("switchyard").setLevel(logging.ERROR)
        supervise_children()  # as `switchyard run` does (gateway.app.run_gateway)
        await self.gateway.start()
        # The chat tools' server starts in the background (importing mcp and uvicorn: ~0.4 s of CPU, once, which
        # bench.firstreply measures); the figures here are per message, so they start once it listens.
        tools = getattr(self.gateway.handler, "chat_tools", None)
        if tools is not None:
            await tools.started()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.gateway.stop()
