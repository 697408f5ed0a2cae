"""`switchyard web link`: a one-time login link to the web chat for one more browser user (a light module the
CLI loads to build its parser: gateway/cli CLI_PLUGINS)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from gateway import Home, Settings

DEFAULT_TTL_S = 86400.0


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `switchyard web link`."""
    add_commands(commands)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    web = commands.add_parser("web", help="the web chat: `web link` makes a login link for a browser user")
    web_commands = web.add_subparsers(dest="web_command", title="subcommands", metavar="{link}")
    link = web_commands.add_parser("link", help="print a one-time login link to the web chat")
    link.add_argument("--user", required=True, help="the browser user the link signs in (their sender id)")
    link.add_argument("--profile", help="the web profile (default: the only one configured)")
    link.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, metavar="SECONDS",
                      help=f"how long the link may be used, once (default {DEFAULT_TTL_S:g})")
    web.set_defaults(run=cmd_web)


def cmd_web(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Prints `chat: <url>?t=<token>` for `--user` (exit 2 when no web profile fits or the name is unusable)."""
    from plugins.web import CHANNEL_TYPE
    from plugins.web.logins import Logins, web_state
    from plugins.web.profile import DEFAULT_PORT
    from plugins.web.transcript import USER

    if getattr(args, "web_command", None) != "link":
        print("usage: switchyard web link --user NAME", file=sys.stderr)
        return 2
    profiles = [p for p in settings.channels if p.type == CHANNEL_TYPE and args.profile in (None, p.id)]
    if len(profiles) != 1:
        known = ", ".join(p.id for p in settings.channels if p.type == CHANNEL_TYPE) or "none"
        print(f"switchyard: name one web profile with --profile (web profiles: {known})", file=sys.stderr)
        return 2
    if not USER.match(args.user):
        print("switchyard: --user: letters, digits and . _ @ - (at most 64, no leading dot)", file=sys.stderr)
        return 2
    profile = profiles[0]
    state = web_state(home, profile.id)
    try:
        url = (state / "url").read_text().strip()
    except OSError:
        url = f"http://{profile.option('host', '127.0.0.1')}:{profile.option('port', DEFAULT_PORT)}/"
    token = Logins(state).issue(args.user, args.ttl)
    print(f"chat: {url}?t={token}")
    return 0
