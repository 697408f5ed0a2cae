-- Conversation memory shared by every host (orchestrator/storage/postgres/sessions.py): which CLI session each
-- (provider, scope) continues (kind 'session', key [provider, scope]) and each conversation's last
-- exchanges for the selector (kind 'history', key [scope]). `record` is the JSON object the file store
-- keeps in <home>/sessions/; each stays small (at most 20 turns / 6 exchanges).
CREATE TABLE switchyard_memory (
    kind text NOT NULL CHECK (kind IN ('session', 'history')),
    key text[] NOT NULL,                     -- the record's parts, e.g. {claude,conv:telegram/bot/42}
    record jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, key)
);
