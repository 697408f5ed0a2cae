-- A message's identity (channel, profile, messageId: gateway/backends/files/answered.py), set when it is taken in,
-- so a worker reads it, checks it against switchyard_answered and starts it in one statement
-- (gateway/backends/postgres/processing.py). NULL for a payload that does not parse, and for rows stored before this.
ALTER TABLE switchyard_messages ADD COLUMN identity text;
