-- "Queued" receipts on the postgres backend (gateway/backends/postgres/receipts.py): when the receipt of a message
-- that waited behind its conversation was written into switchyard_outbox; set in the same transaction,
-- so no process writes a second one.
ALTER TABLE switchyard_messages ADD COLUMN receipt_at timestamptz;
