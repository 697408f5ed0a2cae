"""The orchestrator's stores: their protocols (stores.py) and the files, postgres and memory implementations, with the
postgres migrations."""
