-- The postgres backend's delivery journal: each part of a multi-part reply is recorded on its outbox
-- row as it is sent (part index -> platform message id), so a restart or another host taking the
-- channel profile over continues after the last sent part instead of sending the reply again.
ALTER TABLE switchyard_outbox ADD COLUMN parts_sent jsonb NOT NULL DEFAULT '{}';
-- The last delivery error (a pending row waiting out its backoff, or a dead one).
ALTER TABLE switchyard_outbox ADD COLUMN last_error text;
-- Sent rows are deleted after queue.sent_retention_days.
CREATE INDEX switchyard_outbox_sent_idx ON switchyard_outbox (sent_at) WHERE state = 'sent';
