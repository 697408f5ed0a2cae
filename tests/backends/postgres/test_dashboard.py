"""The dashboard of a `switchyard run` on the postgres backend reads the database, not its home's folders:
the queue of every host, the messages in flight on other workers, the processes attached, the dead
letters, and its retry button puts a dead letter back into the database, where it is answered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from gateway.testing import wait_until
from tests.backends.postgres.helpers import insert_message, payload, rows
from tests.backends.postgres.test_runs_hosts import Host
from tests.backends.postgres.test_workers import PgProcess
from tests.e2e.dashboard import fetch
from tests.faults.harness import GatewayRun, message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def with_dashboard(run: GatewayRun) -> str:
    """Turns the dashboard on (a free port), starts the process, returns the page's address."""
    loaded = yaml.safe_load(run.home.settings_file.read_text())
    loaded["dashboard"] = {"port": 0, "refresh_sec": 0.3}
    run.home.settings_file.write_text(yaml.safe_dump(loaded))
    run.start()

    def url() -> str | None:
        try:
            return json.loads((run.home.state / "gateway.json").read_bytes()).get("dashboard")
        except (OSError, ValueError):
            return None

    return str(wait_until(url, 30))


def state(url: str) -> dict[str, Any]:
    answer = fetch(url + "api/state")
    assert answer.status == 200, answer.text
    return dict(answer.json())


def depths(seen: dict[str, Any]) -> dict[str, int]:
    return {row["folder"]: row["depth"] for row in seen["queue"]}


def test_the_dashboard_shows_the_database_and_its_retry_button_puts_a_dead_letter_back(
        tmp_path: Path, db: str) -> None:
    log = tmp_path / "calls.jsonl"
    run = PgProcess(tmp_path / "a", db, log, role="run", slow_s=4.0).setup()
    url = with_dashboard(run)
    worker = PgProcess(tmp_path / "b", db, log, role="worker", slow_s=4.0).setup()
    worker.start()
    with psycopg.connect(db) as conn:
        insert_message(conn, "gone.json", payload("gone"), state="dead", reason="failed 5 time(s)", attempts=5)
    elsewhere = [message(1, "x"), message(2, "x")]
    for sent in elsewhere:
        worker.drop(sent)  # taken in and run on the worker's home: nothing of it in the run's folders

    expected = {"incoming": 1, "processing": 1, "outgoing": 0, "failed": 1, "sent": 0}

    def one_running_one_queued() -> dict[str, Any] | None:  # the depths and in_flight are read one after the other
        seen = state(url)
        return seen if seen["in_flight"] and depths(seen) == expected else None

    seen = wait_until(one_running_one_queued, 30)
    assert depths(seen) == expected
    [running] = seen["in_flight"]
    assert running["conversation"] == "x" and running["attempt"] == 1
    assert seen["dead_total"] == 1 and [d["name"] for d in seen["dead_letters"]] == ["gone.json"]
    assert sorted(p["role"] for p in seen["processes"]) == ["run", "worker"]
    assert not list(run.home.processing.rglob("*.json")) and not list(run.home.failed.glob("*.json"))
    page = fetch(url).text
    assert "Processes" in page and "Channel owners" in page and 'data-name="gone.json"' in page

    retried = fetch(url + "api/dead-letters/retry", data=json.dumps({"names": ["gone.json"]}).encode(),
                    headers={"Content-Type": "application/json"})
    assert retried.status == 200 and retried.json() == {"retried": ["gone.json"]}
    wait_until(lambda: rows(db, "SELECT state FROM switchyard_messages WHERE name = 'gone.json'") == [("done",)], 60)
    assert rows(db, "SELECT count(*) FROM switchyard_outbox WHERE payload->>'messageId' = 'gone'") == [(1,)]
    assert state(url)["dead_total"] == 0
    unknown = fetch(url + "api/dead-letters/retry", data=json.dumps({"names": ["gone.json"]}).encode(),
                    headers={"Content-Type": "application/json"})
    assert unknown.status == 404
    assert run.stop() == 0 and worker.stop() == 0


def test_the_dashboard_lists_the_runs_the_database_holds(tmp_path: Path, db: str) -> None:
    host = Host(tmp_path / "a", db, tmp_path).setup()
    url = with_dashboard(host)
    host.drop(message(1, "c1", "/ask"))  # a run that waits for an answer: a row of switchyard_runs
    [(run_id,)] = wait_until(lambda: rows(db, "SELECT run_id FROM switchyard_runs WHERE state = 'waiting_input'"),
                             60)

    [run] = wait_until(lambda: state(url)["runs"], 30)
    assert run["runId"] == run_id and run["workflowId"] == "ask" and run["state"] == "waiting_input"
    assert [step["id"] for step in run["steps"]] == ["Ask", "Do"]
    page = fetch(url).text
    assert run_id in page and "no runs yet" not in page
    assert host.stop() == 0
