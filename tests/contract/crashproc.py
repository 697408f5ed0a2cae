"""The CrashHost of a `switchyard run` process (files, postgres), loaded through $SWITCHYARD_PLUGINS by
tests/contract/test_crash.py and configured only by its environment: CRASH_HOST (its name), CRASH_LOG (the
log of calls and deliveries), CRASH_SENDS (comma-separated messageIds its channel sends), CRASH_AT (the step
it stops at, unset: none) and CRASH_MARK (the file it writes there). No product code reads these."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.backends.files.answered import AnsweredIndex
from gateway.outbox import FileOutbox
from gateway.spool.queue import FileQueue
from tests.contract.crashhost import CrashHost, Stop, stop_after

_halt = Stop(os.environ.get("CRASH_AT") or None, Path(os.environ["CRASH_MARK"]))
_host = CrashHost(os.environ["CRASH_HOST"], Path(os.environ["CRASH_LOG"]), _halt,
                  [m for m in os.environ.get("CRASH_SENDS", "").split(",") if m])
if _halt.step == "reply_stored":
    stop_after(FileOutbox, "write", "reply_stored", _halt)
if _halt.step == "answer_recorded":
    stop_after(AnsweredIndex, "record", "answer_recorded", _halt)
if _halt.step == "in_store":  # postgres: the intake completes the spool's file once its row is committed
    stop_after(FileQueue, "complete", "in_store", _halt, before=True)

switchyard_channels = _host.switchyard_channels
switchyard_channel_types = _host.switchyard_channel_types
switchyard_handler = _host.switchyard_handler
switchyard_event = _host.switchyard_event
