"""End-to-end harness: `switchyard run` as a real process on a temporary home, fake provider CLIs.

The spec-002 tests run on both queue backends: a test module marked with `both_backends` gets a
`switchyard` of each (`files`, the embedded default; `postgres`, skipped without SWITCHYARD_TEST_DSN).
A test body observes the queue only through the backend-neutral methods of Switchyard (`replies`,
`dead_letters`, `in_flight`, `unfinished`, `run_state`, ...), which each backend implements by reading
where it keeps that state (the home's folders, or the database's tables).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from gateway.testing import drop_incoming, make_incoming, wait_until
from orchestrator.storage.files.runs import RunStore
from tests.process import SWITCHYARD, SwitchyardProcess, clean_environment

PROVIDERS = Path(__file__).parent / "providers"
FAKE_ACP_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp" / "fake_agent.py"
BACKENDS = ("files", "postgres")
both_backends = pytest.mark.parametrize("backend", BACKENDS, indirect=True)
PG_LEASE_SEC = 2  # a killed process's jobs are retried this soon on the postgres backend

ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "fake_selector"},
    "diagnostics": {"provider": "fake_diagnostics"},
    "reply_within_sec": 5,
    "agents": {"writer": {"provider": "fake_agent", "prompt": "write about {{message}}"}},
    "workflows": {
        "chat": {"description": "Reply to a chat message", "steps": [{"id": "Reply", "agent": "writer"}]},
        "build": {"description": "Plan, build and test", "steps": [
            {"id": "Plan", "agent": "writer"},
            {"id": "Build", "command": [sys.executable, "-c", "print('built ok')"]},
            {"id": "Test", "agent": "writer"},
        ]},
    },
    "functions": {"shout": {"description": "Upper-cases a word",
                            "parameters": {"type": "object", "required": ["word"],
                                           "properties": {"word": {"type": "string"}}},
                            "command": [sys.executable, "-c",
                                        "import json,sys; print(json.load(sys.stdin)['word'].upper())"]}},
}


class DeadLetter(NamedTuple):
    """A dead letter as a test sees it on either backend: its name, original bytes, why and after how many tries."""

    name: str
    kind: str  # "message" or "reply"
    data: bytes
    reason: str
    attempts: int


class Switchyard(SwitchyardProcess):
    """One `switchyard run` process on a home (the file backend), and helpers to talk to it through files."""

    backend = "files"

    def __init__(self, root: Path, env: dict[str, str]):
        super().__init__(root, env, log=root / "run.log")

    def configure(self, settings: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None) -> None:
        self.home.create()
        base: dict[str, Any] = {
            "queue": {"max_attempts": 3, "backoff_initial_ms": 50, "backoff_max_ms": 200, "fsync": False},
            "providers": {
                "fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")], "timeout_sec": 30},
                "fake_agent": {"command": [sys.executable, str(PROVIDERS / "agent.py")], "timeout_sec": 30},
                "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]},
            },
            "channels": [],
        }
        base.update(settings or {})
        base["queue"] = {**base["queue"], **self.queue_settings()}
        self.home.settings_file.write_text(yaml.safe_dump(base))
        workspace = self.home.orchestrators / "main"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(orchestrator or ORCHESTRATOR))

    def queue_settings(self) -> dict[str, Any]:
        """What this backend adds to the `queue:` settings a test wrote."""
        return {}

    def another(self) -> Switchyard:
        """A second process on the same home (and database)."""
        return type(self)(self.home.root, self.env)

    def send(self, text: str, **fields: Any) -> dict[str, Any]:
        payload = make_incoming(text, **fields)
        drop_incoming(self.home, payload, f"{time.time_ns()}-{payload.messageId}.json")
        return payload.model_dump(exclude_none=True)

    def reply_to(self, message_id: str, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
        return wait_until(lambda: (r := self.replies(message_id)) and len(r) >= count and r, timeout)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SWITCHYARD, "--home", str(self.home.root), *args], env=self.env,
                              capture_output=True, text=True, timeout=60)

    # --- backend-neutral observations (this class: the file queue's folders) ----------------

    def dead_letters(self) -> list[DeadLetter]:
        """Every dead letter (failed/: the original bytes beside `<name>.error.json`), by name; not the
        temporary file of a report being written (`<name>.error.json.<pid>-<n>.tmp`)."""
        letters = []
        for path in sorted(self.home.failed.iterdir()):
            if path.name.endswith((".error.json", ".tmp")) or path.name.startswith("."):
                continue
            report_file = path.with_name(path.name + ".error.json")
            report = json.loads(report_file.read_text()) if report_file.exists() else {}
            kind = "reply" if report.get("source") == "outgoing" else "message"
            letters.append(DeadLetter(path.name, kind, path.read_bytes(), str(report.get("reason", "")),
                                      int(report.get("attempts") or 0)))
        return letters

    def in_flight(self) -> list[str]:
        """Messages claimed by a worker and not finished (processing/)."""
        return sorted(p.name for p in self.home.processing.rglob("*.json"))

    def unfinished(self) -> list[str]:
        """Messages waiting or in flight: none once everything was answered or dead-lettered."""
        return sorted(p.name for p in self.home.incoming.glob("*.json")) + self.in_flight()

    def run_state(self, run_id: str) -> dict[str, Any]:
        """A workflow run's state (runs/<id>/state.json, or its line in runs/.archive/ once it settled); {}
        while there is none."""
        run = RunStore(self.home, fsync=False).load(run_id)
        return run.model_dump(mode="json") if run is not None else {}

    def dead_errors(self, name: str) -> list[str]:
        """Every error a dead message's report keeps (`<name>.error.json`'s `errors`)."""
        report = json.loads((self.home.failed / f"{name}.error.json").read_text())
        return [str(error) for error in report.get("errors", [])]

    def plant_dead_letter(self, name: str, data: bytes) -> None:
        """Puts a dead letter in place as an operator or a past failure would (replacing one of that name)."""
        self.home.create()
        (self.home.failed / name).write_bytes(data)


class PgSwitchyard(Switchyard):
    """`switchyard run` on the postgres backend: its queue, replies and dead letters are the database's rows.

    The home still holds what stays local on that backend: incoming/ (the spool channels write into),
    the event log, the orchestrator's workspace.
    """

    backend = "postgres"

    def __init__(self, root: Path, env: dict[str, str]):
        super().__init__(root, env)
        self.dsn = env["SWITCHYARD_DSN"]

    def queue_settings(self) -> dict[str, Any]:
        return {"backend": "postgres", "lease_sec": PG_LEASE_SEC}

    def _rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def replies(self, message_id: str | None = None) -> list[dict[str, Any]]:
        """The rows of switchyard_outbox (pending, sent or dead) in the order they were written."""
        found = []
        for name, payload in self._rows("SELECT name, payload FROM switchyard_outbox ORDER BY id"):
            data = payload if isinstance(payload, dict) else json.loads(payload)
            data["_file"] = name
            if message_id is None or data.get("messageId") == message_id:
                found.append(data)
        return found

    def dead_letters(self) -> list[DeadLetter]:
        """Dead messages (their bytes as received) and dead replies, by name; and the files the intake
        quarantined in this home's failed/ without storing them (a FIFO, a link, an oversized payload)."""
        rows = self._rows(
            "SELECT name, 'message', payload, coalesce(reason, ''), attempts FROM switchyard_messages "
            "WHERE state = 'dead' UNION ALL SELECT name, 'reply', convert_to(payload::text, 'UTF8'), "
            "coalesce(reason, ''), attempts FROM switchyard_outbox WHERE state = 'dead' ORDER BY 1")
        stored = [DeadLetter(name, kind, bytes(data), reason, int(attempts)) for name, kind, data, reason, attempts
                  in rows]
        return sorted(stored + super().dead_letters())

    def in_flight(self) -> list[str]:
        """Messages a worker was running (and files the intake had claimed but not yet stored)."""
        running = [name for (name,) in self._rows("SELECT name FROM switchyard_messages WHERE state = 'running'")]
        return sorted(running + super().in_flight())

    def unfinished(self) -> list[str]:
        """Files not yet taken in, and stored messages neither done nor dead."""
        stored = [name for (name,) in self._rows("SELECT name FROM switchyard_messages "
                                                 "WHERE state NOT IN ('done', 'dead')")]
        return sorted(stored + super().unfinished())

    def run_state(self, run_id: str) -> dict[str, Any]:
        """A workflow run's state as `switchyard runs show --json` reads it wherever this backend keeps it."""
        shown = self.cli("runs", "show", run_id, "--json")
        if shown.returncode != 0:
            return {}
        state: dict[str, Any] = json.loads(shown.stdout)["state"]
        return state

    def dead_errors(self, name: str) -> list[str]:
        """Every error a dead message's row keeps (`errors`)."""
        [(errors,)] = self._rows("SELECT errors FROM switchyard_messages WHERE name = %s", name)
        return [str(error) for error in errors]

    def plant_dead_letter(self, name: str, data: bytes) -> None:
        """A dead `switchyard_messages` row with these bytes (its ordering keys as the intake computes them)."""
        from gateway.payloads import ordering_keys, parse_payload

        try:
            message = parse_payload(data, 1 << 20)
            fields = [message.channel, message.profile, message.conversation, list(ordering_keys(message))]
        except ValueError:
            fields = ["", "", "", []]
        self._rows("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys, state, "
                   "reason) VALUES (%s, %s, %s, %s, %s, %s, 'dead', 'planted by the test') ON CONFLICT (name) DO "
                   "UPDATE SET payload = EXCLUDED.payload, channel = EXCLUDED.channel, profile = EXCLUDED.profile, "
                   "conversation = EXCLUDED.conversation, keys = EXCLUDED.keys RETURNING id", name, data, *fields)


@pytest.fixture
def fake_log(tmp_path: Path) -> Path:
    return tmp_path / "provider-calls.jsonl"


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The queue backend `switchyard` runs on: `files` unless the test is parametrised (`both_backends`)."""
    return str(getattr(request, "param", "files"))


@pytest.fixture
def switchyard(tmp_path: Path, fake_log: Path, backend: str, request: pytest.FixtureRequest) -> Iterator[Switchyard]:
    state = tmp_path / "fake-state"
    state.mkdir()
    env = clean_environment({"FAKE_LOG": str(fake_log), "FAKE_STATE": str(state)})
    instance: Switchyard
    if backend == "postgres":
        from gateway.backends.postgres import schema

        dsn = request.getfixturevalue("pg_dsn")  # skips without SWITCHYARD_TEST_DSN
        schema.migrate(dsn)
        instance = PgSwitchyard(tmp_path / "home", {**env, "SWITCHYARD_DSN": dsn})
    else:
        instance = Switchyard(tmp_path / "home", env)
    yield instance
    SwitchyardProcess.kill_started()  # this one and any other() it started, before the schema is dropped


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Path]:
    """The fake ACP agents' state folder (each agent process leaves `pid-<pid>` there); whatever a test left
    running of them (its process group) is killed at the end."""
    state = tmp_path / "agents"
    yield state
    for pid in agent_pids(state):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def agent_pids(state: Path) -> list[int]:
    """Every fake ACP agent process started with `state` as its FAKE_ACP_STATE."""
    return [int(p.name.removeprefix("pid-")) for p in state.glob("pid-*")]


def live_agent_providers(state: Path, like: str = "claude") -> dict[str, Any]:
    """The e2e providers with the chat agent a live session (`transport: acp`) of the fake adapter `like`."""
    return {
        "fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")], "timeout_sec": 30},
        "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]},
        "fake_agent": {"type": like, "transport": "acp", "timeout_sec": 60, "env": {"FAKE_ACP_STATE": str(state)},
                       "acp_command": [sys.executable, str(FAKE_ACP_AGENT), "--like", like]},
    }


def provider_calls(fake_log: Path) -> list[dict[str, Any]]:
    if not fake_log.exists():
        return []
    return [json.loads(line) for line in fake_log.read_text().splitlines() if line.strip()]
