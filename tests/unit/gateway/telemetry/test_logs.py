"""gateway/telemetry/logs.py: one line per record on stderr, text or JSON, secrets masked."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.logs import (
    OneLineFormatter,
    ThrottledLog,
    apply_log_settings,
    configure_logging,
    divert_log_lines,
)
from gateway.testing import wait_until


def _failing_record() -> logging.LogRecord:
    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        logger = logging.getLogger("switchyard.test")
        return logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "it broke:\n%s", ("details",),
                                 sys.exc_info())


def test_a_multi_line_message_with_a_traceback_is_one_text_line() -> None:
    line = OneLineFormatter("text").format(_failing_record())
    assert "\n" not in line
    assert "ERROR switchyard.test: it broke:\\ndetails" in line
    assert "Traceback" in line and "ValueError: first line\\nsecond line" in line


def test_json_is_one_object_per_record_with_time_level_logger_message_and_exception() -> None:
    line = OneLineFormatter("json").format(_failing_record())
    assert "\n" not in line
    record = json.loads(line)
    assert record["level"] == "ERROR" and record["logger"] == "switchyard.test"
    assert record["message"] == "it broke:\ndetails"
    assert datetime.fromisoformat(record["time"]).utcoffset() == timedelta(0)
    assert "ValueError: first line\nsecond line" in record["exception"]


@pytest.fixture
def root_handlers() -> Iterator[None]:
    """Restores what `configure_logging` changes: the root logger's handlers and level, the hooks."""
    root = logging.getLogger()
    saved, level, excepthook = root.handlers[:], root.level, sys.excepthook
    yield
    root.handlers[:] = saved
    root.setLevel(level)
    sys.excepthook = excepthook
    logging.captureWarnings(False)


def _our_formatter() -> OneLineFormatter:
    [formatter] = [h.formatter for h in logging.getLogger().handlers if isinstance(h.formatter, OneLineFormatter)]
    return formatter


def test_settings_choose_the_format_unless_the_environment_did(root_handlers: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_LOG_FORMAT", raising=False)
    configure_logging()
    assert _our_formatter().kind == "text"
    apply_log_settings(Settings(log_format="json"))
    assert _our_formatter().kind == "json"
    monkeypatch.setenv("SWITCHYARD_LOG_FORMAT", "text")
    apply_log_settings(Settings(log_format="json"))
    assert _our_formatter().kind == "text"


def test_values_of_env_variables_named_by_settings_are_masked(root_handlers: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGS_TEST_TOKEN", "s3cr3t-token-value")
    configure_logging()
    apply_log_settings(Settings(channels=[ChannelProfile(id="tg", type="telegram", token_env="LOGS_TEST_TOKEN")]))
    for kind in ("text", "json"):
        _our_formatter().kind = kind  # type: ignore[assignment]
        record = logging.getLogger("t").makeRecord("t", logging.INFO, __file__, 1, "token %s", ("s3cr3t-token-value",),
                                                    None)
        line = _our_formatter().format(record)
        assert "s3cr3t-token-value" not in line and "***" in line


def test_diverted_lines_reach_the_console_one_a_record_without_traceback_and_the_file_whole(
        root_handlers: None, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_LOG_FORMAT", "text")
    monkeypatch.setenv("LOGS_TEST_TOKEN", "s3cr3t-token-value")
    configure_logging()
    apply_log_settings(Settings(channels=[ChannelProfile(id="tg", type="telegram", token_env="LOGS_TEST_TOKEN")]))
    shown: list[str] = []
    full_log = tmp_path / "logs" / "console.log"
    restore = divert_log_lines(shown.append, full_log)
    logger = logging.getLogger("switchyard.test")
    logger.warning("plain %s", "news")
    try:
        raise ConnectionError("refused by s3cr3t-token-value")
    except ConnectionError:
        logger.exception("poll failed")
    restore()
    logger.warning("after the console")
    assert shown[0].endswith("WARNING switchyard.test: plain news")
    assert shown[1].endswith(f"ERROR switchyard.test: poll failed: ConnectionError: refused by *** "
                             f"(traceback in {full_log})")
    assert len(shown) == 2 and "Traceback" not in "".join(shown)
    whole = full_log.read_text()
    assert "plain news" in whole and "Traceback (most recent call last)" in whole and "s3cr3t" not in whole
    err = capsys.readouterr().err
    assert "after the console" in err and "poll failed" not in err


def test_an_uncaught_exception_is_one_record_too(root_handlers: None, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_LOG_FORMAT", "json")
    configure_logging()
    try:
        raise RuntimeError("crash\nwith two lines")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["level"] == "CRITICAL" and "RuntimeError: crash\nwith two lines" in record["exception"]


def test_a_throttled_log_writes_each_message_once_per_interval_in_one_line_and_counts_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    log = ThrottledLog(logging.getLogger("switchyard.test.throttled"), interval_s=3600)
    for attempt in range(100):
        try:
            raise ValueError(f"bad request {attempt}")
        except ValueError:
            log.exception("request from %s failed", "peer")
    log.error("another message")
    assert [r.getMessage() for r in caplog.records] == ["request from peer failed: ValueError: bad request 0",
                                                       "another message"]
    assert all(r.exc_info is None for r in caplog.records)

    caplog.clear()
    quick = ThrottledLog(logging.getLogger("switchyard.test.throttled"), interval_s=0.05)

    def counted() -> bool:
        quick.warning("flood")
        return any("more like it" in r.getMessage() for r in caplog.records)

    wait_until(counted, 10, interval_s=0.001)
    assert caplog.records[0].getMessage() == "flood"
    assert caplog.records[-1].getMessage().startswith("flood (") and "not logged" in caplog.records[-1].getMessage()
