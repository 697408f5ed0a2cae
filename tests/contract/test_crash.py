"""No loss on a crash between any two steps of the message path (issue 21), on memory, files and postgres.

A host takes in one message (m1) and stops dead after one step (tests/contract/crashhost.py names them: eight
on memory, seven on files, six on postgres): on files and
postgres a real `switchyard run` is killed with SIGKILL there; on memory the host, on a thread of its own, is
dropped there without closing (its thread stays blocked; the shared state forgets its queue handle, as a dead
process's). A fresh host on the same backend and home then takes in m2 of the same conversation, and the test
waits for m2's reply: by then m1 was answered and delivered before it, or never will be.

Exactly once, apart from what spec 002 lets a crash do: the reply is written to the outbox before the message
leaves the queue (step 6), and a restart puts a claimed message back (error and recovery), so a crash after
the reply was stored and before the answer was recorded (DESIGN: duplicates are known by the answered index,
which records answers) answers the message again: two replies, both delivered. A crash after the handler
answered and before its reply was stored runs the handler again: one reply. On postgres the reply, the answer
and the message's completion are one transaction (gateway/backends/postgres/processing.py), so there is no such
window: a
crash after the transaction (or before it) gives one reply. A crash after a message was moved from the host's
spool into the shared store and before the spool's file was removed (memory, postgres) takes it in again at the
next start: postgres knows the name and bytes (gateway/backends/postgres/intake.py), memory lines it up twice and
the answered
index skips the second copy; either way one call and one reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from gateway.app import Gateway
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.testing import wait_until
from tests.contract.crashhost import PROFILE, STEPS, CrashHost, HostKilled, Stop, read_log, stop_after
from tests.process import SwitchyardProcess, clean_environment

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
# lease_sec: a killed postgres host's channel lease and jobs are taken over after 1 s; lock_ttl_sec: a dropped
# memory host's key lock (the memory backend looks no holder up: none can die) expires after 0.5 s
QUEUE = {"fsync": False, "poll_ms": 50, "backoff_initial_ms": 50, "backoff_max_ms": 200, "lease_sec": 1,
         "lock_ttl_sec": 0.5}
ONE_TRANSACTION = ("reply_stored", "answer_recorded")
"""Steps postgres stores in one transaction with `completed`: no crash can fall between them."""
RUN_AGAIN = ("answered", "reply_stored")
"""The crash points after which the fresh host runs the handler on m1 again."""
ANSWERED_TWICE = ("reply_stored",)
"""The crash point after which m1 has two replies (spec 002: stored before the message leaves the queue)."""
LACKS = {"memory": (), "files": ("in_store",), "postgres": ONE_TRANSACTION}
"""The steps a backend does not have: on files the spool (incoming/) is the queue itself."""
CASES = [pytest.param(kind, step, id=f"{kind}-{step}") for kind, lacks in LACKS.items()
         for step in STEPS if step not in lacks]


def spooled(home: Home) -> int:
    """Payload files in a home's incoming/ or processing/ (a host's spool; on files, the queue itself)."""
    return sum(1 for folder in (home.incoming, home.processing) for _ in folder.rglob("*.json"))


class ProcessHosts:
    """`switchyard run` processes on one home (and, for postgres, one database), one after the other."""

    def __init__(self, root: Path, log: Path, dsn: str | None):
        self.root = root
        self.log = log
        self.dsn = dsn
        self.home = Home(root / "home")
        self.home.create()
        queue = {**QUEUE, **({"backend": "postgres"} if dsn else {})}
        self.home.settings_file.write_text(yaml.safe_dump({"queue": queue,
                                                           "channels": [{"id": PROFILE, "type": "crash"}]}))

    def start(self, name: str, sends: list[str], halt: Stop) -> SwitchyardProcess:
        env = clean_environment({"SWITCHYARD_PLUGINS": "tests.contract.crashproc", "PYTHONPATH": str(REPO),
                                 "CRASH_HOST": name, "CRASH_LOG": str(self.log), "CRASH_SENDS": ",".join(sends),
                                 "CRASH_AT": halt.step or "", "CRASH_MARK": str(halt.mark),
                                 **({"SWITCHYARD_DSN": self.dsn} if self.dsn else {})})
        process = SwitchyardProcess(self.home.root, env, log=self.root / f"{name}.log")
        process.start()
        return process

    def kill(self, process: SwitchyardProcess) -> None:
        process.kill()

    def unsettled(self) -> int:
        """Messages taken in and not completed: in the spool (on files, the queue), or in rows not done."""
        if self.dsn is None:
            return spooled(self.home)
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT count(*) FROM switchyard_messages WHERE state <> 'done'").fetchone()
        assert row is not None
        return int(row[0]) + spooled(self.home)

    def stop(self, process: SwitchyardProcess) -> None:
        assert process.stop() == 0, process.output()[-3000:]

    def close(self) -> None:
        SwitchyardProcess.kill_started()


class ThreadHost:
    """An in-process host of the memory backend, on a thread and event loop of its own (so that stopping
    at a step blocks it and nothing else)."""

    def __init__(self, home: Home, settings: Settings, plugin: CrashHost, memory: MemoryBackendPlugin):
        self.plugin = plugin
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_host_killed)
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"host-{plugin.name}", daemon=True)
        self.thread.start()
        self.gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin, memory]))
        backend = self.gateway.runtime
        halt = plugin.halt
        if halt.step == "reply_stored":
            stop_after(backend.outbox, "write", "reply_stored", halt)
        if halt.step == "answer_recorded":
            stop_after(backend.processing.answered, "record", "answer_recorded", halt)  # type: ignore[attr-defined]
        if halt.step == "in_store":  # the runtime completes the spool's file once it is on the shared line
            stop_after(self.gateway.queue, "complete", "in_store", halt, before=True)
        self.run(self.gateway.start())
        self.loop.call_soon_threadsafe(plugin.go)  # after start() returned here: a stop may block the loop
        self.stopped = False

    def run(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    def stop(self) -> None:
        """Stops the gateway and ends the thread; a dropped host first leaves its step (HostKilled)."""
        if self.stopped:
            return
        self.stopped = True
        self.plugin.halt.released.set()
        try:
            self.run(self.gateway.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def _quiet_host_killed(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A dropped host's tasks that ended on HostKilled, let go at the end of the test, are no error."""
    if not isinstance(context.get("exception"), HostKilled):
        loop.default_exception_handler(context)


class MemoryHosts:
    """In-process hosts on one MemoryState and one home (the home holds replies: the memory backend has no
    outbox), one after the other."""

    def __init__(self, root: Path, log: Path):
        self.log = log
        self.home = Home(root / "home")
        self.memory = MemoryBackendPlugin()
        self.settings = memory_settings(Settings(queue=QueueSettings(**QUEUE),
                                                 channels=[ChannelProfile(id=PROFILE, type="crash")]))
        self.hosts: list[ThreadHost] = []

    def start(self, name: str, sends: list[str], halt: Stop) -> ThreadHost:
        plugin = CrashHost(name, self.log, halt, sends, send_when_started=False)
        host = ThreadHost(self.home, self.settings, plugin, self.memory)
        self.hosts.append(host)
        return host

    def kill(self, host: ThreadHost) -> None:
        """Drops the blocked host as the OS ends a dead process: the shared state forgets its queue handle (its
        claims are then any host's to put back; its key locks wait out their TTL), and the lock on its spool
        folder in the home is let go (what it holds there is recovered by the next start)."""
        host.gateway.runtime.processing.queue.close()  # type: ignore[attr-defined]
        host.gateway.queue.close()

    def stop(self, host: ThreadHost) -> None:
        host.stop()

    def unsettled(self) -> int:
        """Messages taken in and not completed: in the home's spool, in the shared line, or claimed."""
        queue = self.memory.state.queue
        with queue.lock:
            shared = len(queue.incoming) + len(queue.claimed)
        return shared + spooled(self.home)

    def close(self) -> None:
        for host in reversed(self.hosts):
            with contextlib.suppress(HostKilled):  # raised on where the host stood, should stop() meet it
                host.stop()


@pytest.fixture
def hosts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessHosts | MemoryHosts]:
    kind = request.node.callspec.params["kind"]
    log = tmp_path / "crash-log.jsonl"
    made: ProcessHosts | MemoryHosts
    if kind == "memory":
        made = MemoryHosts(tmp_path, log)
    else:
        made = ProcessHosts(tmp_path, log, request.getfixturevalue("db") if kind == "postgres" else None)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize(("kind", "step"), CASES)
def test_a_crash_after_any_step_loses_no_message_and_answers_it_once(kind: str, step: str, tmp_path: Path,
                                                                    hosts: Any) -> None:
    log = tmp_path / "crash-log.jsonl"
    halt = Stop(step, tmp_path / "stopped-at")
    first = hosts.start("host1", ["m1"], halt)
    wait_until(halt.mark.exists, 30)
    # where it stands: m1 not yet completed before `completed` (in the store and the spool at `in_store`), its
    # reply delivered only at `delivered`
    assert hosts.unsettled() == {"in_store": 2, "completed": 0, "delivered": 0}.get(step, 1), f"m1 at {step}"
    assert [reply["messageId"] for reply in read_log(log, "sent")] == (["m1"] if step == "delivered" else [])
    hosts.kill(first)
    second = hosts.start("host2", ["m2"], Stop(None, tmp_path / "never"))
    try:
        wait_until(lambda: any(sent["messageId"] == "m2" for sent in read_log(log, "sent")), 30)
    except AssertionError:
        pytest.fail(f"m2 was not delivered within 30 s of a crash at {step}: calls {read_log(log, 'call')}, "
                    f"deliveries {read_log(log, 'sent')}")
    hosts.stop(second)

    calls = [call["messageId"] for call in read_log(log, "call")]
    sent = [(reply["messageId"], reply["message"]) for reply in read_log(log, "sent")]
    runs = 2 if step in RUN_AGAIN else 1
    replies = 2 if step in ANSWERED_TWICE else 1
    assert calls == ["m1"] * runs + ["m2"], f"handler calls after a crash at {step}"
    assert sent == [("m1", "m1 answered")] * replies + [("m2", "m2 answered")], \
        f"replies delivered after a crash at {step} (lost, duplicated or out of order)"
    assert hosts.unsettled() == 0, f"a message is left queued or claimed after a crash at {step}"
