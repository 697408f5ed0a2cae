"""`switchyard db migrate|check`: the PostgreSQL schema, from the DSN in the variable `queue.dsn_env` names."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.backends.postgres.db import dsn_from_settings
from gateway.telemetry.redaction import database_error

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_PROBLEM = 2


def cmd_db(args: argparse.Namespace, run: Invocation) -> int:
    """Migrates or checks the schema; exit 2 with one line when the database is unreachable or behind."""
    import psycopg

    from gateway.backends.postgres import schema

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
