"""The orchestrator's stores on the file backend: runs and their archive, schedules, usage."""
