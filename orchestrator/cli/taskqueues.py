"""`switchyard workspace …`: the agent task queues of an orchestrator's workspace (spec 000): make them, add a
task, clean or archive whole processed partitions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings


def add_workspace_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `workspace clean-processed|archive-processed|add-task|init`."""
    workspace = commands.add_parser("workspace", help="agent task queues in an orchestrator workspace")
    workspace.add_argument("--orchestrator", help="orchestrator id (default: default_orchestrator)")
    workspace_commands = workspace.add_subparsers(dest="workspace_command", required=True, title="subcommands")
    for name, what in (("clean-processed", "delete whole processed/{timestamp}/ partitions"),
                       ("archive-processed", "pack whole processed/{timestamp}/ partitions into archive/")):
        helper = workspace_commands.add_parser(name, help=f"{what} older than N days (never single items)")
        helper.add_argument("--older-than-days", type=float, default=7.0, metavar="N",
                            help="age in days of the partitions to act on (default 7)")
        helper.add_argument("--dry-run", action="store_true", help="print what would be done, do nothing")
    task = workspace_commands.add_parser("add-task", help="write inbox/<agent>/<name>.task (.tmp, then rename)")
    task.add_argument("agent", help="the agent whose inbox gets the task")
    task.add_argument("name", help="the task's file name, without .task")
    source = task.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the task's text")
    source.add_argument("--file", help="read the task from this file ('-' for stdin)")
    workspace_commands.add_parser("init", help="create inbox/<agent>/, processed/ and failed/")
    workspace.set_defaults(run=cmd_workspace)


def cmd_workspace(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Task-queue helpers; clean/archive act on whole `processed/{timestamp}/` partitions only."""
    from orchestrator.cli.configured import load_for_tools
    from orchestrator.execution.taskqueue import archive_processed, clean_processed, ensure_queue_dirs, write_task

    loaded = load_for_tools(home, settings, args.orchestrator)
    if args.workspace_command == "init":
        for folder in ensure_queue_dirs(loaded):
            print(folder)
        return 0
    if args.workspace_command == "add-task":
        text = args.text if args.text is not None else (
            sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8"))
        print(write_task(loaded, args.agent, args.name, text))
        return 0
    helper = clean_processed if args.workspace_command == "clean-processed" else archive_processed
    done = helper(loaded, args.older_than_days, dry_run=args.dry_run)
    verb = "would " if args.dry_run else ""
    action = "remove" if helper is clean_processed else "archive into"
    for path in done:
        print(f"{verb}{action} {path}")
    if not done:
        print(f"no processed partition older than {args.older_than_days:g} day(s)")
    return 0
