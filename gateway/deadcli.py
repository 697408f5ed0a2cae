"""The `switchyard dead` subcommand: list, show, retry and drop dead letters (see gateway/deadletters.py;
on the PostgreSQL backend gateway/pg/deadletters.py, the same operations on the database)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway import deadletters
from gateway.cli import EXIT_NO_HOME, not_a_home
from gateway.home import Home
from gateway.tables import print_table, printable

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_DATABASE = 2  # the database is unreachable (as `switchyard db`)


class FileStore:
    """The file backend's dead letters (queue/failed/), with the operations `dead` runs."""

    def __init__(self, home: Home):
        self.home = home

    def list_dead(self) -> list[deadletters.DeadLetter]:
        return deadletters.list_dead(self.home)

    def show(self, name: str) -> tuple[deadletters.DeadLetter, bytes]:
        return deadletters.show(self.home, name)

    def retry(self, names: list[str]) -> list[str]:
        return deadletters.retry(self.home, names)

    def retry_all(self) -> list[str]:
        return deadletters.retry_all(self.home)

    def drop(self, names: list[str]) -> list[str]:
        return deadletters.drop(self.home, names)

    def where(self, kind: str) -> str:
        return "outgoing/" if kind == "reply" else "incoming/"


def cmd_dead(args: argparse.Namespace, run: Invocation) -> int:
    """Runs one `dead` action (its arguments are declared in gateway/cli.py); an unknown name exits 1 and
    changes nothing."""
    if run.settings.queue.backend == "postgres":
        return _on_database(args, run)
    if not_a_home(run.home):  # else a mistyped --home would answer "no dead letters"
        return EXIT_NO_HOME
    return _run(args, FileStore(run.home))


def _on_database(args: argparse.Namespace, run: Invocation) -> int:
    """`dead` against the database; an unreachable one is one line on stderr and exit 2."""
    import psycopg

    from gateway.pg.db import dsn_from_settings
    from gateway.pg.deadletters import DeadStore
    from gateway.redaction import database_error

    dsn = dsn_from_settings(run.settings.queue)
    try:
        return _run(args, DeadStore(dsn, run.home))
    except psycopg.Error as exc:
        print(f"switchyard: {database_error(exc, dsn)}", file=sys.stderr)
        return EXIT_DATABASE


def _run(args: argparse.Namespace, store: Any) -> int:
    try:
        if args.dead_command == "list":
            return _list(store, as_json=args.json)
        if args.dead_command == "show":
            return _show(store, args.name, as_json=args.json)
        if args.dead_command == "retry":
            return _retry(store, args.names, every=args.all)
        for name in store.drop(args.names):
            print(f"dropped {name}")
        return 0
    except KeyError as exc:
        print(f"switchyard: no such dead letter: {exc.args[0]} (see `switchyard dead list`)", file=sys.stderr)
        return 1


def _list(store: Any, *, as_json: bool) -> int:
    letters = store.list_dead()
    if as_json:
        print(json.dumps([letter.to_json() for letter in letters], indent=2))
    elif not letters:
        print("no dead letters")
    else:
        print_table(["NAME", "KIND", "ATTEMPTS", "FAILED AT", "CONVERSATION", "REASON"],
                    [[letter.name, letter.kind, str(letter.attempts), letter.failed_at or "-",
                      letter.conversation or "-", letter.reason] for letter in letters])
    return 0


def _show(store: Any, name: str, *, as_json: bool) -> int:
    letter, data = store.show(name)
    text = data.decode("utf-8", errors="replace")
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        payload = None
    if as_json:
        print(json.dumps({**letter.to_json(), "payload": payload, "raw": None if payload is not None else text},
                         indent=2))
        return 0
    for key, value in letter.to_json().items():
        print(printable(f"{key}: {value if value is not None else '-'}"))
    print("payload:")
    shown = json.dumps(payload, indent=2, ensure_ascii=False) if payload is not None else text
    print("\n".join(printable(line) for line in shown.split("\n")))
    return 0


def _retry(store: Any, names: list[str], *, every: bool) -> int:
    if every == bool(names):
        print("switchyard: dead retry takes NAME… or --all", file=sys.stderr)
        return 2
    kinds = {letter.name: letter.kind for letter in store.list_dead()}
    done = store.retry_all() if every else store.retry(names)
    for name in done:
        print(f"retried {name} → {store.where(kinds.get(name, 'message'))}")
    if not done:
        print("no dead letters")
    return 0
