"""Agents a killed gateway left running are stopped at the next start (orchestrator/agents/acp/orphans.py): a process
whose mark names this home and a gateway that is gone loses its whole group; one whose gateway still runs, or
of another home, is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import wait_until
from orchestrator.agents.acp.orphans import MARK, mark_of, reap_orphans, start_time

SLEEPER = ("import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, 9)
        process.wait()


def _agent(started: list[subprocess.Popen[bytes]], mark: str) -> subprocess.Popen[bytes]:
    """An 'agent': a process group of two sleeping processes carrying `mark` (as an adapter and its child)."""
    process = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**os.environ, MARK: mark},
                               start_new_session=True)
    started.append(process)
    return process


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie waiting to be reaped does not)."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split() if stat else []
        if fields and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _gone_gateway() -> str:
    """The pid and start time of a process that has ended (a killed gateway)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    pid, ticks = ended.pid, start_time(ended.pid)
    ended.wait()
    return f"{pid}|{ticks}"


def test_the_agents_of_a_gateway_that_is_gone_are_stopped(tmp_path: Path,
                                                           started: list[subprocess.Popen[bytes]]) -> None:
    home = tmp_path / "home"
    orphan = _agent(started, f"{home}|{_gone_gateway()}")
    mine = _agent(started, mark_of(home))  # this process plays the running gateway
    other_home = _agent(started, f"{tmp_path / 'elsewhere'}|{_gone_gateway()}")
    wait_until(lambda: len([p for p in Path("/proc").iterdir() if p.name.isdigit()
                            and _carries(int(p.name))]) >= 6, 10)  # each group: the agent and its child
    assert reap_orphans(home) == 1
    assert orphan.wait(5) == -9
    wait_until(lambda: not _group_alive(orphan.pid), 5)  # its child too
    assert _group_alive(mine.pid) and _group_alive(other_home.pid)
    assert reap_orphans(home) == 0


def _carries(pid: int) -> bool:
    try:
        return f"{MARK}=".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
