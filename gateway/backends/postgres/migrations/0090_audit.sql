-- The audit log of privileged actions (gateway/backends/postgres/audit.py): append-only, one row per record id
-- (a retried message records its action once); the record is the JSON of gateway/audit.py's AuditRecord.
CREATE TABLE switchyard_audit (
    id text PRIMARY KEY,
    at timestamptz NOT NULL,
    by_whom text NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX switchyard_audit_at ON switchyard_audit (at);
