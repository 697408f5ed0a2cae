-- Scheduled prompts shared by every host (orchestrator/storage/postgres/schedules.py): when each schedule was first seen,
-- and each claimed occurrence. The primary key is the claim: of the hosts inserting one occurrence
-- (ON CONFLICT DO NOTHING), exactly one gets the row, and fires it.
CREATE TABLE switchyard_schedules (
    schedule_id text PRIMARY KEY,
    since timestamptz NOT NULL
);

CREATE TABLE switchyard_schedule_fires (
    schedule_id text NOT NULL,
    occurrence timestamptz NOT NULL,
    holder text NOT NULL,                  -- host:pid of the process that fires it
    claimed_at timestamptz NOT NULL,
    outcome text,                          -- fired | skipped | failed; NULL while the claim is in hand
    detail text,
    message_id text,
    finished_at timestamptz,
    PRIMARY KEY (schedule_id, occurrence)
);
