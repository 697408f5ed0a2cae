-- Pairing (gateway/backends/postgres/pairing.py): codes waiting for `switchyard pair approve` and the senders approved
-- on each channel profile, so an approval on any host admits the sender on the host that owns the profile.
CREATE TABLE switchyard_pairing_pending (
    code text PRIMARY KEY,
    profile text NOT NULL,
    sender_id text NOT NULL,
    sender text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (profile, sender_id)              -- one pending code per sender and profile
);
CREATE TABLE switchyard_pairing_approved (
    profile text NOT NULL,
    sender_id text NOT NULL,
    approved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (profile, sender_id)
);
