-- Per-day usage totals shared by every host (orchestrator/storage/postgres/usage.py): what agent turns spent, by kind
-- (sender, conversation, profile, provider) and key. A turn adds to its row with INSERT … ON CONFLICT DO
-- UPDATE SET col = switchyard_usage.col + excluded.col, so concurrent adds are all counted.
CREATE TABLE switchyard_usage (
    day date NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    usd double precision NOT NULL DEFAULT 0,
    tokens_in bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    turns bigint NOT NULL DEFAULT 0,
    seconds double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (day, kind, key)
);
