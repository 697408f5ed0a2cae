-- Reminders made in chat with the chat tool `remind` (orchestrator/storage/postgres/reminders.py), shared by every
-- host; their occurrences are claimed in switchyard_schedule_fires under `reminder:<id>` like any schedule's.
CREATE TABLE switchyard_reminders (
    reminder_id text PRIMARY KEY,
    conversation text NOT NULL,            -- conv:<channel>/<profile>/<conversation>, from the turn's token
    body jsonb NOT NULL,                   -- the Reminder as orchestrator/schedules/reminders.py writes it
    created_at timestamptz NOT NULL
);

CREATE INDEX switchyard_reminders_conversation ON switchyard_reminders (conversation, created_at);
