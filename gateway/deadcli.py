"""The `switchyard dead` subcommand: list, show, retry and drop dead letters (see gateway/deadletters.py)."""

from __future__ import annotations

import argparse
import json
import sys

from gateway import deadletters
from gateway.home import Home
from gateway.settings import Settings
from gateway.tables import print_table


def add_dead_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `dead list | show NAME | retry NAME… | retry --all | drop NAME…` to the `switchyard` parser."""
    dead = commands.add_parser("dead", help="dead letters: messages and replies that failed for good")
    actions = dead.add_subparsers(dest="dead_command", required=True)
    listing = actions.add_parser("list", help="every dead letter, newest first, with its reason")
    listing.add_argument("--json", action="store_true", help="print JSON")
    show = actions.add_parser("show", help="one dead letter: its report and original payload")
    show.add_argument("name", help="the file name `dead list` shows")
    show.add_argument("--json", action="store_true", help="print JSON")
    retry = actions.add_parser("retry", help="put dead letters back (messages to incoming/, replies to "
                                             "outgoing/) with a fresh attempt count")
    retry.add_argument("names", nargs="*", metavar="NAME", help="file names `dead list` shows")
    retry.add_argument("--all", action="store_true", help="every dead letter")
    drop = actions.add_parser("drop", help="delete dead letters for good")
    drop.add_argument("names", nargs="+", metavar="NAME", help="file names `dead list` shows")
    dead.set_defaults(run=cmd_dead)


def cmd_dead(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Runs one `dead` action; an unknown name exits 1 and changes nothing."""
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
