-- The queue claimed by SQL (gateway/backends/postgres/queue.py PgQueue): who holds a message (the process
-- that claimed it; NULL while it waits for anyone) and when it may be claimed again (a retry's backoff).
-- A claimed message stays 'queued' until its worker starts it ('running'), so an edit still folds into it.
ALTER TABLE switchyard_messages ADD COLUMN holder text;
ALTER TABLE switchyard_messages ADD COLUMN due_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX switchyard_messages_open_idx ON switchyard_messages (id) WHERE state IN ('queued', 'running');
