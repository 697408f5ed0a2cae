-- The turns running now (orchestrator/storage/postgres/usage.py): one row per reservation and kind, counted against its key by
-- the limits until the turn ends, so turns started at once on any hosts cannot pass a limit together. A
-- reservation is made in one transaction holding an advisory lock on each of its keys, after its check; it
-- counts until deleted or `expires_at` (renewed while its turn runs), so a host that died stops counting then.
CREATE TABLE switchyard_usage_running (
    token text NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (token, kind)
);
CREATE INDEX switchyard_usage_running_key ON switchyard_usage_running (kind, key);
