"""Live agent sessions over the Agent Client Protocol (`transport: acp`): one warm agent session per
conversation, kept in a pool, instead of a cold CLI per message.

- `specs`: how each preset's adapter is started (argv, environment, quiet switches);
- `agent`: one adapter process and its ACP connection;
- `turn`: what one prompt collects (chunks, approvals) and the answer it gives;
- `pool`: the live sessions of every provider, their limits, and how a lost one comes back.
"""
