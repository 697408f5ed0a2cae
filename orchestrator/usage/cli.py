"""`switchyard usage`: what agent turns spent per sender, conversation, channel profile or provider over a range of
days (the backend's UsageRecords), and `switchyard usage reset`, which forgets it. Days are counted in the time
zone of `usage.timezone`."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.usage.records import PAYER_KINDS, Spent

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.usage.records import UsageRecords

EXIT_DATABASE = 2  # the postgres backend's database is unreachable (as `runs`, `schedules`)
HEADERS = ["key", "USD", "tokens in", "tokens out", "turns", "agent time"]
SINCE_HELP = ("the first day counted: an ISO date (2026-11-01), `today`, `month` (the first day of this month), or "
              "a number of days back with today included (7d, 2w)")
_DAYS = re.compile(r"(\d+)\s*([dw])")


def add_usage_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `usage` and `usage reset` to the `switchyard` parser."""
    usage = commands.add_parser("usage", help="what agent turns spent (USD, tokens, turns, agent time) per sender, "
                                              "conversation, profile or provider; `usage reset` forgets it")
    usage.add_argument("--by", choices=PAYER_KINDS, default="sender", help="one row per … (default: sender)")
    usage.add_argument("--since", default="month", metavar="WHEN", help=SINCE_HELP + " (default: month)")
    usage.add_argument("--json", action="store_true", help="print JSON for scripts")
    usage_commands = usage.add_subparsers(dest="usage_command", title="subcommands", metavar="{reset}")
    reset = usage_commands.add_parser("reset", help="forget what KEY (or --all keys) of a kind spent since WHEN")
    reset.add_argument("--by", choices=PAYER_KINDS, required=True, help="the kind of KEY")
    reset.add_argument("key", nargs="?", help="the sender, conversation, profile or provider, as `usage` lists it")
    reset.add_argument("--all", action="store_true", help="every key of the kind")
    reset.add_argument("--since", default=argparse.SUPPRESS, metavar="WHEN", help=SINCE_HELP + " (default: month)")
    usage.set_defaults(run=cmd_usage)


def first_day(text: str, today: date) -> date:
    """The first day `--since` names, given today's date. Raises ValueError naming what it accepts."""
    word = text.strip().lower()
    if word == "today":
        return today
    if word == "month":
        return today.replace(day=1)
    days = _DAYS.fullmatch(word)
    if days:
        return today - timedelta(days=max(1, int(days[1]) * (7 if days[2] == "w" else 1)) - 1)
    try:
        return date.fromisoformat(word)
    except ValueError:
        raise ValueError(f"--since {text!r}: give an ISO date (2026-11-01), today, month, or days back (7d, 2w)") \
            from None


def agent_time(seconds: float) -> str:
    """Seconds as a person reads them: 42s, 5m 03s, 1h 02m."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def row_cells(key: str, spent: Spent) -> list[str]:
    """One table row: the key, USD (4 decimals; – when no cost was reported), tokens, turns and agent time."""
    return [key, f"{spent.usd:.4f}" if spent.usd else "–", f"{spent.tokens_in:,}", f"{spent.tokens_out:,}",
            f"{spent.turns:,}", agent_time(spent.seconds)]


def row_json(key: str, spent: Spent) -> dict[str, Any]:
    return {"key": key, "usd": spent.usd, "tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out,
            "turns": spent.turns, "seconds": spent.seconds}


def cmd_usage(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Prints the usage table, or forgets usage (`reset`); an unreachable database is one line on stderr, exit 2."""
    from orchestrator.storage.stores import backend_for, open_usage

    zone = settings.usage.zone()
    today = datetime.now(zone).date()
    try:
        first = first_day(getattr(args, "since", "month"), today)
    except ValueError as exc:
        print(f"switchyard usage: {exc}", file=sys.stderr)
        return 2
    if args.usage_command == "reset" and (args.key is None) == (not args.all):
        print("switchyard usage reset: give a KEY or --all (not both)", file=sys.stderr)
        return 2
    backend = backend_for(home, settings)
    if backend.in_home:
        from gateway.cli import EXIT_NO_HOME, not_a_home

        if not_a_home(home):  # else a mistyped --home would answer "no usage"
            return EXIT_NO_HOME
    try:
        records = open_usage(backend)
        if records is None:
            print(f"switchyard usage: the {backend.name} backend keeps no usage totals", file=sys.stderr)
            return 1
        if args.usage_command == "reset":
            from gateway.cli.access import record_operator

            code = _reset(records, args, first, today)
            whom = f"every {args.by}" if args.all else f"{args.by} {args.key}"
            record_operator(backend, "usage.reset", f"forgot the usage of {whom} since {first.isoformat()}",
                            kind=args.by, key=args.key, since=first.isoformat())
            return code
        return _table(records, args, first, today, zone)
    except backend.failures as exc:  # the pool's own warnings said why; this is the one line that stays
        from gateway.cli.backends import failure_text

        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        backend.close()


def _table(records: UsageRecords, args: argparse.Namespace, first: date, today: date, zone: ZoneInfo) -> int:
    from gateway.cli.tables import print_table

    rows = records.table(args.by, first, today)
    if args.json:
        print(json.dumps({"by": args.by, "first": first.isoformat(), "last": today.isoformat(),
                          "timezone": str(zone), "rows": [row_json(key, spent) for key, spent in rows]}, indent=2))
        return 0
    span = f"{first.isoformat()} to {today.isoformat()} ({zone})"
    if not rows:
        print(f"no usage by {args.by} from {span}")
        return 0
    total = sum((spent for _, spent in rows), Spent())
    print_table(HEADERS, [row_cells(key, spent) for key, spent in rows] + [row_cells("total", total)],
                title=f"usage by {args.by}, {span}")
    return 0


def _reset(records: UsageRecords, args: argparse.Namespace, first: date, today: date) -> int:
    forgotten = records.reset(args.by, None if args.all else args.key, first, today)
    whom = f"every {args.by}" if args.all else f"{args.by} {args.key}"
    print(f"forgot {forgotten} day total{'s' if forgotten != 1 else ''} of {whom} from {first.isoformat()} "
          f"to {today.isoformat()}")
    return 0
