"""The `switchyard approvals` subcommand: the tool approvals waiting for an answer (list), and an operator's
answer to one (allow, deny), on the backend's store (gateway/approvals.py; gateway/backends/postgres/approvals.py)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway.approvals import describe, operator_answer
from gateway.channelkit.access import duration_text
from gateway.cli import EXIT_NO_HOME, not_a_home
from gateway.cli.backends import failure_text
from gateway.cli.tables import print_table, printable
from gateway.composition import open_backend

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_DATABASE = 2  # the database is unreachable (as `switchyard dead`)


def cmd_approvals(args: argparse.Namespace, run: Invocation) -> int:
    """Lists pending approvals, or allows or denies one (an unknown or settled one exits 1)."""
    backend = open_backend(run.home, run.settings)
    if backend.in_home and not_a_home(run.home):  # else a mistyped --home would list none
        return EXIT_NO_HOME
    try:
        store = backend.approvals(command=True)
        if args.approvals_command in ("allow", "deny"):
            code = _answer(store, args.id, args.approvals_command)
            if code == 0:
                from gateway.audit import operator_answer_key
                from gateway.cli.access import record_operator

                record_operator(backend, "approval.answer", f"{args.approvals_command} {args.id}",
                                key=operator_answer_key(args.id), approval=args.id, verdict=args.approvals_command)
            return code
        return _list(store, as_json=getattr(args, "json", False))
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE


def _list(store: Any, *, as_json: bool) -> int:
    listed = [describe(approval) for approval in store.pending()]
    if as_json:
        print(json.dumps(listed, indent=2))
    elif not listed:
        print("no pending approvals")
    else:
        print_table(["ID", "CONVERSATION", "TOOL CALL", "OPTIONS", "ASKED", "EXPIRES"],
                    [[row["id"], row["conversation"], row["title"], row["options"],
                      f"{duration_text(max(row['age_s'], 0))} ago", _expiry(row["expires_in_s"])] for row in listed])
    return 0


def _expiry(left: float) -> str:
    return f"in {duration_text(left)}" if left > 0 else f"{duration_text(-left)} ago"


def _answer(store: Any, approval_id: str, verdict: str) -> int:
    try:
        done, won = operator_answer(store, approval_id, verdict, by=f"cli:{getpass.getuser()}")
    except KeyError:
        print(printable(f"switchyard: no approval {approval_id!r} (see `switchyard approvals list`)"), file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"switchyard: {exc}", file=sys.stderr)
        return 1
    if not won:
        print(printable(f"switchyard: approval {done.id} is {done.state} already"
                        f"{f' (by {done.answered_by})' if done.answered_by else ''}"), file=sys.stderr)
        return 1
    print(printable(f"{'allowed' if done.allowed() else 'denied'}: {done.title} ({done.id})"))
    return 0
