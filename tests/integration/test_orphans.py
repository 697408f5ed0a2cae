"""gateway/runtime/orphans.py with real processes: what a gateway process that died left running on its home is
ended by the sweep (its whole process group: a run, or a warm ACP adapter), and nothing else is: not a process
whose gateway runs, not another home's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import app
from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.runtime import orphans
from gateway.runtime.containment import TOKEN_VAR
from gateway.settings import QueueSettings, Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until, wait_until
from tests.process import pid_alive

# A gateway process as far as tokens go: it claims its home, starts a process in its own session with the
# environment a run (spawn) or an ACP adapter (acp/specs.py) gets, a shell whose child sleeps, prints the shell's
# pid and exits without ending it.
DEAD_GATEWAY = """
import subprocess, sys
from pathlib import Path
from gateway.runtime import containment, orphans
from gateway.settings import ProviderSettings
from orchestrator.agents.acp.specs import adapter_env
orphans.claim(Path(sys.argv[1]))
env = {environment}
run = subprocess.Popen(["sh", "-c", "sleep 60 & echo $! > " + sys.argv[2] + "; wait"], env=env,
                       start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(run.pid, flush=True)
"""
RUN_ENV = 'containment.tagged({"PATH": "/usr/bin:/bin"})[0]'
ADAPTER_ENV = 'adapter_env(ProviderSettings(type="codex", transport="acp"), {"PATH": "/usr/bin:/bin"})'


Started = list["int | subprocess.Popen[bytes]"]


@pytest.fixture
def groups() -> Iterator[Started]:
    """The process groups a test started (by leader: a pid, or our child): killed at the end whatever happened."""
    started: Started = []
    yield started
    for leader in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader if isinstance(leader, int) else leader.pid, signal.SIGKILL)
        if not isinstance(leader, int):
            leader.wait()


def _left_by_a_dead_gateway(home: Path, tmp_path: Path, groups: Started,
                            environment: str = RUN_ENV) -> tuple[int, int]:
    """The shell and its sleeping child that a gateway process of `home` started and left running when it exited."""
    child_file = tmp_path / f"child-{uuid.uuid4().hex}"
    script = DEAD_GATEWAY.format(environment=environment)
    gateway = subprocess.run([sys.executable, "-c", script, str(home), str(child_file)], capture_output=True,
                             text=True, check=True, timeout=30)
    shell = int(gateway.stdout)
    groups.append(shell)
    child = int(wait_until(lambda: child_file.exists() and child_file.read_text().strip(), 10))
    assert pid_alive(shell) and pid_alive(child), "the run outlives the gateway process that started it"
    return shell, child


def _run_of_this_process(home: Path, groups: Started) -> int:
    """A run in its own session whose token names this (live) process as the gateway of `home`."""
    me = orphans.Owner(orphans.home_id(home), orphans.pid_namespace(), os.getpid(),
                       orphans.start_time(os.getpid()) or "-")
    env = {"PATH": "/usr/bin:/bin", TOKEN_VAR: f"{me.label()}:{uuid.uuid4().hex}"}
    run = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    groups.append(run)
    return run.pid


def test_the_sweep_ends_the_group_a_dead_gateway_left_and_says_so(tmp_path: Path, groups: Started) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shell, child = _left_by_a_dead_gateway(home, tmp_path, groups)
    events = EventLog(tmp_path / "events.jsonl")
    try:
        ended = orphans.sweep(home, events)
    finally:
        events.close()
    assert [orphan.group for orphan in ended] == [shell]
    wait_until(lambda: not pid_alive(shell) and not pid_alive(child), 5)
    [event] = [e for e in read_events(tmp_path / "events.jsonl") if e["event"] == "process.orphan_ended"]
    assert event["pid"] == shell and event["program"] == "sh", event
    assert TOKEN_VAR not in str(event) and "PATH" not in str(event), "no environment in the event"
    assert orphans.sweep(home) == [], "nothing is left for a second sweep"


def test_the_acp_adapter_a_dead_gateway_left_is_ended_too(tmp_path: Path, groups: Started) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shell, child = _left_by_a_dead_gateway(home, tmp_path, groups, ADAPTER_ENV)
    assert [orphan.group for orphan in orphans.sweep(home)] == [shell]
    wait_until(lambda: not pid_alive(shell) and not pid_alive(child), 5)


def test_a_run_whose_gateway_process_lives_is_left_alone(tmp_path: Path, groups: Started) -> None:
    home = tmp_path / "home"
    home.mkdir()
    mine = _run_of_this_process(home, groups)
    shell, _ = _left_by_a_dead_gateway(home, tmp_path, groups)
    assert [orphan.group for orphan in orphans.sweep(home)] == [shell], "only the dead gateway's run"
    assert pid_alive(mine), "a live gateway's run was ended"


def test_a_dead_gateway_of_another_home_is_not_this_homes_to_end(tmp_path: Path, groups: Started) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other.mkdir()
    shell, child = _left_by_a_dead_gateway(other, tmp_path, groups)
    assert orphans.sweep(home) == []
    assert pid_alive(shell) and pid_alive(child)
    assert [orphan.group for orphan in orphans.sweep(other / ".." / "other")] == [shell], \
        "the home is named by its resolved path"


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path, groups: Started,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orphans, "TERM_GRACE_S", 0.2)
    home = tmp_path / "home"
    home.mkdir()
    dead = orphans.Owner(orphans.home_id(home), orphans.pid_namespace(), _exited_pid(),
                         "1").label()
    env = {"PATH": "/usr/bin:/bin", TOKEN_VAR: f"{dead}:{uuid.uuid4().hex}"}
    run = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"], env=env,
                           start_new_session=True, stdout=subprocess.PIPE)
    groups.append(run)
    assert run.stdout is not None and run.stdout.readline() == b"ready\n"
    assert [orphan.group for orphan in orphans.sweep(home)] == [run.pid]
    assert run.wait(timeout=5) == -signal.SIGKILL
    run.stdout.close()


def test_a_gateway_process_that_died_but_is_not_reaped_yet_is_gone(tmp_path: Path, groups: Started) -> None:
    home = tmp_path / "home"
    home.mkdir()
    owner = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    try:
        wait_until(lambda: not pid_alive(owner.pid), 10)
        dead = orphans.Owner(orphans.home_id(home), orphans.pid_namespace(), owner.pid,
                             orphans.start_time(owner.pid) or "?").label()
        run = subprocess.Popen(["sleep", "60"], env={TOKEN_VAR: f"{dead}:{uuid.uuid4().hex}"}, start_new_session=True)
        groups.append(run)
        assert [orphan.group for orphan in orphans.sweep(home)] == [run.pid]
    finally:
        owner.wait()


async def test_a_running_gateway_ends_what_a_sibling_process_of_its_home_left_when_it_died(
        home: Home, tmp_path: Path, groups: Started, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` and `worker` on one home: the one that lives ends what the other left, at its next maintenance."""
    monkeypatch.setattr(app, "MAINTENANCE_INTERVAL_S", 0.05)
    settings = Settings(queue=QueueSettings(fsync=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings))
    await gateway.start()
    try:
        shell, child = _left_by_a_dead_gateway(home.root, tmp_path, groups)
        await async_wait_until(lambda: not pid_alive(shell) and not pid_alive(child), 10)
    finally:
        await gateway.stop()
    [ended] = [e for e in read_events(home.events_file) if e["event"] == "process.orphan_ended"]
    assert ended["pid"] == shell, ended


def _exited_pid() -> int:
    exited = subprocess.Popen(["true"])
    exited.wait()
    return exited.pid
