"""The built-in commands `init`, `run`, `send` and `pair` (the parser is in gateway/cli/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time

from gateway.channelkit.access import Pairing, PairingCodeExpired, duration_text
from gateway.cli import EXIT_NO_HOME, Invocation, example_settings_text, next_step, not_a_home
from gateway.cli.backends import failure_text, wait_for_reply
from gateway.cli.check import require_valid_home
from gateway.cli.tables import printable
from gateway.composition import open_backend
from gateway.models import IncomingPayload
from gateway.plugin_manager import call_each
from gateway.spool.queue import FileQueue
from gateway.stores import Duplicate
from gateway.telemetry.events import now_ms

log = logging.getLogger("switchyard")

EXIT_DATABASE = 2  # the database is unreachable (as `switchyard db` and `dead`)
EXIT_DUPLICATE = 4  # `send --wait`: the message id was answered before, so the gateway skipped it (3 is status's)


def cmd_init(args: argparse.Namespace, run: Invocation) -> int:
    """Creates the home layout, settings.yaml and the default orchestrator workspace."""
    home = run.home
    home.create()
    written = []
    if not home.settings_file.exists():
        home.settings_file.write_text(example_settings_text(), encoding="utf-8")
        written.append(str(home.settings_file))
    for paths in call_each(run.pm, "switchyard_init", home=home, settings=run.settings):
        written.extend(paths)
    print(f"Switchyard home: {home.root}")
    for path in written:
        print(f"  wrote {path}")
    print(f"Next: {next_step(run)}")
    return 0


def cmd_run(args: argparse.Namespace, run: Invocation, *, role: str = "run") -> int:
    """Runs the gateway until SIGINT or SIGTERM; then finishes or requeues in-flight work and exits 0.
    `role="worker"` (`switchyard worker`, postgres backend) processes only: no channels, no dispatcher.

    A second SIGINT/SIGTERM during the stop exits at once: messages in flight stay claimed and are
    recovered by the next start, as after a kill.
    """
    from gateway.app import Gateway, run_gateway

    home, settings = run.home, run.settings
    require_valid_home(home, settings, run.pm, source=str(run.settings_path))
    stop = asyncio.Event()  # set by a signal, or by the gateway when no channel is left running
    gateway = Gateway(home, settings, run.pm, role=role, settings_file=run.settings_path, request_stop=stop.set)

    def on_signal(stop: asyncio.Event, signum: int) -> None:
        if not stop.is_set():
            log.info("%s: stopping (send it again to exit at once)", signal.Signals(signum).name)
            stop.set()
            return
        log.warning("second %s: exiting now; messages in flight are recovered at the next start",
                    signal.Signals(signum).name)
        _exit_now(128 + signum)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, stop, signum)
        log.info("switchyard %s on %s (channels: %s)", "running" if role == "run" else "worker running", home.root,
                 ", ".join(p.id for p in gateway.settings.channels if role == "run")
                 or "none — processing dropped-in files only")
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


def cmd_send(args: argparse.Namespace, run: Invocation) -> int:
    """Drops one message into the queue, as a channel would; `--wait` prints the reply."""
    home = run.home
    backend = open_backend(home, run.settings)
    if backend.in_home and not_a_home(home):  # no gateway would ever read it there
        return EXIT_NO_HOME
    home.create()
    payload = IncomingPayload(
        channel=args.channel, channelProfileId=args.profile, sender=args.sender,
        senderId=args.sender_id or args.sender, message=args.text, timestamp=now_ms(),
        messageId=args.message_id or f"cli-{time.time_ns()}", conversationId=args.conversation,
        workflowRunId=args.run,
    )
    path = FileQueue(home, fsync=True).enqueue(payload.to_json(), hint=f"{payload.channel}-{payload.messageId}")
    print(f"queued {path.name}", file=sys.stderr)
    if args.wait <= 0:
        return 0
    print(f"waiting up to {args.wait:g}s for the reply… (Ctrl-C stops waiting; the message stays queued)",
          file=sys.stderr)
    try:
        reply = wait_for_reply(backend.replies(), payload, path.name, args.wait)
    except KeyboardInterrupt:
        print("stopped waiting; the message is still queued", file=sys.stderr)
        return 130
    except backend.failures as exc:  # the database away while looking: the message is queued all the same
        print(f"switchyard: {failure_text(backend, exc)}; the message is still queued", file=sys.stderr)
        return EXIT_DATABASE
    if isinstance(reply, Duplicate):
        print(printable(f"duplicate: message id {payload.messageId} on {payload.profile} was already answered "
                        "(within queue.duplicate_window_sec); it was not processed again. Send it with another "
                        "--message-id to have it answered."), file=sys.stderr)
        return EXIT_DUPLICATE
    if reply is None:
        print(f"no reply within {args.wait:g}s (is `switchyard run` running on {home.root}?)", file=sys.stderr)
        return 1
    print(reply.get("message", ""))
    return 0


def cmd_pair(args: argparse.Namespace, run: Invocation) -> int:
    """Lists pending pairing codes, or approves one so its sender may talk to the bot; on the postgres
    backend in the database (an approval on any host admits the sender everywhere)."""
    backend = open_backend(run.home, run.settings)
    if backend.in_home and not_a_home(run.home):  # else a mistyped --home would list no codes
        return EXIT_NO_HOME
    try:
        code = _pair(args, backend.pairing(command=True))
        if code == 0 and args.pair_command == "approve":
            from gateway.cli.access import record_operator

            record_operator(backend, "pairing.approve", f"approved pairing code {args.code.strip().upper()}")
        return code
    except backend.failures as exc:
        print(f"switchyard: {failure_text(backend, exc)}", file=sys.stderr)
        return EXIT_DATABASE


def _pair(args: argparse.Namespace, store: Pairing) -> int:
    if args.pair_command == "approve":
        try:
            entry = store.approve(args.code)
        except PairingCodeExpired as exc:
            old = exc.entry
            print(printable(f"switchyard: pairing code {args.code.strip().upper()!r} of "
                            f"{old['sender'] or old['senderId']} ({old['senderId']}) on {old['profile']} expired "
                            f"at {old['expires_at']} and is removed; their next message gets a new code"),
                  file=sys.stderr)
            return 1
        if entry is None:
            print(f"switchyard: no pending pairing code {args.code!r} (see `switchyard pair list`)",
                  file=sys.stderr)
            return 1
        who = entry["sender"] or entry["senderId"]
        print(printable(f"approved {who} ({entry['senderId']}) on {entry['profile']}"))
        return 0
    data = store.read()
    for code, entry in data["pending"].items():  # a display name is the sender's choice: no raw controls
        left = float(entry["expires_in_s"])
        expiry = f"expires in {duration_text(left)}" if left > 0 else f"expired {duration_text(-left)} ago"
        print(printable(f"pending {code}: {entry['sender']} ({entry['senderId']}) on {entry['profile']}, "
                        f"since {entry['requested_at']}, {expiry}"))
    for profile, senders in data["approved"].items():
        print(printable(f"approved on {profile}: {', '.join(senders)}"))
    return 0
