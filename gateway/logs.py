"""Process logging: one line per record on stderr, as text or JSON, with configured secrets masked."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the CLI configures logging before it needs pydantic
    from gateway.settings import Settings

LogFormat = Literal["text", "json"]
FORMAT_ENV = "SWITCHYARD_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OneLineFormatter(logging.Formatter):
    """Formats a record, its traceback included, as one line of text or one JSON object; masks secrets."""

    def __init__(self, kind: LogFormat = "text"):
        super().__init__(TEXT_FORMAT)
        self.kind: LogFormat = kind
        self.secrets: list[str] = []

    def format(self, record: logging.LogRecord) -> str:
        if self.kind == "json":
            line = json.dumps(self._fields(record), ensure_ascii=False, default=str)
        else:
            line = _escape_newlines(super().format(record))
        for secret in self.secrets:
            line = line.replace(secret, "***")
        return line

    def _fields(self, record: logging.LogRecord) -> dict[str, Any]:
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields: dict[str, Any] = {"time": when, "level": record.levelname,
                                  "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return fields


def _escape_newlines(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def format_from_env(default: LogFormat = "text") -> LogFormat:
    """The format `SWITCHYARD_LOG_FORMAT` asks for (text or json), else `default`."""
    value = os.environ.get(FORMAT_ENV, "").strip().lower()
    return "json" if value == "json" else "text" if value == "text" else default


def configure_logging(*, verbose: bool = False) -> None:
    """Sends every record to stderr, one line each, in the format the environment asks for. Replaces only
    the handlers an earlier call installed: handlers others attached to the root logger (pytest's) stay."""
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if isinstance(h.formatter, OneLineFormatter)]:
        root.removeHandler(earlier)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(format_from_env()))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught


def _log_uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    """Logs an exception nothing caught as one record (Ctrl-C keeps Python's own short report)."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, trace)
        return
    logging.getLogger("switchyard").critical("uncaught %s: %s", kind.__name__, error, exc_info=(kind, error, trace))


def apply_log_settings(settings: Settings) -> None:
    """Applies settings to the handlers `configure_logging` installed: `log_format` (unless the environment
    chose one), and the values of every `*_env` variable, masked. Does nothing to other handlers (tests)."""
    from gateway.redaction import dsn_passwords
    from gateway.settings import secret_env_names

    values = [value for name in secret_env_names(settings) if len(value := os.environ.get(name, "")) >= 4]
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, OneLineFormatter):
            handler.formatter.kind = format_from_env(settings.log_format)
    hide_in_logs([*values, *(password for value in values for password in dsn_passwords(value))])


def hide_in_logs(secrets: list[str]) -> None:
    """Masks these values in every record the handlers `configure_logging` installed write from now on
    (a database password found in a DSN: libpq's errors may quote it)."""
    for handler in logging.getLogger().handlers:
        formatter = handler.formatter
        if isinstance(formatter, OneLineFormatter):
            formatter.secrets.extend(s for s in secrets if s not in formatter.secrets)
