"""Real Gateways of one backend, for the message-path contract (test_flow.py): hosts on one backend state
(memory: one MemoryState; files: one home; postgres: one database schema, a home per host), a fake
channel per host, and one scripted handler every host calls, which records what it was given."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gateway import hookimpl
from gateway.app import Gateway
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.testing import FakeChannel, async_wait_until, make_incoming
from tests.process import SwitchyardProcess, clean_environment

REPO = Path(__file__).resolve().parents[2]

PROFILE = "f1"
QUEUE = {"fsync": False, "max_attempts": 3, "backoff_initial_ms": 100, "backoff_max_ms": 200, "poll_ms": 50,
         "receipt_after_sec": 0, "max_concurrency": 8, "lease_sec": 2}


@dataclass
class Call:
    """One handler call: which host, which message (its sender, the message it edits), when, and how it ended
    (None while running)."""

    host: str
    message_id: str
    conversation: str
    start: float
    end: float = 0.0
    ok: bool | None = None
    sender: str = ""
    edit_of: str | None = None


@dataclass
class Script:
    """What the handler does per messageId: fail its first `fail[id]` attempts, wait for `gate[id]` (a
    condition, at most GATE_S) before answering, answer with `parts[id]` replies; `together` are
    messages that each wait (at most GATE_S) until all of them are in the handler at once."""

    fail: dict[str, int] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    parts: dict[str, int] = field(default_factory=dict)
    together: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    running: int = 0
    peak: int = 0
    entered_together: int = 0

    GATE_S = 3.0

    def of(self, message_id: str) -> list[Call]:
        return [call for call in self.calls if call.message_id == message_id]

    def answered(self, message_id: str) -> bool:
        return any(call.ok for call in self.of(message_id))

    async def handle(self, host: str, message: IncomingPayload) -> list[OutgoingPayload]:
        call = Call(host, message.messageId, message.conversation, time.monotonic(), sender=message.senderId,
                    edit_of=message.editOf)
        self.calls.append(call)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if message.messageId in self.together:
                self.entered_together += 1
                await _within(lambda: self.entered_together >= len(self.together))
            await asyncio.sleep(0.01)  # work that takes a moment, so hosts and keys overlap
            if self.fail.get(message.messageId, 0) > 0:
                self.fail[message.messageId] -= 1
                raise RuntimeError(f"scripted failure of {message.messageId}")
            gate = self.gate.get(message.messageId)
            if gate is not None and not await _within(gate):
                raise RuntimeError(f"{message.messageId}: its gate stayed shut")
            count = self.parts.get(message.messageId, 1)
            replies = [OutgoingPayload.reply_to(message, f"{message.message} part {n + 1}/{count}", agent="script",
                                                timestamp=message.timestamp) for n in range(count)]
            call.ok = True
            return replies
        except BaseException:
            call.ok = False
            raise
        finally:
            call.end = time.monotonic()
            self.running -= 1


async def _within(condition: Any) -> bool:
    try:
        await async_wait_until(condition, Script.GATE_S)
    except AssertionError:
        return False
    return True


class HostPlugin:
    """One host's fake channel and its handler (the shared Script, under this host's name)."""

    def __init__(self, host: str, script: Script):
        self.host = host
        self.script = script
        self.channel: FakeChannel | None = None
        self.context: Any = None

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        if profile.type != "fake":
            return None
        self.channel = FakeChannel("fake", profile.id)
        return self.channel

    @hookimpl
    def switchyard_handler(self, context: Any) -> HostPlugin:
        self.context = context  # gateway.api.HandlerContext: its `dead_letter` is the late dead letter
        return self

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return await self.script.handle(self.host, message)


@dataclass
class Host:
    gateway: Gateway
    plugin: HostPlugin
    stopped: bool = False

    @property
    def channel(self) -> FakeChannel:
        assert self.plugin.channel is not None
        return self.plugin.channel

    async def send(self, text: str, conversation: str, message_id: str | None = None) -> IncomingPayload:
        """One inbound message through this host's channel, as its platform would hand it over."""
        payload = make_incoming(text, channel="fake", channelProfileId=PROFILE, conversationId=conversation,
                                messageId=message_id or text)
        await async_wait_until(lambda: self.plugin.channel is not None and self.plugin.channel.sink is not None)
        assert self.channel.sink is not None
        await self.channel.sink(payload)
        return payload


class Flow:
    """The hosts of one backend, started on demand and stopped after the test."""

    def __init__(self, kind: str, root: Path, *, dsn: str | None = None):
        self.kind = kind
        self.root = root
        self.dsn = dsn
        self.script = Script()
        self.hosts: list[Host] = []
        self.memory = MemoryBackendPlugin()
        self.processes: list[SwitchyardProcess] = []
        self.process_calls = root / "process-calls.jsonl"

    async def host(self, **queue: Any) -> Host | None:
        """A started Gateway on this backend's state. A second one on postgres is a `worker` (processing only,
        as `switchyard worker` scales out): hosts in one process share a lease holder (gateway.disk.locks
        process_instance), so two `run`s here would both own the channel and both deliver each reply."""
        name = f"host{len(self.hosts) + 1}"
        role = "worker" if self.kind == "postgres" and self.hosts else "run"
        values = {**QUEUE, **queue}
        if self.kind == "postgres":
            values["backend"] = "postgres"
        settings = Settings(queue=QueueSettings(**values), channels=[ChannelProfile(id=PROFILE, type="fake")])
        plugin = HostPlugin(name, self.script)
        extra: list[object] = [plugin]
        if self.kind == "memory":
            settings = memory_settings(settings)
            extra.append(self.memory)
        if self.kind == "files" and self.hosts:
            return await self._process_host(name, values)
        home = Home(self.root / (name if self.kind != "files" else "home"))
        gateway = Gateway(home, settings, build_plugin_manager(settings, extra=extra), role=role)
        await gateway.start()
        host = Host(gateway, plugin)
        self.hosts.append(host)
        return host

    async def _process_host(self, name: str, queue: dict[str, Any]) -> None:
        """A second file-backend host: a `switchyard run` process on the same home (SharedHome and
        LockDirectory know a process by its pid, so a second one in this process would be the same one),
        with no channel (the first host's dispatcher sends what it answers) and the handler of
        tests/contract/flowhost.py; returns once the home is shared."""
        first = self.hosts[0].gateway
        (first.home.root / "settings.yaml").write_text(yaml.safe_dump({"queue": queue}))
        env = clean_environment({"SWITCHYARD_PLUGINS": "tests.contract.flowhost", "FLOW_HOST": name,
                                 "FLOW_CALLS": str(self.process_calls), "PYTHONPATH": str(REPO)})
        process = SwitchyardProcess(first.home.root, env, log=self.root / f"{name}.log")
        await asyncio.to_thread(process.start)
        self.processes.append(process)
        await async_wait_until(lambda: first.runtime.home_mode == "shared", 20)

    def calls(self) -> list[Call]:
        """Every handler call of every host, the process hosts' included."""
        lines = self.process_calls.read_text().splitlines() if self.process_calls.exists() else []
        return [*self.script.calls, *(Call(**json.loads(line)) for line in lines)]

    def sent(self, conversation: str) -> list[OutgoingPayload]:
        """What every host's channel sent to `conversation`, in the order each sent it (host by host)."""
        return [reply for host in self.hosts if host.plugin.channel is not None
                for reply in host.plugin.channel.sent if reply.conversationId == conversation]

    def texts(self, conversation: str) -> list[str]:
        return [reply.message for reply in self.sent(conversation)]

    async def stop(self) -> None:
        """Stops every host (their in-flight work finished or given back); the hosts stay readable."""
        while self.processes:
            process = self.processes.pop()
            assert await asyncio.to_thread(process.stop) == 0, process.output()[-2000:]
        for host in reversed(self.hosts):
            if not host.stopped:
                host.stopped = True
                await host.gateway.stop()
