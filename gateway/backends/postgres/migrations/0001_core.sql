-- Switchyard's shared state (queue.backend: postgres). Procrastinate's own tables (procrastinate_*)
-- hold the jobs that run these messages; these tables hold what Switchyard itself must keep.
-- Migrations are applied in file-name order, each once, by `switchyard db migrate`.

-- One row per chat message taken in, with its bytes exactly as received (a dead letter keeps them).
CREATE TABLE switchyard_messages (
    id bigserial PRIMARY KEY,                 -- taking-in order: FIFO per ordering key follows it
    name text NOT NULL UNIQUE,                -- the spec-002 file name (job_id in events, `dead` names)
    payload bytea NOT NULL,
    channel text NOT NULL DEFAULT '',         -- '' for a payload that does not parse
    profile text NOT NULL DEFAULT '',
    conversation text NOT NULL DEFAULT '',
    keys text[] NOT NULL DEFAULT '{}',        -- ordering keys (gateway.payloads.ordering_keys)
    state text NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'done', 'dead')),
    attempts integer NOT NULL DEFAULT 0,      -- failed attempts so far
    errors jsonb NOT NULL DEFAULT '[]',       -- the last errors, newest last
    reason text,                              -- why it is dead
    gate_open boolean NOT NULL DEFAULT false, -- a two-key message: its conversation's gate job started
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX switchyard_messages_state_idx ON switchyard_messages (state) WHERE state <> 'done';

-- Answered message identities (channel, profile, messageId), kept for queue.duplicate_window_sec.
CREATE TABLE switchyard_answered (
    identity text PRIMARY KEY,
    answered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX switchyard_answered_at_idx ON switchyard_answered (answered_at);

-- Replies to deliver, in id order per conversation, by the process that owns their channel profile.
CREATE TABLE switchyard_outbox (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,                -- the spec-002 outgoing file name
    channel text NOT NULL,
    profile text NOT NULL,                    -- the channel profile id that delivers it
    conversation text NOT NULL,
    payload jsonb NOT NULL,                   -- the OutgoingPayload
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'dead')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    reason text,                              -- why it is dead
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz
);
CREATE INDEX switchyard_outbox_pending_idx ON switchyard_outbox (channel, profile, id) WHERE state = 'pending';

CREATE FUNCTION switchyard_notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchyard_outbox', NEW.channel || '/' || NEW.profile);
    RETURN NEW;
END;
$$;
CREATE TRIGGER switchyard_outbox_notify AFTER INSERT ON switchyard_outbox
    FOR EACH ROW EXECUTE FUNCTION switchyard_notify_outbox();

-- Who holds what for how long: `channel:<type>/<profile>` is the owner of a channel profile.
CREATE TABLE switchyard_leases (
    name text PRIMARY KEY,
    holder text NOT NULL,                     -- <host>:<pid>:<start stamp> of the holding process
    expires_at timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);

-- Every switchyard process attached to the database: what it runs and when it was last seen.
CREATE TABLE switchyard_processes (
    holder text PRIMARY KEY,                  -- as switchyard_leases.holder
    role text NOT NULL CHECK (role IN ('run', 'worker')),
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen timestamptz NOT NULL DEFAULT now(),
    detail jsonb NOT NULL DEFAULT '{}'        -- what `status` shows of it (channels, reconnects...)
);

-- The event log shared by every process (events.jsonl stays each host's own copy).
CREATE TABLE switchyard_events (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    holder text NOT NULL,
    event jsonb NOT NULL
);
