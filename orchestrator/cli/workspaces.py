"""`switchyard workspaces`: the own workspaces of `workspace: conversation | sender`, listed with their size and
last use, counted per orchestrator, or cleaned past their retention."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.workspaces.retention import WorkspaceInfo


def add_workspaces_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `workspaces list|size|clean`."""
    owned = commands.add_parser("workspaces", help="the workspaces of `workspace: conversation | sender`: "
                                                    "list (size, last use), clean")
    owned.add_argument("--orchestrator", help="orchestrator id (default: every orchestrator)")
    owned.add_argument("--json", action="store_true", help="print JSON for scripts")
    owned_commands = owned.add_subparsers(dest="workspaces_command", title="subcommands", metavar="{list,size,clean}")
    owned_commands.add_parser("list", help="each workspace, its size and last use (the default)")
    owned_commands.add_parser("size", help="how many workspaces each orchestrator has, and their total size")
    scrub = owned_commands.add_parser("clean", help="remove workspaces unused for N days (a worktree's branch "
                                                     "stays in its repository)")
    scrub.add_argument("--older-than-days", type=float, metavar="N",
                       help="default: the orchestrator's workspaces.retention_days")
    scrub.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    owned.set_defaults(run=cmd_workspaces)


def cmd_workspaces(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Lists the own workspaces (of a conversation, of a sender) of each orchestrator, or removes those unused
    past their retention."""
    chosen = [args.orchestrator] if args.orchestrator else list(settings.orchestrators)
    command = getattr(args, "workspaces_command", None)
    found = _found(args, home, settings, chosen, clean=command == "clean")
    if command == "size":
        _print_sizes(args, chosen, found)
    else:
        _print_listed(args, found, clean=command == "clean")
    return 0


def _found(args: argparse.Namespace, home: Home, settings: Settings, chosen: list[str], *,
           clean: bool) -> list[tuple[str, WorkspaceInfo]]:
    """Each orchestrator's workspaces, or (`clean`) those past their retention, removed unless `--dry-run`."""
    from gateway.home import safe_name
    from orchestrator.cli.configured import load_for_tools
    from orchestrator.workspaces.owners import OwnWorkspaces
    from orchestrator.workspaces.retention import listed, remove, stale

    found: list[tuple[str, WorkspaceInfo]] = []
    for orchestrator_id in chosen:
        spaces = OwnWorkspaces(home.root / "workspaces" / safe_name(orchestrator_id))
        if not clean:
            found += [(orchestrator_id, info) for info in listed(spaces)]
            continue
        days = args.older_than_days
        if days is None:
            days = load_for_tools(home, settings, orchestrator_id).config.workspaces.retention_days
        for info in stale(spaces, days) if days is not None else []:
            if not args.dry_run:
                remove(spaces, info)
            found.append((orchestrator_id, info))
    return found


def _print_sizes(args: argparse.Namespace, chosen: list[str], found: list[tuple[str, WorkspaceInfo]]) -> None:
    totals = {who: [0, 0] for who in chosen}
    for who, info in found:
        totals[who][0] += 1
        totals[who][1] += info.size_bytes
    if args.json:
        print(json.dumps({who: {"workspaces": n, "bytes": size} for who, (n, size) in totals.items()}, indent=2))
        return
    for who, (n, size) in totals.items():
        print(f"{who}: {n} workspace(s), {size / 1e6:.1f} MB")


def _print_listed(args: argparse.Namespace, found: list[tuple[str, WorkspaceInfo]], *, clean: bool) -> None:
    if args.json:
        print(json.dumps([{"orchestrator": who, "name": info.name, "path": str(info.path), "bytes": info.size_bytes,
                           "last_used": info.last_used, "worktree": info.worktree} for who, info in found], indent=2))
        return
    verb = "" if not clean else "would remove " if args.dry_run else "removed "
    for who, info in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.last_used))
        kind = " (git worktree)" if info.worktree else ""
        print(f"{verb}{who} {info.name}{kind}: {info.size_bytes / 1e6:.1f} MB, last used {when}")
    if not found:
        print("no workspace" + (" to clean" if verb else ""))
