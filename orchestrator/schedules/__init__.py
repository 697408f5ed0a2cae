"""Scheduled prompts: `schedules:` in orchestrator.yaml, when occurrences fall, where they are claimed, the scheduler,
and what is listed of them."""
