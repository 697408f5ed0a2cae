-- Pending pairing codes expire (gateway/backends/postgres/pairing.py): each code's expiry, set from the profile's
-- pairing_code_ttl_sec when it is issued; codes issued before get the default hour from their request.
ALTER TABLE switchyard_pairing_pending ADD COLUMN expires_at timestamptz;
UPDATE switchyard_pairing_pending SET expires_at = requested_at + interval '1 hour';
ALTER TABLE switchyard_pairing_pending ALTER COLUMN expires_at SET NOT NULL;
