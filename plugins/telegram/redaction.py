"""Keeps the bot token out of log output: the token is part of every Bot API URL."""

from __future__ import annotations

import logging

WATCHED_LOGGERS = ("httpx", "telegram")
# python-telegram-bot's reports, with a traceback, of a failure the plugin reports itself in one line (a poll
# that failed, a restart of polling that could not reach the Bot API): kept at DEBUG, shown with `-v`.
ALSO_REPORTED = ("Network Retry Loop", "Error while calling `get_updates` one more time")


class TokenFilter(logging.Filter):
    """Masks the token in records of httpx and python-telegram-bot, drops httpx's per-request INFO lines for
    this bot (one every long poll, each carrying the token in its URL), and lowers to DEBUG the library's
    tracebacks of failures the plugin reports itself (`ALSO_REPORTED`): one line per failure."""

    def __init__(self, token: str):
        super().__init__()
        self.token = token
        self._loggers: list[logging.Logger] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.token in message:
            if record.name.startswith("httpx") and record.levelno < logging.WARNING:
                return False
            record.msg, record.args = message.replace(self.token, "***"), None
        if record.name.startswith("telegram") and message.startswith(ALSO_REPORTED):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            if not logging.getLogger().isEnabledFor(logging.DEBUG):
                return False
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and self.token in record.exc_text:
            record.exc_text = record.exc_text.replace(self.token, "***")
        return True

    def install(self) -> None:
        """Attaches to every httpx and telegram logger that exists now (filters do not inherit)."""
        names = [name for name in logging.root.manager.loggerDict
                 if name.split(".")[0] in WATCHED_LOGGERS]
        for name in dict.fromkeys([*WATCHED_LOGGERS, *names]):
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._loggers.append(logger)

    def remove(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers.clear()
