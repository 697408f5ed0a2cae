-- Tool approvals asked in chat (gateway/backends/postgres/approvals.py): pending until settled once, on any host (an
-- answer in chat, `switchyard approvals allow`, the dashboard); the record itself is the JSON of
-- gateway/approvals.py's Approval, the columns are what is looked up and settled.
CREATE TABLE switchyard_approvals (
    id text PRIMARY KEY,
    state text NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz,
    record jsonb NOT NULL
);
CREATE INDEX switchyard_approvals_pending ON switchyard_approvals (created_at) WHERE state = 'pending';
