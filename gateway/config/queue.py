"""`queue:` and `files:` in settings.yaml: how messages wait, are retried and kept, and where attachments live."""

from __future__ import annotations

from pydantic import Field

from gateway.config.strict import Strict


class QueueSettings(Strict):
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    max_attempts: int = Field(default=5, ge=1)
    backoff_initial_ms: int = Field(default=500, ge=0)
    backoff_max_ms: int = Field(default=60000, ge=0)
    poll_ms: int = Field(default=500, ge=10)
    max_payload_bytes: int = Field(default=1_048_576, ge=256)
    fsync: bool = True
    duplicate_window_sec: int = Field(default=86400, ge=0)
    sent_retention_days: float = Field(default=7, ge=0)
    runs_retention_days: float = Field(default=30, ge=0)  # finished workflow runs (0: kept forever)
    lock_ttl_sec: float = Field(default=60, gt=0)
    receipt_after_sec: float = Field(default=5, ge=0)  # a message waiting this long behind its conversation
                                                       # is told so (0: never)
    backend: str = Field(default="files", pattern=r"^[a-z][a-z0-9_-]{0,31}$")  # a backend a plugin declares
    # (switchyard_backends): files (built in), postgres (shared state, more than one host), or a plugin's own
    dsn_env: str = Field(default="SWITCHYARD_DSN", min_length=1)  # the variable holding the PostgreSQL DSN
    lease_sec: float = Field(default=15, gt=0)  # postgres: a dead channel owner's profile is taken over after
                                                # this, and a silent worker's messages are retried by another
    events_retention_days: float = Field(default=30, ge=0)  # postgres: switchyard_events rows kept (0: forever)
    db_files_max_bytes: int = Field(default=20 * 1024 * 1024, ge=0)  # postgres: larger attachments need
                                                                     # files.shared_dir



class FileSettings(Strict):
    extra_roots: list[str] = Field(default_factory=list)
    shared_dir: str | None = None  # postgres: a folder every host mounts, for attachments over
                                   # queue.db_files_max_bytes
