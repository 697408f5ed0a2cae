"""orchestrator.yaml: its models, workflows, the per-orchestrator cache, what `check` warns of."""
