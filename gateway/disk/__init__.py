"""Files on disk as the gateway handles them: written whole or not at all, read without following links or
waiting on FIFOs, folders locked by the process that owns them, old files swept (gateway/home.py says where
each folder is, and re-exports these for the paths code has always imported them from)."""
