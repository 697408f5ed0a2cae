"""Files on disk as the gateway handles them: written whole or not at all, read without following links or
waiting on FIFOs, named safely from ids, folders locked by the process that owns them, TTL lock files shared by
the processes of one home (and who holds them), old files swept (gateway/home.py says where each folder is, and
re-exports the file helpers for the paths code has always imported them from)."""
