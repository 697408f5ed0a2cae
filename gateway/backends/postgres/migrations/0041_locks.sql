-- The gateway's coordination locks, once created by 0040_runs.sql (now the orchestrator's migration): a
-- database that applied 0040 before it moved has the table already.
-- Coordination locks (coordination/locks/ on the file backend, gateway/backends/postgres/locks.py): one holder per
-- resource across hosts; expiry is judged by the database's clock.
CREATE TABLE IF NOT EXISTS switchyard_locks (
    resource text PRIMARY KEY,
    holder text NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
