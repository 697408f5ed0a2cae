-- Attachments a message brought, so that a worker on another host can read them (gateway/backends/postgres/files.py).
-- Stored with the message at take-in; written back under the worker's own home before its handler runs.
CREATE TABLE switchyard_files (
    message_name text NOT NULL REFERENCES switchyard_messages (name) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,       -- stored in the transaction that stores the message
    path text NOT NULL,                      -- relative to the home, under files/
    original text NOT NULL,                  -- the path as the payload names it on the host that took it in
    size bigint NOT NULL,
    sha256 text NOT NULL,
    data bytea,                              -- NULL: too large, held under files.shared_dir at `path`
    PRIMARY KEY (message_name, path)
);
