"""Settings building blocks: field types settings.yaml and orchestrator.yaml share, the YAML loader, hints for misspelt
keys, `usage:` (settings.yaml's own models are gateway/settings.py, the plugin contract's path)."""
