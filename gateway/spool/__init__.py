"""The incoming spool: `queue/incoming/` as a claimable, ordered file queue with its edits and its failed folder, and
the watch that wakes its readers; every backend takes messages in through it."""
