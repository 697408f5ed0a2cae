"""`switchyard worker`: a process that only processes messages from the PostgreSQL queue (no channels, no delivery)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.cli import Invocation

EXIT_PROBLEM = 2


def cmd_worker(args: argparse.Namespace, run: Invocation) -> int:
    """Runs the processing half of `switchyard run`; refuses (exit 2) on the file backend."""
    from gateway.composition import backend_name

    if backend_name(run.settings) != "postgres":
        print("switchyard: `switchyard worker` needs queue.backend: postgres (with the file backend, "
              "`switchyard run` processes the queue; run more of them on the same home instead)", file=sys.stderr)
        return EXIT_PROBLEM
    from gateway.cli.commands import cmd_run

    return cmd_run(args, run, role="worker")
