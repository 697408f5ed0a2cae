"""How a message becomes Procrastinate jobs: one per ordering key, the key as the job's lock.

Procrastinate starts a job only when no job with the same lock is running or queued before it (a
retry scheduled later keeps its place), which is exactly "one message at a time per key, in order".
A job has one lock; a message naming a run holds two keys (`run:…` and its conversation's `conv:…`, or
`ctl:…` for a read-only command: gateway.runtime.keys), so it becomes two jobs deferred together, in one
transaction, in key order:

- a **gate** job (`role: gate`) on the conversation (or control) key, which, once it starts, marks the message's
  conversation as held (`switchyard_messages.state` stays as is; the worker records the gate) and
  then parks (is retried shortly, never counted), keeping the conversation's place until the
  message is done;
- a **process** job (`role: process`) on the run key, which runs the message once its gate has
  started, and parks until then.

Since every message's jobs are deferred in taking-in order, the oldest waiting message is at the
head of each of its keys, so two-key messages never deadlock, and parked jobs hold no worker slot.
A one-key message is one `process` job.
"""

from __future__ import annotations

from typing import Any

QUEUE = "switchyard"
TASK = "switchyard.message"
CONVERSATION_PREFIXES = ("conv:", "ctl:")  # the key a gate job holds when a message has a run key too


def job_locks(keys: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """(role, lock) of each job a message with `keys` becomes; no keys (an invalid payload): one unlocked job."""
    if not keys:
        return [("process", "")]
    conversation = [key for key in keys if key.startswith(CONVERSATION_PREFIXES)]
    others = [key for key in keys if not key.startswith(CONVERSATION_PREFIXES)]
    if conversation and others:
        return [("gate", conversation[0]), ("process", others[0])]
    return [("process", keys[0])]


def defer_query(message_id: int, keys: list[str] | tuple[str, ...]) -> tuple[str, list[object]]:
    """(sql, params) deferring the jobs of `message_id`, to run in the transaction that stores it
    (Procrastinate's versioned defer function, so the jobs commit or roll back with the message)."""
    expression, params = defer_jobs_of(str(int(message_id)), keys)  # an int: safe as a literal
    return f"SELECT {expression}", params


def defer_jobs_of(message_id_sql: str, keys: list[str] | tuple[str, ...]) -> tuple[str, list[object]]:
    """(sql expression, params) deferring the jobs of the message whose id is the SQL expression
    `message_id_sql`: `defer_query` for a statement that inserts the message itself."""
    rows = []
    params: list[object] = []
    for role, lock in job_locks(keys):
        rows.append("ROW(%s, %s, 0, %s, NULL, jsonb_build_object('message_id', "
                    f"{message_id_sql}, 'role', %s::text), NULL)::procrastinate_job_to_defer_v1")
        params += [QUEUE, TASK, lock or None, role]
    return f"procrastinate_defer_jobs_v1(ARRAY[{', '.join(rows)}])", params


async def retry_running(manager: Any, job: Any) -> bool:
    """Retries `job`, which a listing showed running ('doing'); False when it ended between that listing and
    now (its worker recorded it meanwhile): nothing is left to retry, and that is no error.
    `manager` is Procrastinate's JobManager; its retry refuses a job no longer 'doing' by raising from its SQL."""
    import procrastinate
    from psycopg.errors import RaiseException

    try:
        await manager.retry_job(job)
    except procrastinate.exceptions.ConnectorException as exc:
        # procrastinate_retry_job: "Job was not found or has an invalid status to retry" (3.x; older versions
        # said 'not in "doing" status')
        if isinstance(exc.__cause__, RaiseException) and "status" in str(exc.__cause__):
            return False
        raise
    return True
