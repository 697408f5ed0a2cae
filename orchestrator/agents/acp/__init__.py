"""Live agent sessions over the Agent Client Protocol (`transport: acp`): one warm agent session per
conversation, kept in a pool, instead of a cold CLI per message.

- `specs`: how each preset's adapter is started (argv, environment, quiet switches);
- `agent`: one adapter process and its ACP connection;
- `turn`: what one prompt collects (chunks, approvals) and the answer it gives;
- `pool`: the live sessions of every provider and the processes hosting them, their limits and idle ends;
- `session`: one turn in a pool's session: opened (loaded, or new and seeded), prompted, stopped, recorded;
- `route`: whether a call runs live or falls back to the one-shot preset.
"""
