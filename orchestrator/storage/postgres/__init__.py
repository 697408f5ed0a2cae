"""The orchestrator's state in PostgreSQL (`queue.backend: postgres`): runs, their events, the conversation →
run association, provider sessions and conversation history, shared by every host. Imported only then."""
