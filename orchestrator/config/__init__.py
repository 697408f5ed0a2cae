"""orchestrator.yaml: its models, workflows, the embedded default, loading it, the per-orchestrator cache, what `check`
warns of."""
