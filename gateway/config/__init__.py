"""The models of settings.yaml by section (queue, providers, channels, dashboard, alerts, telemetry, chat tools,
transcribe, usage, roles), the field types settings.yaml and orchestrator.yaml share, the YAML loader, hints for
misspelt keys and how a problem is told; gateway/settings.py, the plugin contract's path, holds the whole file's
model and re-exports every section's."""
