"""`switchyard coordination clean`: the spec-001 retention of the coordination directory and of finished runs,
applied once."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings


def add_coordination_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `coordination clean`."""
    coordination = commands.add_parser("coordination", help="the spec-001 coordination directory")
    coordination_commands = coordination.add_subparsers(dest="coordination_command", required=True,
                                                        title="subcommands")
    clean = coordination_commands.add_parser("clean", help="apply retention: archive, old checkpoints, "
                                                           "expired locks, finished runs past "
                                                           "queue.runs_retention_days")
    clean.add_argument("--archive-after-days", type=float, help="archive finished records older than this "
                                                                "(default 30)")
    clean.add_argument("--checkpoint-days", type=float, help="remove checkpoints older than this (default 7)")
    clean.add_argument("--runs-days", type=float, help="remove finished runs that ended longer ago than this "
                                                       "(default: queue.runs_retention_days; 0 keeps them)")
    clean.add_argument("--json", action="store_true", help="print JSON for scripts")
    coordination.set_defaults(run=cmd_coordination)


def cmd_coordination(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Applies the spec-001 retention policy and the runs retention once."""
    from orchestrator.execution.coordination import ARCHIVE_AFTER_DAYS, CHECKPOINT_RETENTION_DAYS, Coordination
    from orchestrator.runs.retention import apply_retention
    from orchestrator.storage.stores import backend_for, open_run_store

    backend = backend_for(home, settings)
    shared_locks = None  # the file backend's locks are files under coordination/, cleaned with it
    if not backend.in_home:
        shared_locks = backend.locks()
    else:
        from gateway.cli import EXIT_NO_HOME, not_a_home

        if not_a_home(home):  # else a mistyped --home would get coordination/ made and "0 removed"
            return EXIT_NO_HOME
    report = apply_retention(
        home, open_run_store(backend, fsync=False), Coordination(home),
        settings.queue.runs_retention_days if args.runs_days is None else args.runs_days,
        archive_after_days=ARCHIVE_AFTER_DAYS if args.archive_after_days is None else args.archive_after_days,
        checkpoint_days=CHECKPOINT_RETENTION_DAYS if args.checkpoint_days is None else args.checkpoint_days,
        shared_locks=shared_locks)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"checkpoints removed: {len(report['checkpoints_removed'])}, files archived: "
          f"{len(report['archived'])}, expired locks freed: {len(report['locks_freed'])}, "
          f"selector files removed: {report['selector_files_removed']}, "
          f"finished runs removed: {len(report['runs_removed'])}")
    for resource in report["locks_freed"]:
        print(f"  freed lock {resource}")
    return 0
