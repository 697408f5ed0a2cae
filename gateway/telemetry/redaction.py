"""Keeps a database password out of what is printed, logged or evented.

libpq quotes the part of a DSN it cannot parse (`invalid percent-encoded token: "p%ss"`: a password
with an unencoded `%`), so a database error may carry the password even when the DSN itself is never
shown; and a DSN libpq cannot parse cannot be taken apart by psycopg either. These helpers therefore
read the password from the raw string: the URL form (`scheme://user:PASSWORD@host`) and the key/value
form and URL parameter (`password=PASSWORD`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

MASK = "***"
MIN_MASKED = 3  # a shorter password would mask every such letter of the message (and is no secret)

_URL_PASSWORD = re.compile(r"://[^:@/\s]*:(.*)@")  # greedy: a password may hold an unencoded @
_KEY_PASSWORD = re.compile(r"(?i)(?:^|[\s?&])password\s*=\s*('(?:\\.|[^'\\])*'|[^\s&#]*)")


def dsn_passwords(dsn: str) -> list[str]:
    """Every password `dsn` holds as written, and as decoded (%-escapes, quotes), and as a JSON line or a
    one-line log record escapes it (a `"` or `\\` in it), longest first."""
    found: set[str] = set()
    for match in [*_URL_PASSWORD.finditer(dsn), *_KEY_PASSWORD.finditer(dsn)]:
        raw = match.group(1)
        found.add(raw)
        if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2:
            found.add(re.sub(r"\\(.)", r"\1", raw[1:-1]))
        found.add(unquote(raw))
    found |= {json.dumps(value)[1:-1] for value in found} | {value.replace("\\", "\\\\") for value in found}
    return sorted((value for value in found if len(value) >= MIN_MASKED), key=len, reverse=True)


def redact(text: str, dsn: str | None) -> str:
    """`text` (an error message, a log line) with every password of `dsn` masked."""
    for password in dsn_passwords(dsn or ""):
        text = text.replace(password, MASK)
    return text


def redacted_dsn(dsn: str) -> str:
    """The DSN with its password masked, fit for a log line or `status`; works on a DSN libpq refuses."""
    shown = _URL_PASSWORD.sub(_masked, dsn, count=1)
    return _KEY_PASSWORD.sub(_masked, shown)


def _masked(match: re.Match[str]) -> str:
    """The match with its password group (and only that: the user name may hold the same text) masked."""
    start, end = match.start(1) - match.start(), match.end(1) - match.start()
    return match.group(0)[:start] + MASK + match.group(0)[end:]


def database_error(exc: BaseException, dsn: str, *, doing: str = "use") -> str:
    """One line for an operator: `cannot use the database at <DSN without password>: <first line of the
    error, its password masked>`."""
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"cannot {doing} the database at {redacted_dsn(dsn)}: {redact(said, dsn)}"
