"""The `switchyard dead` subcommand: list, show, retry and drop dead letters (see gateway/deadletters.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from gateway import deadletters
from gateway.home import Home
from gateway.tables import print_table

if TYPE_CHECKING:
    from gateway.cli import Invocation


def cmd_dead(args: argparse.Namespace, run: Invocation) -> int:
    """Runs one `dead` action (its arguments are declared in gateway/cli.py); an unknown name exits 1 and
    changes nothing."""
    home = run.home
    try:
        if args.dead_command == "list":
            return _list(home, as_json=args.json)
        if args.dead_command == "show":
            return _show(home, args.name, as_json=args.json)
        if args.dead_command == "retry":
            return _retry(home, args.names, every=args.all)
        for name in deadletters.drop(home, args.names):
            print(f"dropped {name}")
        return 0
    except KeyError as exc:
        print(f"switchyard: no such dead letter: {exc.args[0]} (see `switchyard dead list`)", file=sys.stderr)
        return 1


def _list(home: Home, *, as_json: bool) -> int:
    letters = deadletters.list_dead(home)
    if as_json:
        print(json.dumps([letter.to_json() for letter in letters], indent=2))
    elif not letters:
        print("no dead letters")
    else:
        print_table(["NAME", "KIND", "ATTEMPTS", "FAILED AT", "CONVERSATION", "REASON"],
                    [[letter.name, letter.kind, str(letter.attempts), letter.failed_at or "-",
                      letter.conversation or "-", letter.reason] for letter in letters])
    return 0


def _show(home: Home, name: str, *, as_json: bool) -> int:
    letter, data = deadletters.show(home, name)
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
        print(f"{key}: {value if value is not None else '-'}")
    print("payload:")
    print(json.dumps(payload, indent=2, ensure_ascii=False) if payload is not None else text)
    return 0


def _retry(home: Home, names: list[str], *, every: bool) -> int:
    if every == bool(names):
        print("switchyard: dead retry takes NAME… or --all", file=sys.stderr)
        return 2
    kinds = {letter.name: letter.kind for letter in deadletters.list_dead(home)}
    done = deadletters.retry_all(home) if every else deadletters.retry(home, names)
    for name in done:
        print(f"retried {name} → {'outgoing' if kinds.get(name) == 'reply' else 'incoming'}/")
    if not done:
        print("no dead letters")
    return 0
