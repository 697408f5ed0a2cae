"""The `switchyard` command: the parser, the global options, and the table of built-in subcommands.

Starting it must stay cheap (`switchyard --help` and `status` under 300 ms): this module imports only
argparse and pluggy; each command's module is imported when that command runs, and the parser gets
plugin subcommands from a plugin manager holding only the light CLI modules, not the runtime plugins.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy

    from gateway.home import Home
    from gateway.settings import Settings

PROG = "switchyard"
CLI_PLUGINS: tuple[str, ...] = ("orchestrator.cli", "plugins.web.cli")  # built-in modules that only add subcommands
EXIT_USAGE = 2  # argparse's code for a bad command line; also invalid settings
EXIT_BROKEN_PIPE = 1  # what Python's docs recommend after EPIPE (signal module, "Note on SIGPIPE")
EXIT_NO_HOME = 2  # the home named is not one (a wrong --home or $SWITCHYARD_HOME, as a bad command line)


def example_settings_text() -> str:
    """The commented settings.example.yaml shipped with the package."""
    from importlib import resources

    return resources.files("gateway").joinpath("templates/settings.example.yaml").read_text("utf-8")


class Invocation:
    """One `switchyard` command line: its home, and its settings and plugins, loaded when first asked for."""

    def __init__(self, args: argparse.Namespace):
        from gateway.home import Home, resolve_home

        self.args = args
        self.home: Home = Home(resolve_home(args.home))

    @property
    def settings_path(self) -> Path:
        """The settings file `--settings` names, else the home's."""
        return Path(self.args.settings).expanduser().resolve() if self.args.settings else self.home.settings_file

    @cached_property
    def settings(self) -> Settings:
        """The loaded settings (`--settings` must exist; the home's may be absent: the embedded default).
        Raises SettingsError when they are invalid."""
        from gateway.settings import load_settings

        return load_settings(self.settings_path, required=bool(self.args.settings))

    @cached_property
    def pm(self) -> pluggy.PluginManager:
        """Every plugin, as `run` loads them (built-ins, entry points, the settings' list)."""
        from gateway.plugin_manager import build_plugin_manager
        from gateway.settings import SettingsError

        try:
            settings: Settings | None = self.settings
        except SettingsError:
            settings = None
        return build_plugin_manager(settings)


def not_a_home(home: Home) -> bool:
    """True, having said so on stderr, when `home` is not a Switchyard home (it has no queue/incoming/): an
    operator command reading the home's files would otherwise answer "nothing here" for a mistyped --home
    or $SWITCHYARD_HOME (or create a home there). The caller exits EXIT_NO_HOME and creates nothing."""
    if home.incoming.is_dir():
        return False
    print(f"switchyard: {home.root} is not a Switchyard home (it has no queue/incoming/): check --home "
          "or $SWITCHYARD_HOME, or create it with `switchyard init`", file=sys.stderr)
    return True


# --- the subcommand table ----------------------------------------------------------------------


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command that takes only the global options."""


def _send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", type=_message_text, help="the message text (not empty)")
    parser.add_argument("--channel", default="console", help="channel name to send as (default: console)")
    parser.add_argument("--profile", help="channelProfileId to send as")
    parser.add_argument("--conversation", default="cli", help="conversationId (default: cli)")
    parser.add_argument("--sender", default=os.environ.get("USER", "cli"), help="sender name (default: $USER)")
    parser.add_argument("--sender-id", help="senderId (default: the sender name)")
    parser.add_argument("--message-id", help="messageId (default: a new cli-… id)")
    parser.add_argument("--run", help="workflowRunId to address (answers a run waiting for input)")
    parser.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                        help="wait up to SECONDS for the reply and print it")


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _pair_arguments(parser: argparse.ArgumentParser) -> None:
    pair_commands = parser.add_subparsers(dest="pair_command", required=True, title="subcommands")
    pair_commands.add_parser("list", help="pending codes and approved senders")
    approve = pair_commands.add_parser("approve", help="approve a pending code")
    approve.add_argument("code", help="the code the sender was given")


def _approvals_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="approvals_command", title="subcommands")
    listing = actions.add_parser("list", help="the tool approvals waiting for an answer (the default)")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    for verdict, what in (("allow", "let the agent run the tool call"), ("deny", "refuse the tool call")):
        answer = actions.add_parser(verdict, help=what)
        answer.add_argument("id", help="the id `approvals list` shows")


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", metavar="WHEN",
                        help="only records from WHEN on: an ISO time (2026-12-01T08:00) or an age (30m, 12h, 7d)")
    parser.add_argument("--by", metavar="WHO", help="only records by WHO: a sender id, <channel>/<profile>/<id>, "
                                                    "or operator")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print {ok, problems, ...} as JSON")


def _dead_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="dead_command", required=True, title="subcommands")
    listing = actions.add_parser("list", help="every dead letter, newest first, with its reason")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    show = actions.add_parser("show", help="one dead letter: its report and original payload")
    show.add_argument("name", help="the file name `dead list` shows")
    show.add_argument("--json", action="store_true", help="print JSON for scripts")
    retry = actions.add_parser("retry", help="put dead letters back (messages to incoming/, replies to "
                                             "outgoing/) with a fresh attempt count")
    retry.add_argument("names", nargs="*", metavar="NAME", help="file names `dead list` shows")
    retry.add_argument("--all", action="store_true", help="every dead letter")
    drop = actions.add_parser("drop", help="delete dead letters for good")
    drop.add_argument("names", nargs="+", metavar="NAME", help="file names `dead list` shows")


@dataclass(frozen=True)
class Command:
    """A built-in subcommand: its help line, its arguments, and `module:function` to call, imported only
    when the command runs; the function takes (args, Invocation) and returns the exit code."""

    name: str
    help: str
    target: str
    arguments: Callable[[argparse.ArgumentParser], None] = field(default=_no_arguments)

    def call(self, args: argparse.Namespace, run: Invocation) -> int:
        module, function = self.target.split(":")
        code: int = getattr(importlib.import_module(module), function)(args, run)
        return code


# A new built-in command is one entry here: its name, help line, `module:function` (that module imports
# what the command needs, so other commands do not pay for it) and, if it takes any, its arguments.
def _db_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="db_command", required=True, title="subcommands")
    actions.add_parser("migrate", help="create or update the schema in the database queue.dsn_env names")
    actions.add_parser("check", help="exit 0 when the schema is current, 2 naming what is missing")


COMMANDS: tuple[Command, ...] = (
    Command("init", "create the home, settings.yaml and the default orchestrator", "gateway.cli.commands:cmd_init"),
    Command("run", "run the gateway (Ctrl-C to stop)", "gateway.cli.commands:cmd_run"),
    Command("send", "queue a message as a channel would", "gateway.cli.commands:cmd_send", _send_arguments),
    Command("status", "gateway, channels, queue, dead letters, runs, heartbeat; exit 3 when the gateway is down",
            "gateway.cli.status:cmd_status", _status_arguments),
    Command("pair", "admit senders with one-time pairing codes", "gateway.cli.commands:cmd_pair", _pair_arguments),
    Command("approvals", "tool calls agents asked to run, waiting for an answer (list, allow, deny)",
            "gateway.cli.approvals:cmd_approvals", _approvals_arguments),
    Command("check", "validate settings.yaml and every orchestrator.yaml without starting anything "
                     "(exit 2 on a problem)", "gateway.cli.check:cmd_check", _check_arguments),
    Command("dead", "dead letters: messages and replies that failed for good (list, show, retry, drop)",
            "gateway.cli.dead:cmd_dead", _dead_arguments),
    Command("db", "the PostgreSQL backend's schema (queue.backend: postgres): migrate, check",
            "gateway.cli.postgres:cmd_db", _db_arguments),
    Command("roles", "who has which role on each channel profile, and what each role may do",
            "gateway.cli.access:cmd_roles", _status_arguments),
    Command("audit", "privileged actions (approvals, edit workflows, commands, stops, pairing, dead letters, "
                     "usage resets): who, where, what, when", "gateway.cli.access:cmd_audit",
            _audit_arguments),
    Command("worker", "process messages from the PostgreSQL queue only: no channels, no delivery "
                      "(queue.backend: postgres; run any number, on any hosts)",
            "gateway.cli.postgres:cmd_worker"),
)


def _message_text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the message is empty; give some text to send")
    return text


# --- the parser --------------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """`--home`, `--settings`, `-v`: on the top parser, and on every subcommand with SUPPRESS defaults so
    that one given after the subcommand is kept and one not given does not overwrite the top's."""
    group = parser.add_argument_group("global options")
    group.add_argument("--home", default=default, help="home directory (default: $SWITCHYARD_HOME or ~/.switchyard)")
    group.add_argument("--settings", default=default, help="settings file (default: <home>/settings.yaml)")
    group.add_argument("-v", "--verbose", action="store_true", default=default, help="debug logging")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands (plugin ones too) accept the global options after their name;
    an option a plugin defines itself wins over a global one of the same name."""

    def __init__(self, *args: Any, top: bool = False, **kwargs: Any):
        if not top:
            kwargs.setdefault("conflict_handler", "resolve")
        super().__init__(*args, **kwargs)
        _global_options(self, None if top else argparse.SUPPRESS)


class _Version(argparse.Action):
    """`--version`: reads the version from the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from importlib.metadata import version

        print(f"{PROG} {version('switchyard')}")
        parser.exit()


def build_parser(pm: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    """The `switchyard` parser: the built-in subcommands, then those the plugins in `pm` add."""
    parser = Parser(prog=PROG, top=True, description="A chat gateway for agent workflows.",
                    epilog="Global options may also follow the subcommand: switchyard run --home DIR. "
                           "`switchyard COMMAND --help` describes a command.")
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        command.arguments(sub)
        sub.set_defaults(command_entry=command)
    if pm is not None:
        from gateway.plugin_manager import call_each

        call_each(pm, "switchyard_cli", commands=commands)
    return parser


def cli_plugin_manager(run: Invocation) -> pluggy.PluginManager:
    """The plugins that may add subcommands: the light built-in CLI modules, the modules the settings file
    lists (read without validating it), `$SWITCHYARD_PLUGINS` and the entry points."""
    from gateway.plugin_manager import plugin_manager_for

    return plugin_manager_for([*CLI_PLUGINS, *_listed_plugins(run.settings_path)])


def _listed_plugins(path: Path) -> list[str]:
    """The `plugins:` list of a settings file; nothing when it is absent or unreadable (a command that
    needs the settings reports that)."""
    if not path.is_file():
        return []
    import yaml

    from gateway.config.yamlfile import load_yaml

    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    listed = data.get("plugins") if isinstance(data, dict) else None
    return [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []


# --- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Runs one command line; returns its exit code. Output to a closed pipe ends quietly with 1."""
    try:
        try:
            code = _main(sys.argv[1:] if argv is None else argv)
        except SystemExit as stop:  # argparse: --help, --version, a usage error; sys.exit() in a plugin
            if stop.code is not None and not isinstance(stop.code, int):
                print(stop.code, file=sys.stderr)
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would print a traceback (and again at exit, flushing stdout): point stdout at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: list[str]) -> int:
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    _global_options(early, None)
    known, _ = early.parse_known_args(argv)
    from gateway.telemetry.logs import configure_logging

    configure_logging(verbose=known.verbose)
    run = Invocation(known)
    parser = build_parser(cli_plugin_manager(run))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    run.args = args
    try:
        if "command_entry" in args:
            return args.command_entry.call(args, run)  # type: ignore[no-any-return]
        code: int = args.run(args, run.home, run.settings)
        return code
    except Exception as exc:
        # Only a command that loaded gateway.settings can raise SettingsError; `status` answered from its
        # cache never imports it (nor pydantic), so the class is looked up rather than imported here.
        settings_module = sys.modules.get("gateway.settings")
        if settings_module is None or not isinstance(exc, settings_module.SettingsError):
            raise
        print(f"{PROG}: invalid settings: {exc}", file=sys.stderr)
        return EXIT_USAGE


def next_step(run: Invocation) -> str:
    """The `Next:` line `init` prints: the command that starts this home, with the options it was given."""
    words = [PROG, "run"]
    if run.args.home:
        words += ["--home", str(run.home.root)]
    if run.args.settings:
        words += ["--settings", str(run.settings_path)]
    return shlex.join(words)

