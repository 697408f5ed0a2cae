"""The `switchyard` command: init, run, send, status."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pluggy

from gateway.access import PairingStore
from gateway.app import Gateway, run_gateway
from gateway.events import now_ms
from gateway.home import Home, resolve_home
from gateway.logs import configure_logging
from gateway.models import IncomingPayload
from gateway.plugin_manager import build_plugin_manager, call_each, check_channel_options
from gateway.queue import FileQueue, queue_depths
from gateway.settings import Settings, SettingsError, load_settings

log = logging.getLogger("switchyard")


def example_settings_text() -> str:
    """The commented settings.example.yaml shipped with the package."""
    return resources.files("gateway").joinpath("templates/settings.example.yaml").read_text("utf-8")


def _settings_path(args: argparse.Namespace, home: Home) -> Path:
    return Path(args.settings).expanduser().resolve() if args.settings else home.settings_file


def _load_settings(args: argparse.Namespace, home: Home) -> Settings:
    """The settings file `--settings` names (it must exist), else the home's (or the embedded default)."""
    return load_settings(_settings_path(args, home), required=bool(args.settings))


@dataclass
class Invocation:
    """One `switchyard` command line: its home, its settings (or why they are invalid), its plugins."""

    home: Home
    pm: pluggy.PluginManager
    loaded: Settings | None
    error: SettingsError | None

    @classmethod
    def prepare(cls, args: argparse.Namespace) -> Invocation:
        """Loads the settings once and builds the plugin manager from them (so listed plugins can add
        subcommands); invalid settings are kept as the error a command that needs them reports."""
        home = Home(resolve_home(args.home))
        try:
            settings: Settings | None = _load_settings(args, home)
            error = None
        except SettingsError as exc:
            settings, error = None, exc
        return cls(home, build_plugin_manager(settings), settings, error)

    @property
    def settings(self) -> Settings:
        """The loaded settings; raises SettingsError when they are invalid or missing."""
        if self.loaded is None:
            raise self.error or SettingsError("settings not loaded")
        return self.loaded


# --- init ------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace, run: Invocation) -> int:
    """Creates the home layout, settings.yaml and the default orchestrator workspace."""
    home = run.home
    home.create()
    written = []
    if not home.settings_file.exists():
        home.settings_file.write_text(example_settings_text(), encoding="utf-8")
        written.append(str(home.settings_file))
    settings = _load_settings(args, home)
    for paths in call_each(run.pm, "switchyard_init", home=home, settings=settings):
        written.extend(paths)
    print(f"Switchyard home: {home.root}")
    for path in written:
        print(f"  wrote {path}")
    print("Next: switchyard run" + (f" --home {home.root}" if args.home else ""))
    return 0


# --- run -------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace, run: Invocation) -> int:
    """Runs the gateway until SIGINT or SIGTERM; then finishes or requeues in-flight work and exits 0.

    A second SIGINT/SIGTERM during the stop exits at once: messages in flight stay claimed and are
    recovered by the next start, as after a kill.
    """
    home, settings = run.home, run.settings
    check_channel_options(settings, run.pm, source=str(_settings_path(args, home)))
    gateway = Gateway(home, settings, run.pm)

    def on_signal(stop: asyncio.Event, signum: int) -> None:
        if not stop.is_set():
            log.info("%s: stopping (send it again to exit at once)", signal.Signals(signum).name)
            stop.set()
            return
        log.warning("second %s: exiting now; messages in flight are recovered at the next start",
                    signal.Signals(signum).name)
        _exit_now(128 + signum)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, stop, signum)
        log.info("switchyard running on %s (channels: %s)", home.root,
                 ", ".join(p.id for p in settings.channels) or "none — processing dropped-in files only")
        await run_gateway(gateway, stop)
        if gateway.unfinished:  # asyncio.run would wait for them forever
            log.info("switchyard stopped")
            _exit_now(0)

    asyncio.run(main())
    log.info("switchyard stopped")
    return 0


def _exit_now(code: int) -> None:
    """Ends the process without waiting for tasks or threads that would not stop."""
    logging.shutdown()
    os._exit(code)


# --- send ------------------------------------------------------------------------------------


def cmd_send(args: argparse.Namespace, run: Invocation) -> int:
    """Drops one message into the queue, as a channel would; `--wait` prints the reply."""
    home = run.home
    home.create()
    stamp = now_ms()
    payload = IncomingPayload(
        channel=args.channel, channelProfileId=args.profile, sender=args.sender,
        senderId=args.sender_id or args.sender, message=args.text, timestamp=stamp,
        messageId=args.message_id or f"cli-{time.time_ns()}", conversationId=args.conversation,
        workflowRunId=args.run,
    )
    path = FileQueue(home, fsync=True).enqueue(payload.to_json(), hint=f"{payload.channel}-{payload.messageId}")
    print(f"queued {path.name}", file=sys.stderr)
    if args.wait <= 0:
        return 0
    reply = wait_for_reply(home, payload.messageId, args.wait)
    if reply is None:
        print(f"no reply within {args.wait:g}s (is `switchyard run` running on {home.root}?)", file=sys.stderr)
        return 1
    print(reply.get("message", ""))
    return 0


def wait_for_reply(home: Home, message_id: str, timeout_s: float) -> dict[str, Any] | None:
    """Polls outgoing/ and sent/ until a reply to `message_id` appears, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for folder in (home.outgoing, home.sent):
            for entry in os.scandir(folder):
                if entry.name.endswith(".json") and message_id in entry.name:
                    try:
                        reply: dict[str, Any] = json.loads(Path(entry.path).read_bytes())
                    except (OSError, ValueError):
                        continue
                    if reply.get("messageId") == message_id:
                        return reply
        time.sleep(0.05)
    return None


# --- status ----------------------------------------------------------------------------------


def gather_status(home: Home, settings: Settings, pm: pluggy.PluginManager) -> dict[str, Any]:
    """Everything `status` shows: gateway process, channels, queue depths, dead letters, plugin sections."""
    status: dict[str, Any] = {"home": str(home.root), "queue": queue_depths(home)}
    status["gateway"] = _gateway_process(home)
    status["dead_letters"] = _dead_letters(home, limit=5)
    for section in call_each(pm, "switchyard_status", home=home, settings=settings):
        status.update(section)
    return status


def _gateway_process(home: Home) -> dict[str, Any]:
    try:
        info: dict[str, Any] = json.loads((home.state / "gateway.json").read_bytes())
    except (OSError, ValueError):
        return {"running": False}
    try:
        os.kill(int(info["pid"]), 0)
        info["running"] = True
    except (OSError, KeyError, ValueError):
        info["running"] = False
    return info


def _dead_letters(home: Home, *, limit: int) -> list[dict[str, Any]]:
    reports = sorted(home.failed.glob("*.error.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    letters = []
    for path in reports[:limit]:
        try:
            report = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        letters.append({"file": report.get("file"), "reason": report.get("reason"),
                        "attempts": report.get("attempts"), "failed_at": report.get("failed_at")})
    return letters


def print_status(status: dict[str, Any]) -> None:
    """Prints the status for a person."""
    gateway = status["gateway"]
    print(f"home: {status['home']}")
    print(f"gateway: {'running, pid ' + str(gateway['pid']) if gateway.get('running') else 'not running'}")
    for profile, info in gateway.get("channels", {}).items():
        reason = f" — {info['reason']}" if info.get("reason") else ""
        print(f"  channel {profile} ({info.get('type')}): {info.get('state')}{reason}")
    print("queue: " + ", ".join(f"{name} {count}" for name, count in status["queue"].items()))
    for letter in status["dead_letters"]:
        print(f"  dead letter {letter['file']}: {letter['reason']}")
    for problem in status.get("providers", []):
        print(f"  {problem}")
    for run in status.get("runs", []):
        print(f"run {run.get('runId')} ({run.get('workflowId')}): {run.get('state')}, "
              f"step {run.get('currentStep') or '-'}")
    if not status.get("runs"):
        print("runs: none active")
    for beat in status.get("heartbeats", []):
        flag = "MISSED" if beat.get("missed") else "ok"
        print(f"heartbeat {beat.get('profile')}: {flag}, last answer {beat.get('last_answer_at') or 'never'}"
              f", round trip {beat.get('last_rtt_ms', '-')} ms")
        if beat.get("problem"):
            print(f"heartbeat {beat.get('profile')}: {beat['problem']}")


def cmd_status(args: argparse.Namespace, run: Invocation) -> int:
    status = gather_status(run.home, run.settings, run.pm)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        print_status(status)
    return 0


# --- pair ------------------------------------------------------------------------------------


def cmd_pair(args: argparse.Namespace, run: Invocation) -> int:
    """Lists pending pairing codes, or approves one so its sender may talk to the bot."""
    store = PairingStore(run.home)
    if args.pair_command == "approve":
        entry = store.approve(args.code)
        if entry is None:
            print(f"switchyard: no pending pairing code {args.code!r} (see `switchyard pair list`)",
                  file=sys.stderr)
            return 1
        print(f"approved {entry['sender'] or entry['senderId']} ({entry['senderId']}) on {entry['profile']}")
        return 0
    data = store.read()
    for code, entry in data["pending"].items():
        print(f"pending {code}: {entry['sender']} ({entry['senderId']}) on {entry['profile']}, "
              f"since {entry['requested_at']}")
    for profile, senders in data["approved"].items():
        print(f"approved on {profile}: {', '.join(senders)}")
    return 0


# --- entry point -----------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", help="home directory (default: $SWITCHYARD_HOME or ~/.switchyard)")
    parser.add_argument("--settings", help="settings file (default: <home>/settings.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def build_parser(pm: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__)
    _global_options(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("init", help="create the home, settings.yaml and the default orchestrator")
    commands.add_parser("run", help="run the gateway (Ctrl-C to stop)")
    send = commands.add_parser("send", help="queue a message as a channel would")
    send.add_argument("text")
    send.add_argument("--channel", default="console")
    send.add_argument("--profile", help="channelProfileId")
    send.add_argument("--conversation", default="cli", help="conversationId")
    send.add_argument("--sender", default=os.environ.get("USER", "cli"))
    send.add_argument("--sender-id")
    send.add_argument("--message-id")
    send.add_argument("--run", help="workflowRunId to address")
    send.add_argument("--wait", type=float, default=0, help="seconds to wait for the reply and print it")
    status = commands.add_parser("status", help="queue depths, dead letters, runs, heartbeat")
    status.add_argument("--json", action="store_true")
    pair = commands.add_parser("pair", help="admit senders with one-time pairing codes")
    pair_commands = pair.add_subparsers(dest="pair_command", required=True)
    pair_commands.add_parser("list", help="pending codes and approved senders")
    approve = pair_commands.add_parser("approve", help="approve a pending code")
    approve.add_argument("code")
    if pm is not None:
        call_each(pm, "switchyard_cli", commands=commands)
    return parser


COMMANDS = {"init": cmd_init, "run": cmd_run, "send": cmd_send, "status": cmd_status, "pair": cmd_pair}


def main(argv: list[str] | None = None) -> int:
    early = argparse.ArgumentParser(add_help=False)
    _global_options(early)
    known, _ = early.parse_known_args(argv)
    configure_logging(verbose=known.verbose)
    run = Invocation.prepare(known)
    args = build_parser(run.pm).parse_args(argv)
    try:
        if args.command in COMMANDS:
            return COMMANDS[args.command](args, run)
        code: int = args.run(args, run.home, run.settings)
        return code
    except SettingsError as exc:
        print(f"switchyard: invalid settings: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
