"""Agent turns: providers by name, the built-in ones, agent-CLI presets and live ACP sessions, process spawning,
sessions and history, streaming, progress, transcription, `doctor`."""
