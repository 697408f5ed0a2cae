-- Workflow runs shared by every host (orchestrator/storage/postgres/runs.py): a run's whole state.json is `data`;
-- the columns beside it are what hosts query by (the executor's claim, recovery, retention, listings).
CREATE TABLE switchyard_runs (
    run_id text PRIMARY KEY,
    conv_key text NOT NULL,                   -- channel/profile/conversation of the starting message
    state text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    next_retry_at timestamptz,                -- a queued run is not claimed before this
    delivered boolean NOT NULL DEFAULT false, -- a finished run's result was handed over (data->>'delivery')
    cancel_requested_at timestamptz,          -- /cancel from a host that does not execute the run
    data json NOT NULL                        -- json, not jsonb: the order of the steps is the order of the keys
);
CREATE INDEX switchyard_runs_created_idx ON switchyard_runs (created_at, run_id);
CREATE INDEX switchyard_runs_updated_idx ON switchyard_runs (updated_at);
CREATE INDEX switchyard_runs_open_idx ON switchyard_runs (created_at, run_id)
    WHERE state NOT IN ('done', 'failed_final', 'cancelled') OR NOT delivered;

-- Each run's events (what runs/<id>/events.jsonl holds on the file backend), oldest first by id.
CREATE TABLE switchyard_run_events (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    ts timestamptz NOT NULL DEFAULT now(),
    record json NOT NULL
);
CREATE INDEX switchyard_run_events_run_idx ON switchyard_run_events (run_id, id);

-- The conversation -> run association (runs/active.json); an entry goes when its run ends.
CREATE TABLE switchyard_active_runs (
    conv_key text PRIMARY KEY,
    run_id text NOT NULL
);
