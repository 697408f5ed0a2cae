"""`switchyard roles` (who has what, per channel profile) and `switchyard audit` (the privileged actions, from the
backend's audit log), and `record_operator`: the audit record of an operator command (`dead retry`, `pair
approve`, `usage reset`, `approvals allow`)."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gateway.cli import EXIT_NO_HOME, not_a_home
from gateway.cli.backends import failure_text
from gateway.cli.tables import print_table, printable
from gateway.composition import open_backend

if TYPE_CHECKING:
    from gateway.backends import Backend
    from gateway.cli import Invocation

log = logging.getLogger("switchyard.cli")
EXIT_DATABASE = 2
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def since_time(text: str) -> datetime:
    """`--since`: an age (`12h`) before now, or an ISO time (UTC when it names no zone)."""
    unit = UNITS.get(text[-1:])
    if unit is not None and text[:-1].isdigit():
        return datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * unit)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an ISO time nor an age like 30m, 12h, 7d") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def cmd_roles(args: argparse.Namespace, run: Invocation) -> int:
    """Prints the roles and their permissions, then who holds which role on each channel profile."""
    from gateway.roles import RoleBook

    book = RoleBook(run.settings)
    rows = book.table()
    if args.json:
        print(json.dumps({"roles": {name: list(p) for name, p in book.roles.items()}, "assigned": rows}, indent=2))
        return 0
    print_table(["ROLE", "PERMISSIONS"], [[name, ", ".join(p) or "(none)"] for name, p in book.roles.items()])
    print()
    if not rows:
        print("no channel profiles")
        return 0
    print_table(["PROFILE", "WHO", "ROLE"], [[r["profile"], printable(r["who"]), r["role"]] for r in rows])
    for problem in book.problems():
        print(f"switchyard: warning: {problem}", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace, run: Invocation) -> int:
    """Lists the audit records, oldest first (an unreachable database: one line on stderr, exit 2)."""
    from gateway.stores import AUDIT

    try:
        since = since_time(args.since) if args.since else None
    except ValueError as exc:
        print(f"switchyard: --since: {exc}", file=sys.stderr)
        return 2
    backend = open_backend(run.home, run.settings)
    if backend.in_home and not_a_home(run.home):
        return EXIT_NO_HOME
    try:
        records = backend.store(AUDIT, command=True).records(since=since, by=args.by)
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        backend.close()
    if args.json:
        print(json.dumps([record.to_json() for record in records], indent=2))
    elif not records:
        print("no audit records")
    else:
        print_table(["WHEN", "BY", "WHERE", "ACTION", "WHAT"],
                    [[r.at[:19].replace("T", " "), printable(r.by), printable(r.where), r.action, printable(r.what)]
                     for r in records])
    return 0


def record_operator(backend: Backend, action: str, what: str, *, key: str | None = None, **details: Any) -> None:
    """Appends the audit record of an operator command run on this machine (`by`: operator, the OS user in
    `details`; `key`: names the occurrence, see AuditRecord.new); a failing audit log is a warning, the
    command's work is done."""
    from gateway.audit import OPERATOR, AuditRecord
    from gateway.stores import AUDIT

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    record = AuditRecord.new(by=OPERATOR, where="cli", action=action, what=what, key=key, user=user, **details)
    try:
        backend.store(AUDIT, command=True).append(record)
    except KeyError:
        log.info("no audit log on this backend: %s %s", action, what)
    except Exception as exc:
        print(f"switchyard: warning: the audit record of {action} was not written: {exc}", file=sys.stderr)
