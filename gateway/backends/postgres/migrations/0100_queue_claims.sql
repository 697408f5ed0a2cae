-- The queue claimed by SQL (gateway/backends/postgres/queue.py PgQueue): who holds a message (the process
-- that claimed it; NULL while it waits for anyone) and when it may be claimed again (a retry's backoff).
-- A claimed message stays 'queued' until its worker starts it ('running'), so an edit still folds into it.
ALTER TABLE switchyard_messages ADD COLUMN holder text;
ALTER TABLE switchyard_messages ADD COLUMN due_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX switchyard_messages_open_idx ON switchyard_messages (id) WHERE state IN ('queued', 'running');
-- A message an earlier version was running (state 'running', no holder: it ran as a Procrastinate job) would
-- be claimable by no one and hold its conversation for ever: it waits in its place again. Its answer was not
-- stored (that version stored it with the state 'done', in one transaction), so nothing is answered twice.
-- docs/postgres.md: every process of the earlier version is stopped before `switchyard db migrate`.
UPDATE switchyard_messages SET state = 'queued' WHERE state = 'running' AND holder IS NULL;
