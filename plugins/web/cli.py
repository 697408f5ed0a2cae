"""`switchyard web link|sessions|revoke`: a one-time login link to the web chat for one more browser user, the
sessions signed in, and ending them (a light module the CLI loads to build its parser: gateway/cli
CLI_PLUGINS)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from gateway import ChannelProfile, Home, Settings

DEFAULT_TTL_S = 86400.0
USAGE = "usage: switchyard web link --user NAME | web sessions | web revoke NAME"


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `switchyard web link`, `web sessions` and `web revoke`."""
    add_commands(commands)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    web = commands.add_parser("web", help="the web chat: login links (`web link`), sessions (`web sessions`, "
                                          "`web revoke`)")
    web_commands = web.add_subparsers(dest="web_command", title="subcommands", metavar="{link,sessions,revoke}")
    link = web_commands.add_parser("link", help="print a one-time login link to the web chat")
    link.add_argument("--user", required=True, help="the browser user the link signs in (their sender id)")
    link.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, metavar="SECONDS",
                      help=f"how long the link may be used, once (default {DEFAULT_TTL_S:g})")
    sessions = web_commands.add_parser("sessions", help="list the browser sessions signed in")
    revoke = web_commands.add_parser("revoke", help="sign a user (every session) or one session out, at once; "
                                                    "their unused login links go too")
    revoke.add_argument("name", help="a user's name, or a session's id from `web sessions`")
    for command in (link, sessions, revoke):
        command.add_argument("--profile", help="the web profile (default: the only one configured)")
    web.set_defaults(run=cmd_web)


def cmd_web(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Runs one `web` subcommand (exit 2 when no web profile fits or the arguments are unusable)."""
    command = getattr(args, "web_command", None)
    if command not in ("link", "sessions", "revoke"):
        print(USAGE, file=sys.stderr)
        return 2
    profile = _profile(args, settings)
    if profile is None:
        return 2
    if command == "link":
        return _link(args, home, profile)
    if command == "sessions":
        return _sessions(home, profile)
    return _revoke(args.name, home, profile)


def _profile(args: argparse.Namespace, settings: Settings) -> ChannelProfile | None:
    from plugins.web import CHANNEL_TYPE

    profiles = [p for p in settings.channels if p.type == CHANNEL_TYPE and args.profile in (None, p.id)]
    if len(profiles) != 1:
        known = ", ".join(p.id for p in settings.channels if p.type == CHANNEL_TYPE) or "none"
        print(f"switchyard: name one web profile with --profile (web profiles: {known})", file=sys.stderr)
        return None
    return profiles[0]


def _link(args: argparse.Namespace, home: Home, profile: ChannelProfile) -> int:
    """Prints `chat: <url>?t=<token>` for `--user`."""
    from plugins.web.logins import Logins, web_state
    from plugins.web.profile import DEFAULT_PORT
    from plugins.web.transcript import USER

    if not USER.match(args.user):
        print("switchyard: --user: letters, digits and . _ @ - (at most 64, no leading dot)", file=sys.stderr)
        return 2
    state = web_state(home, profile.id)
    try:
        url = (state / "url").read_text().strip()
    except OSError:
        url = f"http://{profile.option('host', '127.0.0.1')}:{profile.option('port', DEFAULT_PORT)}/"
    token = Logins(state).issue(args.user, args.ttl)
    print(f"chat: {url}?t={token}")
    return 0


def _sessions(home: Home, profile: ChannelProfile) -> int:
    """One line a session signed in: its id, user, when it began and when it expires (UTC)."""
    from plugins.web.logins import Logins, web_state

    listed = Logins(web_state(home, profile.id)).listed()
    if not listed:
        print(f"no sessions of web profile {profile.id}")
        return 0
    print(f"{'ID':<14}{'USER':<22}{'SIGNED IN':<22}EXPIRES")
    for session in listed:
        print(f"{session['id']!s:<14}{session['user']!s:<22}{_when(session['created']):<22}"
              f"{_when(session['expires'])}")
    return 0


def _revoke(name: str, home: Home, profile: ChannelProfile) -> int:
    """Ends the sessions `name` names (exit 1 when it names none)."""
    from plugins.web.logins import Logins, web_state

    sessions, links = Logins(web_state(home, profile.id)).revoke(name)
    if not sessions and not links:
        print(f"switchyard: no session or login link of {name!r} (see `switchyard web sessions`)", file=sys.stderr)
        return 1
    print(f"revoked {sessions} session(s) and {links} unused login link(s) of {name}; its open tabs close now")
    return 0


def _when(epoch: object) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(str(epoch)))) if epoch else "-"
