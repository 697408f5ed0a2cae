"""The `switchyard dead` subcommand: list, show, retry and drop the backend's dead letters (the file
backend's queue/failed/, gateway/spool/deadletters.py; on PostgreSQL gateway/backends/postgres/deadletters.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from gateway.cli import EXIT_NO_HOME, not_a_home
from gateway.cli.backends import failure_text
from gateway.cli.tables import print_table, printable
from gateway.composition import open_backend

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_DATABASE = 2  # the database is unreachable (as `switchyard db`)
RELOAD_WAIT_S = 5.0  # how long `retry` waits for the running gateway to read an edited settings.yaml


def cmd_dead(args: argparse.Namespace, run: Invocation) -> int:
    """Runs one `dead` action (its arguments are declared in gateway/cli/__init__.py) on the backend's dead letters;
    an unknown name exits 1 and changes nothing; an unreachable database is one line on stderr and exit 2."""
    backend = open_backend(run.home, run.settings)
    if backend.in_home and not_a_home(run.home):  # else a mistyped --home would answer "no dead letters"
        return EXIT_NO_HOME
    if args.dead_command == "retry":
        for note in older_settings(run):
            print(f"switchyard: warning: {note}", file=sys.stderr)
    try:
        return _run(args, backend.dead_letters(), backend)
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE


def older_settings(run: Invocation) -> list[str]:
    """What a retry is warned of: this host's running gateway runs older settings than the file (an edit it
    has not read, refused, or that needs a restart). It first waits up to RELOAD_WAIT_S for the gateway to
    read an edit (it looks every 2 s), so that a message retried after a fix meets the fixed settings."""
    from gateway.cli.status import gateway_process, read_as_it_is, settings_notes

    deadline = time.monotonic() + RELOAD_WAIT_S
    while True:
        gateway = gateway_process(run.home)
        seen = gateway.get("settings")
        if not gateway["running"] or not isinstance(seen, dict) or read_as_it_is(seen) or time.monotonic() > deadline:
            return settings_notes(gateway)
        time.sleep(0.1)


def _run(args: argparse.Namespace, store: Any, backend: Any) -> int:
    from gateway.cli.access import record_operator

    try:
        if args.dead_command == "list":
            return _list(store, as_json=args.json)
        if args.dead_command == "show":
            return _show(store, args.name, as_json=args.json)
        if args.dead_command == "retry":
            code, retried = _retry(store, args.names, every=args.all)
            if retried:
                record_operator(backend, "dead.retry", f"retried {', '.join(retried)}", names=retried)
            return code
        dropped = store.drop(args.names)
        for name in dropped:
            print(f"dropped {name}")
        if dropped:
            record_operator(backend, "dead.drop", f"dropped {', '.join(dropped)}", names=list(dropped))
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


def _retry(store: Any, names: list[str], *, every: bool) -> tuple[int, list[str]]:
    """(exit code, the names retried)."""
    if every == bool(names):
        print("switchyard: dead retry takes NAME… or --all", file=sys.stderr)
        return 2, []
    kinds = {letter.name: letter.kind for letter in store.list_dead()}
    done = store.retry_all() if every else store.retry(names)
    for name in done:
        print(f"retried {name} → {store.where(kinds.get(name, 'message'))}")
    if not done:
        print("no dead letters")
    return 0, list(done)
