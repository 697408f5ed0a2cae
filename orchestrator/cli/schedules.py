"""`switchyard schedules`: every scheduled prompt, when it fires next, its last occurrence and outcome."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings

EXIT_DATABASE = 2  # the postgres backend's database is unreachable (as `status`, `dead`, `db`)


def add_schedules_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `schedules`."""
    schedules = commands.add_parser("schedules", help="scheduled prompts: when each fires next, its last "
                                                      "occurrence and outcome")
    schedules.add_argument("--json", action="store_true", help="print JSON for scripts")
    schedules.set_defaults(run=cmd_schedules)


def cmd_schedules(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Lists every schedule of every orchestrator with its next and last occurrence and the outcome; on the
    postgres backend an unreachable database is one line on stderr and exit 2."""
    from gateway.cli.backends import failure_text
    from gateway.cli.tables import print_table
    from orchestrator.schedules.listing import HEADERS, rows_for, table_rows
    from orchestrator.storage.stores import backend_for

    backend = backend_for(home, settings)
    try:
        rows = rows_for(home, settings, backend)
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        backend.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print_table(HEADERS, table_rows(rows))
    else:
        print("no schedules (add `schedules:` to an orchestrator.yaml)")
    return 0
