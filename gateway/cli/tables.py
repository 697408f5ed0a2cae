"""Tables for the CLI: rich on a terminal, plain aligned columns in a pipe or a file.

Every cell is untrusted text (a dead letter's reason may quote a sender, a display name is the sender's
choice): control characters are shown as escapes, never sent to the terminal, and on a terminal rich's
markup in a cell is printed as text.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

# C0 and C1 controls, DEL, and the Unicode line separators and bidirectional overrides that reorder text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: object) -> str:
    """`text` with each control character shown as an escape (`\\x1b`, `\\r`, `\\u202e`): what a person
    may print to a terminal without it moving the cursor, clearing the screen or forging a line."""
    return _UNPRINTABLE.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None) -> None:
    """Prints rows under headers; on a terminal as a rich table, else as plain text a script can read."""
    headers = [printable(cell) for cell in headers]
    rows = [[printable(cell) for cell in row] for row in rows]
    title = printable(title) if title is not None else None
    if sys.stdout.isatty():
        from rich.console import Console  # imported only here: it costs ~100 ms at start
        from rich.markup import escape
        from rich.table import Table

        table = Table(*map(escape, headers), title=escape(title) if title else None, title_justify="left")
        for row in rows:
            table.add_row(*map(escape, row))
        Console().print(table)
        return
    if title:
        print(title)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
