"""A run's result already in `switchyard_outbox` when its process died (written, not yet recorded as pushed)
is recorded at recovery, not pushed a second time."""

from __future__ import annotations

from pathlib import Path

import psycopg

from gateway.backends.postgres.outbox import PgOutbox
from gateway.home import Home
from gateway.telemetry.events import EventLog
from orchestrator.execution.results import Delivery, result_reply
from orchestrator.runs.state import Conversation, RunState, StepState
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message


def _finished_run(run_id: str) -> RunState:
    message = make_message("build it")
    return RunState(runId=run_id, workflowId="build", orchestratorId="main", state="done",
                    message=message.model_dump(mode="json"),
                    conversation=Conversation(channel="console", conversationId="c1"),
                    steps={"Plan": StepState(status="completed", output="planned")})


def _results(dsn: str, run_id: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM switchyard_outbox WHERE payload->>'workflowRunId' = %s",
                           (run_id,)).fetchone()
    return int(row[0]) if row else 0


def test_a_result_in_the_outbox_table_is_recorded_not_pushed_again(db: str, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    outbox = PgOutbox(home, EventLog(home.events_file), dsn=db)
    store = RunStore(home, fsync=False)
    delivery = Delivery(store, outbox, home)
    run = store.save(_finished_run("r-pushed"))
    outbox.write(result_reply(run))  # the process died right after this write

    recovered = delivery.push(run, recovering=True)

    assert _results(db, "r-pushed") == 1
    assert recovered.delivery == "push"
    other = store.save(_finished_run("r-other"))
    delivery.push(other, recovering=True)  # nothing in the outbox: pushed
    assert _results(db, "r-other") == 1
    outbox.close()
