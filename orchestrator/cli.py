"""The orchestrator's CLI subcommands: `runs`, `schedules`, `usage` (orchestrator/usage/cli.py),
`coordination clean`, `workspace …`, `doctor`, `sessions list|attach` (via switchyard_cli).

Only argparse is imported at module level: the parser is built on every `switchyard` start, and each
command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.scope import ConversationScope
    from gateway.settings import Settings
    from orchestrator.agents.sessions import ConversationHistory, SessionInfo, SessionStore
    from orchestrator.config.models import LoadedConfig
    from orchestrator.runs.base import RunStoreBase

RUNS_LIMIT = 20
EXIT_DATABASE = 2  # the postgres backend's database is unreachable (as `status`, `dead`, `db`)


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `switchyard runs`, `schedules`, `usage`, `coordination clean`, `workspace …` and `doctor`."""
    add_commands(commands)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `runs`, `schedules`, `usage`, `coordination`, `workspace`, `workspaces` and `doctor` to the `switchyard`
    parser."""
    from orchestrator.usage.cli import add_usage_command

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

    schedules = commands.add_parser("schedules", help="scheduled prompts: when each fires next, its last "
                                                      "occurrence and outcome")
    schedules.add_argument("--json", action="store_true", help="print JSON for scripts")
    schedules.set_defaults(run=cmd_schedules)

    add_usage_command(commands)

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

    doctor = commands.add_parser("doctor", help="check the providers: found on PATH, version, and with "
                                                "--probe one tiny request each")
    doctor.add_argument("--probe", action="store_true", help="send each provider one tiny request")
    doctor.add_argument("--json", action="store_true", help="print JSON for scripts")
    doctor.set_defaults(run=cmd_doctor)

    add_sessions_command(commands)


def add_sessions_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `sessions list` and `sessions attach` (a conversation's several agent sessions)."""
    sessions = commands.add_parser("sessions", help="each conversation's agent sessions (/new, /resume), or attach "
                                                    "a CLI session started at a terminal to a conversation")
    sessions_commands = sessions.add_subparsers(dest="sessions_command", required=True, title="subcommands")
    listed = sessions_commands.add_parser("list", help="every conversation's sessions: when, first words, turns")
    listed.add_argument("--profile", help="only conversations of this channel profile")
    listed.add_argument("--json", action="store_true", help="print JSON for scripts")
    attach = sessions_commands.add_parser("attach", help="continue a CLI session in a conversation: it becomes the "
                                                         "conversation's next session and its current one")
    attach.add_argument("profile", help="the channel profile id (settings.yaml `channels:`)")
    attach.add_argument("conversation", help="the conversation id (as `switchyard sessions list` or the event log "
                                             "shows it: a chat id, `<chat>/<topic>`, `<channel>:<thread>`)")
    attach.add_argument("session_id", help="the CLI's session id (claude --resume, codex exec resume, "
                                           "gemini --resume)")
    attach.add_argument("--provider", help="the settings.yaml provider that continues it (default: the only "
                                           "preset provider)")
    sessions.set_defaults(run=cmd_sessions)


def cmd_sessions(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """`sessions list` prints every conversation's sessions; `sessions attach` adds a CLI session to one. On the
    postgres backend an unreachable database is one line on stderr and exit 2."""
    from gateway.cli.backends import failure_text
    from orchestrator.storage.stores import backend_for, open_history, open_sessions

    backend = backend_for(home, settings)
    try:
        sessions, history = open_sessions(backend), open_history(backend)
        if args.sessions_command == "attach":
            return _attach(args, settings, sessions, history)
        return _list_sessions(args, sessions)
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        backend.close()


def _list_sessions(args: argparse.Namespace, sessions: SessionStore) -> int:
    from dataclasses import asdict

    from gateway.cli.tables import print_table

    found = {scope: infos for scope, infos in _conversations(sessions).items()
             if args.profile is None or scope.profile == args.profile}
    if args.json:
        print(json.dumps({scope.path: [asdict(info) for info in infos] for scope, infos in found.items()},
                         indent=2))
    elif found:
        print_table(["conversation", "session", "started", "turns", "first words", "attached"],
                    [[scope.path, f"{info.number}{' (current)' if info.current else ''}",
                      info.started or "-", str(info.turns), info.first_words or "-", info.attached or "-"]
                     for scope, infos in found.items() for info in infos])
    else:
        print("no conversation has an agent session yet")
    return 0


def _conversations(sessions: SessionStore) -> dict[ConversationScope, list[SessionInfo]]:
    """Every conversation with a session, by its scope (what `switchyard sessions` lists)."""
    from gateway.scope import ConversationScope

    return {conversation: infos for scope, infos in sessions.conversations().items()
            if (conversation := ConversationScope.parse(scope)) is not None}


def _attach(args: argparse.Namespace, settings: Settings, sessions: SessionStore,
            history: ConversationHistory) -> int:
    from gateway.scope import ConversationScope
    from orchestrator.agents.conversations import ConversationSessions

    profile = settings.profile(args.profile)
    if profile is None:
        print(f"switchyard: no channel profile {args.profile!r} in settings.yaml", file=sys.stderr)
        return 1
    presets = sorted(name for name, provider in settings.providers.items()
                     if provider.type is not None and provider.session == "conversation")
    name = args.provider or (presets[0] if len(presets) == 1 else None)
    provider = settings.providers.get(name) if name else None
    if provider is None or provider.type is None:
        known = ", ".join(presets) or "none"
        print(f"switchyard: name the preset provider that continues the session with --provider "
              f"(preset providers with `session: conversation`: {known})", file=sys.stderr)
        return 1
    key = f"{name}@acp" if provider.transport == "acp" else str(name)
    scope = ConversationScope(profile.type, profile.id, args.conversation)
    number = ConversationSessions(sessions, history).attach(scope.key, key, args.session_id)
    print(f"attached {provider.type} session {args.session_id} to {scope.path} as session "
          f"{number} (now its current one); /resume in the chat switches back to an earlier one")
    return 0


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


def cmd_schedules(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Lists every schedule of every orchestrator with its next and last occurrence and the outcome; on the
    postgres backend an unreachable database is one line on stderr and exit 2."""
    from gateway.cli.backends import failure_text
    from gateway.cli.tables import print_table
    from orchestrator.schedules.listing import HEADERS, rows_for, table_rows
    from orchestrator.storage.stores import backend_for

    backend = backend_for(home, settings)
    try:
        rows = rows_for(home, settings, backend)
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        backend.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print_table(HEADERS, table_rows(rows))
    else:
        print("no schedules (add `schedules:` to an orchestrator.yaml)")
    return 0


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


def load_for_tools(home: Home, settings: Settings, orchestrator_id: str | None) -> LoadedConfig:
    """An orchestrator's configuration for CLI helpers (provider names are not checked here)."""
    from pydantic import ValidationError

    from gateway.settings import SettingsError, parse_yaml_file, validation_problems
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.config.models import CONFIG_FILE, LoadedConfig, OrchestratorConfig, default_orchestrator_config

    chosen = orchestrator_id or settings.default_orchestrator
    ref = settings.orchestrators.get(chosen)
    if ref is None:
        raise SettingsError(f"unknown orchestrator {chosen!r}; orchestrators: {', '.join(settings.orchestrators)}")
    workspace = home.resolve(ref.workspace)
    path = workspace / CONFIG_FILE
    if not path.exists():
        return LoadedConfig(chosen, workspace, default_orchestrator_config(set(builtin_providers())))
    try:
        config = OrchestratorConfig.model_validate(parse_yaml_file(path))
    except ValidationError as exc:
        raise SettingsError.of(str(path), validation_problems(exc, OrchestratorConfig)) from exc
    return LoadedConfig(chosen, workspace, config)


def cmd_workspace(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Task-queue helpers; clean/archive act on whole `processed/{timestamp}/` partitions only."""
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


def cmd_workspaces(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Lists the own workspaces (of a conversation, of a sender) of each orchestrator, or removes those unused
    past their retention."""
    from gateway.home import safe_name
    from orchestrator.workspaces.owners import OwnWorkspaces
    from orchestrator.workspaces.retention import WorkspaceInfo, listed, remove, stale

    chosen = [args.orchestrator] if args.orchestrator else list(settings.orchestrators)
    found: list[tuple[str, WorkspaceInfo]] = []
    for orchestrator_id in chosen:
        spaces = OwnWorkspaces(home.root / "workspaces" / safe_name(orchestrator_id))
        if getattr(args, "workspaces_command", None) != "clean":
            found += [(orchestrator_id, info) for info in listed(spaces)]
            continue
        days = args.older_than_days
        if days is None:
            days = load_for_tools(home, settings, orchestrator_id).config.workspaces.retention_days
        for info in stale(spaces, days) if days is not None else []:
            if not args.dry_run:
                remove(spaces, info)
            found.append((orchestrator_id, info))
    if getattr(args, "workspaces_command", None) == "size":
        totals = {who: [0, 0] for who in chosen}
        for who, info in found:
            totals[who][0] += 1
            totals[who][1] += info.size_bytes
        if args.json:
            print(json.dumps({who: {"workspaces": n, "bytes": size} for who, (n, size) in totals.items()}, indent=2))
            return 0
        for who, (n, size) in totals.items():
            print(f"{who}: {n} workspace(s), {size / 1e6:.1f} MB")
        return 0
    if args.json:
        print(json.dumps([{"orchestrator": who, "name": info.name, "path": str(info.path), "bytes": info.size_bytes,
                           "last_used": info.last_used, "worktree": info.worktree} for who, info in found], indent=2))
        return 0
    verb = "" if getattr(args, "workspaces_command", None) != "clean" else \
        "would remove " if args.dry_run else "removed "
    for who, info in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.last_used))
        kind = " (git worktree)" if info.worktree else ""
        print(f"{verb}{who} {info.name}{kind}: {info.size_bytes / 1e6:.1f} MB, last used {when}")
    if not found:
        print("no workspace" + (" to clean" if verb else ""))
    return 0


def cmd_doctor(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Prints one row per provider; exits 1 when a provider an orchestrator uses has a problem."""
    import asyncio

    from gateway.cli.tables import print_table
    from orchestrator.agents.doctor import (
        check_adapters,
        check_providers,
        check_sandbox,
        fill_versions,
        probe,
        provider_uses,
    )

    checks = check_providers(home, settings)
    sandbox = check_sandbox(home, settings)
    _, broken = provider_uses(home, settings)

    async def gather() -> None:
        await fill_versions(checks)
        await check_adapters(home, settings, checks)
        if args.probe:
            await probe(home, settings, checks)

    asyncio.run(gather())
    if args.json:
        print(json.dumps({"providers": [{**vars(c), "ok": c.ok} for c in checks], "problems": broken,
                          "sandbox": {"works": not sandbox.problem, "problem": sandbox.problem,
                                      "used_by": sandbox.used_by}}, indent=2))
    else:
        rows = [[c.name, c.kind, c.path or c.binary or "-", c.version or "-", ", ".join(c.used_by) or "-",
                 c.problem or (f"ok: {c.probe}" if c.probe else "ok")] for c in checks]
        print_table(["provider", "kind", "program", "version", "used by", "status"], rows)
        for check in checks:
            if check.adapter:
                print(f"provider {check.name} (transport: acp): adapter {check.adapter}")
        for line in broken:
            print(line)
        print(sandbox.line())
    sandbox_broken = bool(sandbox.problem and sandbox.used_by)
    return 1 if broken or sandbox_broken or any(c.problem and c.used_by for c in checks) else 0
