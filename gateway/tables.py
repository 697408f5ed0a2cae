"""Tables for the CLI: rich on a terminal, plain aligned columns in a pipe or a file."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None) -> None:
    """Prints rows under headers; on a terminal as a rich table, else as plain text a script can read."""
    if sys.stdout.isatty():
        from rich.console import Console  # imported only here: it costs ~100 ms at start
        from rich.table import Table

        table = Table(*headers, title=title, title_justify="left")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    if title:
        print(title)
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
