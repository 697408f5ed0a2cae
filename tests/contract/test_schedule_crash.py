"""A scheduled occurrence is answered once across a kill -9 (issue 23 §4), on files and postgres: a real
`switchyard run` is killed with SIGKILL right after it claimed an occurrence (before its message was enqueued),
or right after the message reached incoming/ (before the claim was finished); a fresh process on the same home
and database takes the claim over (its holder's process is gone) and enqueues the same message again. The
test waits until the fresh process answered that occurrence and a later one: each was handled and delivered
exactly once (a second copy is a duplicate to the answered index)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gateway.config.yamlfile import load_yaml
from gateway.home import Home
from gateway.testing import wait_until
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from tests.contract.crashhost import read_log
from tests.process import SwitchyardProcess, clean_environment

pytestmark = [pytest.mark.timeout(90), pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]
QUEUE = {"fsync": False, "poll_ms": 50, "backoff_initial_ms": 50, "backoff_max_ms": 200, "lease_sec": 1}
SCHEDULE = {"every_sec": 2, "prompt": "ping", "deliver": {"profile": "room", "conversationId": "r1"}}


def make_home(root: Path, dsn: str | None) -> Home:
    home = Home(root / "home")
    home.create()
    queue = {**QUEUE, **({"backend": "postgres"} if dsn else {})}
    home.settings_file.write_text(yaml.safe_dump({"queue": queue, "channels": [{"id": "room", "type": "schedlog"}]}))
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    config = {**load_yaml(DEFAULT_ORCHESTRATOR_YAML), "schedules": {"ping": SCHEDULE}}
    (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


@pytest.mark.parametrize("backend", ["files", "postgres"])
@pytest.mark.parametrize("step", ["claimed", "enqueued"])
def test_an_occurrence_is_answered_once_across_a_kill(tmp_path: Path, request: pytest.FixtureRequest, backend: str,
                                                      step: str) -> None:
    dsn = request.getfixturevalue("db") if backend == "postgres" else None
    home, log, mark = make_home(tmp_path, dsn), tmp_path / "log.jsonl", tmp_path / "mark.json"

    def process(name: str, at: str | None) -> SwitchyardProcess:
        env = clean_environment({"SWITCHYARD_PLUGINS": "tests.contract.schedproc", "PYTHONPATH": str(REPO),
                                 "SCHED_LOG": str(log), "SCHED_AT": at or "", "SCHED_MARK": str(mark),
                                 **({"SWITCHYARD_DSN": dsn} if dsn else {})})
        started = SwitchyardProcess(home.root, env, log=tmp_path / f"{name}.log")
        started.start()
        return started

    try:
        first = process("first", step)
        wait_until(mark.exists, 20)
        first.kill()
        stopped = json.loads(mark.read_text())["messageId"]
        assert stopped not in [r["messageId"] for r in read_log(log, "sent")]

        second = process("second", None)
        wait_until(lambda: stopped in (sent := [r["messageId"] for r in read_log(log, "sent")])
                   and sent[-1] > stopped, 40)
        assert second.stop() == 0, second.output()[-3000:]
    finally:
        SwitchyardProcess.kill_started()
    calls = Counter(r["messageId"] for r in read_log(log, "call"))
    sent = Counter(r["messageId"] for r in read_log(log, "sent"))
    assert calls[stopped] == 1 and sent[stopped] == 1, (calls, sent)
    assert max(calls.values()) == 1 and max(sent.values()) == 1, (calls, sent)
    fired = [e for e in second.events("schedule.fired") if e["messageId"] == stopped]
    assert len(fired) == 1 and fired[0]["recovered"] is True, fired


def test_two_hosts_on_one_database_answer_each_occurrence_once(tmp_path: Path, db: str) -> None:  # noqa: F811
    """Two `switchyard run` processes, each on its own home, sharing one database: every occurrence of a schedule
    firing each second is handled and delivered once between them."""
    log = tmp_path / "log.jsonl"
    hosts = []
    try:
        for name in ("a", "b"):
            home = make_home(tmp_path / name, db)
            config = home.root / "orchestrators" / "main" / "orchestrator.yaml"
            config.write_text(config.read_text().replace("every_sec: 2", "every_sec: 1"))
            env = clean_environment({"SWITCHYARD_PLUGINS": "tests.contract.schedproc", "PYTHONPATH": str(REPO),
                                     "SCHED_LOG": str(log), "SWITCHYARD_DSN": db})
            host = SwitchyardProcess(home.root, env, log=tmp_path / f"{name}.log")
            host.start()
            hosts.append(host)
        wait_until(lambda: len({r["messageId"] for r in read_log(log, "sent")}) >= 6, 40)
        for host in hosts:
            assert host.stop() == 0, host.output()[-3000:]
    finally:
        SwitchyardProcess.kill_started()
    calls = Counter(r["messageId"] for r in read_log(log, "call"))
    sent = Counter(r["messageId"] for r in read_log(log, "sent"))
    assert max(calls.values()) == 1 and max(sent.values()) == 1, (calls, sent)
    fired = Counter(e["messageId"] for host in hosts for e in host.events("schedule.fired"))
    assert max(fired.values()) == 1 and set(fired) >= set(sent), fired
