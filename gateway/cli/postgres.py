"""The PostgreSQL backend's commands (queue.backend: postgres): `switchyard db migrate|check`, the schema, from
the DSN in the variable `queue.dsn_env` names; `switchyard worker`, a process that only processes messages from
the PostgreSQL queue (no channels, no delivery). The backend is imported only when one runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.telemetry.redaction import database_error

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_PROBLEM = 2


def cmd_db(args: argparse.Namespace, run: Invocation) -> int:
    """Migrates or checks the schema; exit 2 with one line when the database is unreachable or behind."""
    import psycopg

    from gateway.backends.postgres import schema
    from gateway.backends.postgres.db import dsn_from_settings

    dsn = dsn_from_settings(run.settings.queue)
    try:
        if args.db_command == "migrate":
            applied = schema.migrate(dsn)
            print(f"applied {len(applied)} migration(s): {', '.join(applied)}" if applied
                  else "the schema is up to date")
            return 0
        schema.check(dsn)
        print("the schema is up to date")
        return 0
    except schema.SchemaOutdated as exc:
        print(f"switchyard: {exc}", file=sys.stderr)
    except psycopg.Error as exc:
        print(f"switchyard: {database_error(exc, dsn)}", file=sys.stderr)
    return EXIT_PROBLEM


def cmd_worker(args: argparse.Namespace, run: Invocation) -> int:
    """Runs the processing half of `switchyard run`; refuses (exit 2) on the file backend."""
    from gateway.composition import backend_name

    if backend_name(run.settings) != "postgres":
        print("switchyard: `switchyard worker` needs queue.backend: postgres (with the file backend, "
              "`switchyard run` processes the queue; run more of them on the same home instead)", file=sys.stderr)
        return EXIT_PROBLEM
    from gateway.cli.commands import cmd_run

    return cmd_run(args, run, role="worker")
