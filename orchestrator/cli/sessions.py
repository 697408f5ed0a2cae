"""`switchyard sessions list|attach`: each conversation's agent sessions (/new, /resume), and a CLI session started
at a terminal attached to a conversation as its next one."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.scope import ConversationScope
    from gateway.settings import Settings
    from orchestrator.agents.sessions import ConversationHistory, SessionInfo, SessionStore

EXIT_DATABASE = 2  # the postgres backend's database is unreachable (as `status`, `dead`, `db`)


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
