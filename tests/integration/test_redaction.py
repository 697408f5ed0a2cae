"""gateway/telemetry/redaction.py: a database password never reaches the operator's screen, a log or an event, even
when libpq cannot parse the DSN and quotes the password in its error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.telemetry.redaction import database_error, dsn_passwords, redact, redacted_dsn
from tests.process import SWITCHYARD, clean_environment

PASSWORD = "p%ss"  # an unencoded %: libpq answers `invalid percent-encoded token: "p%ss"`
BAD_DSN = f"postgresql://u:{PASSWORD}@127.0.0.1:1/x"  # port 1: nothing ever connects


@pytest.mark.parametrize("dsn, passwords", [
    (BAD_DSN, [PASSWORD]),
    ("postgresql://u:abc%40def@h/x", ["abc%40def", "abc@def"]),
    ("postgresql://u:p@ss/w@h:5/x", ["p@ss/w"]),
    ("host=h password=s3cr%t user=u", ["s3cr%t"]),
    ("host=h password='a b\\'c' user=u", ["'a b\\'c'", "a b'c"]),
    ("postgresql://h/x?user=u&password=zz%zz", ["zz%zz"]),
    ("postgresql://u@h:5432/x", []),
])
def test_the_password_is_found_in_the_raw_dsn(dsn: str, passwords: list[str]) -> None:
    assert set(passwords) <= set(dsn_passwords(dsn)) and (passwords or not dsn_passwords(dsn))
    for password in passwords:
        assert password not in redacted_dsn(dsn) and password not in redact(f"said {password}", dsn)


def test_a_database_error_names_the_host_but_not_the_password() -> None:
    line = database_error(ValueError(f'invalid percent-encoded token: "{PASSWORD}"\n'), BAD_DSN)
    assert line == 'cannot use the database at postgresql://u:***@127.0.0.1:1/x: invalid percent-encoded token: "***"'


@pytest.mark.parametrize("argv", [("status",), ("status", "--json"), ("dead", "list"), ("pair", "list"),
                                  ("db", "check"), ("runs",), ("run",)])
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_command_shows_a_password_libpq_cannot_parse(tmp_path: Path, argv: tuple[str, ...],
                                                        log_format: str) -> None:
    (tmp_path / "settings.yaml").write_text("queue: {backend: postgres}\nchannels: []\n")
    env = clean_environment({"SWITCHYARD_DSN": BAD_DSN, "SWITCHYARD_LOG_FORMAT": log_format})
    result = subprocess.run([SWITCHYARD, "--home", str(tmp_path), *argv], capture_output=True, text=True,
                            env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot use the database at postgresql://u:***@127.0.0.1:1/x" in result.stderr
    assert "Traceback" not in result.stderr
    written = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file())
    for shown in (result.stdout, result.stderr, written):
        assert PASSWORD not in shown and "p%25ss" not in shown


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_password_with_quotes_and_backslashes_is_masked_in_escaped_log_lines(tmp_path: Path,
                                                                              log_format: str) -> None:
    password = 'q"u\\o%te'
    (tmp_path / "settings.yaml").write_text("queue: {backend: postgres}\n")
    env = clean_environment({"SWITCHYARD_DSN": f"postgresql://u:{password}@127.0.0.1:1/x",
                             "SWITCHYARD_LOG_FORMAT": log_format})
    result = subprocess.run([SWITCHYARD, "--home", str(tmp_path), "runs"], capture_output=True, text=True,
                            env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert "psycopg.pool" in result.stderr and "***" in result.stderr, result.stderr
    for form in ("o%te", 'q\\"u', "q\\\\u"):
        assert form not in result.stderr, (form, result.stderr)


@pytest.mark.parametrize("dsn, shown", [
    ("postgresql://postgres:postgres@db:5432/app", "postgresql://postgres:***@db:5432/app"),  # user = password
    ("postgresql://admin:adm@db/app", "postgresql://admin:***@db/app"),  # the password inside the user name
    ("host=db user=u password=password", "host=db user=u password=***"),  # the password is the key's name
])
def test_the_dsn_shown_masks_the_password_even_when_the_text_before_it_holds_it(dsn: str, shown: str) -> None:
    assert redacted_dsn(dsn) == shown
