"""Process logging: one line per record on stderr, as text or JSON, with configured secrets masked; while a
console owns the terminal, each line is handed to it to print above its prompt (`divert_log_lines`)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from gateway.telemetry.tracing import current_ids

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
        ids = current_ids()  # telemetry on, inside a message's trace: the line names it
        if self.kind == "json":
            fields = self._fields(record)
            line = json.dumps({**fields, "trace_id": ids[0]} if ids else fields, ensure_ascii=False, default=str)
        else:
            line = _escape_newlines(super().format(record)) + (f" trace_id={ids[0]}" if ids else "")
        for secret in self.secrets:
            line = line.replace(secret, "***")
        return line

    def summary(self, record: logging.LogRecord, *, traceback_in: str | None = None) -> str:
        """The record as `format` writes it, with an exception's type and text instead of its traceback
        (and where the traceback is, when `traceback_in` says)."""
        brief = logging.makeLogRecord(record.__dict__)
        brief.exc_info = brief.exc_text = brief.stack_info = None
        error = _exception(record.exc_info)
        if error is not None or record.exc_text:
            told = f": {type(error).__name__}: {error}" if error is not None else ""
            where = f" (traceback in {traceback_in})" if traceback_in else ""
            brief.msg, brief.args = f"{record.getMessage()}{told}{where}", None
        return self.format(brief)

    def _fields(self, record: logging.LogRecord) -> dict[str, Any]:
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields: dict[str, Any] = {"time": when, "level": record.levelname,
                                  "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return fields


class ThrottledLog(logging.LoggerAdapter):  # type: ignore[type-arg]  # generic only in typeshed
    """A logger that writes each message (told apart by its format string) at most once every `interval_s`,
    as one line: an exception's type and text instead of its traceback, and how many it held back since.

    For what a stranger can repeat at will (malformed requests, a connection flood): the log stays small.
    """

    def __init__(self, logger: logging.Logger, interval_s: float):
        super().__init__(logger, {})
        self.interval_s = interval_s
        self._last: dict[str, tuple[float, int]] = {}  # format string -> (when last written, held back since)
        self._lock = threading.Lock()

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None, stack_info: bool = False,
            stacklevel: int = 1, extra: Mapping[str, object] | None = None, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        held = self._admit(str(msg))
        if held is None:
            return
        error = _exception(exc_info)
        text = (str(msg) % args if args else str(msg)) + (f": {type(error).__name__}: {error}" if error else "")
        if held:
            text += f" ({held} more like it in the last {self.interval_s:g} s not logged)"
        self.logger.log(level, "%s", text, extra=extra)
        if error is not None:  # the traceback too with `-v`
            self.logger.debug("traceback of: %s", text, exc_info=error)

    def _admit(self, key: str) -> int | None:
        """How many were held back since this message was last written, or None to hold this one back."""
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(key, (float("-inf"), 0))
            if now - last < self.interval_s:
                self._last[key] = (last, held + 1)
                return None
            self._last[key] = (now, 0)
            return held


class ShownLines(logging.Handler):
    """Hands each record, as one line without its traceback, to `show` (a console printing it above its prompt)."""

    def __init__(self, show: Callable[[str], None], formatter: OneLineFormatter, traceback_in: str | None):
        super().__init__()
        self.show = show
        self.summarizer = formatter
        self.traceback_in = traceback_in
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.show(self.summarizer.summary(record, traceback_in=self.traceback_in))
        except Exception:
            self.handleError(record)


def divert_log_lines(show: Callable[[str], None], full_log: Path | None = None) -> Callable[[], None]:
    """Hands every record the handlers of `configure_logging` would write on stderr to `show` instead, one
    line each (an exception as its type and text, not its traceback), and appends each record whole,
    traceback included, to `full_log`; until the function returned is called. For a console that owns the
    terminal: a line written on stderr would land in the middle of the line being typed."""
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if isinstance(handler.formatter, OneLineFormatter)]
    if not ours:  # logging is someone else's (a test's): nothing to divert
        return lambda: None
    formatter = ours[0].formatter
    assert isinstance(formatter, OneLineFormatter)
    added: list[logging.Handler] = []
    if full_log is not None:
        full_log.parent.mkdir(parents=True, exist_ok=True)
        whole = logging.FileHandler(full_log, encoding="utf-8")
        whole.setFormatter(formatter)
        added.append(whole)
    added.append(ShownLines(show, formatter, str(full_log) if full_log is not None else None))
    for handler in ours:
        root.removeHandler(handler)
    for handler in added:
        root.addHandler(handler)

    def restore() -> None:
        for handler in added:
            root.removeHandler(handler)
            handler.close()
        for handler in ours:
            root.addHandler(handler)

    return restore


def _exception(exc_info: Any) -> BaseException | None:
    """The exception `exc_info` names, as `Logger.log` takes it (True: the one being handled)."""
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    return sys.exc_info()[1] if exc_info else None


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
    from gateway.settings import secret_env_names
    from gateway.telemetry.redaction import dsn_passwords

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
