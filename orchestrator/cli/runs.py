"""`switchyard runs`: workflow runs newest first, filtered, or one run (`runs show ID`) with its recent events."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.runs.base import RunStoreBase

RUNS_LIMIT = 20
EXIT_DATABASE = 2  # the postgres backend's database is unreachable (as `status`, `dead`, `db`)


def add_runs_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `runs` and `runs show`."""
    runs = commands.add_parser("runs", help="list workflow runs newest first, or show one (`runs show ID`)")
    runs.add_argument("--json", action="store_true", help="print JSON for scripts")
    runs.add_argument("--active", action="store_true", help="only runs not yet finished")
    runs.add_argument("--limit", type=int, default=RUNS_LIMIT, metavar="N",
                      help=f"show at most N runs (default {RUNS_LIMIT}; 0 for all)")
    runs.add_argument("--since", metavar="WHEN", help="only runs created since WHEN: a duration back from now "
                                                      "(30m, 2h, 3d, 1w) or an ISO date or time")
    runs.add_argument("--state", action="append", default=[], metavar="STATE",
                      help="only runs in STATE (repeat it or give a comma list: queued, running, "
                           "waiting_input, done, failed, failed_final, cancelled)")
    runs_commands = runs.add_subparsers(dest="runs_command", title="subcommands", metavar="{show}")
    show = runs_commands.add_parser("show", help="one run: its snapshot, job fields and recent events")
    show.add_argument("run_id", help="the run's id, as `switchyard runs` lists it")
    show.add_argument("--json", action="store_true", help="print JSON for scripts")
    show.add_argument("--events", type=int, default=10, help="how many recent events to print")
    runs.set_defaults(run=cmd_runs)


def cmd_runs(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Lists runs newest first (filtered and cut to `--limit`), or shows one; on the postgres backend an
    unreachable database is one line on stderr and exit 2."""
    from gateway.cli.backends import failure_text
    from orchestrator.storage.stores import backend_for, open_run_store

    backend = backend_for(home, settings)
    if backend.in_home:
        from gateway.cli import EXIT_NO_HOME, not_a_home

        if not_a_home(home):  # else a mistyped --home would answer "no runs"
            return EXIT_NO_HOME
    store = open_run_store(backend, fsync=False)
    try:
        return _runs(args, store)
    except backend.failures as exc:  # the pool's own warnings said why; this is the one line that stays
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE


def _runs(args: argparse.Namespace, store: RunStoreBase) -> int:
    from gateway.cli.tables import print_table
    from orchestrator.runs.listing import HEADERS, parse_since, parse_states, table_rows

    if args.runs_command == "show":
        return _show_run(store, args)
    try:
        since = parse_since(args.since) if args.since else None
        states = parse_states(args.state)
    except ValueError as exc:
        print(f"switchyard runs: {exc}", file=sys.stderr)
        return 2
    runs, matched = store.newest(args.limit, since=since, states=states, active=args.active)
    if args.json:
        print(json.dumps([{**run.summary(), "createdAt": run.createdAt, "job": run.job.model_dump(
            exclude_none=True)} for run in runs], indent=2))
        return 0
    if not runs:
        print("no runs" + (" match" if since or states or args.active else ""))
        return 0
    print_table(HEADERS, table_rows(runs))
    if matched > len(runs):
        print(f"(the newest {len(runs)} of {matched}; --limit 0 shows all)", file=sys.stderr)
    return 0


def _show_run(store: RunStoreBase, args: argparse.Namespace) -> int:
    from gateway.cli.tables import printable
    from orchestrator.runs.status import snapshot

    run = store.load(args.run_id)
    if run is None:
        print(f"switchyard: no run {args.run_id!r}", file=sys.stderr)
        return 1
    events = store.events(run.runId, limit=max(1, args.events))
    if args.json:
        print(json.dumps({"state": run.model_dump(mode="json"), "events": events}, indent=2, default=str))
        return 0
    print("\n".join(printable(line) for line in snapshot(run, events[-1] if events else None).split("\n")))
    print(f"state: {store.stored_at(run.runId)}")
    job = run.job.model_dump(exclude_none=True, exclude_defaults=True)
    if job:
        print(printable("job: " + ", ".join(f"{key}={value}" for key, value in job.items())))
    for event in events:
        detail = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("ts", "event") and v is not None)
        print(printable(f"  {event.get('ts')} {event.get('event')} {detail}".rstrip()))
    return 0
