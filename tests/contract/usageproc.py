"""Another process on a home's or a database's usage (tests/contract/test_usage.py).

`python -m tests.contract.usageproc add HOME STOP` adds one of tests/contract/test_usage.py's TURN to KEYS on day
DAY after another, writes `started` once its first turn is added, and keeps adding until the file STOP exists;
then it writes `done <turns added>`.

`python -m tests.contract.usageproc reserve files HOME` (or `reserve postgres DSN`) reserves one running turn for
KEYS, writes `reserved`, and holds it (renewing nothing) until it is killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.home import Home
from orchestrator.storage.files.usage import FileUsageRecords
from orchestrator.usage.records import Ledger, UsageRecords
from tests.contract.test_usage import DAY, KEYS, TURN


def add(home: str, stop: Path) -> None:
    records = FileUsageRecords(Home(Path(home)))
    records.add(DAY, KEYS, TURN)
    print("started", flush=True)
    added = 1
    while not stop.exists():
        records.add(DAY, KEYS, TURN)
        added += 1
    print(f"done {added}", flush=True)


def reserve(backend: str, where: str) -> None:
    records: UsageRecords
    if backend == "files":
        records = FileUsageRecords(Home(Path(where)))
    else:
        from orchestrator.storage.postgres.usage import PgUsageRecords

        records = PgUsageRecords(where)

    def admit(ledger: Ledger) -> None:
        return None

    records.reserve(KEYS, admit, 3600)
    print("reserved", flush=True)
    sys.stdin.read()  # until killed


if __name__ == "__main__":
    if sys.argv[1] == "add":
        add(sys.argv[2], Path(sys.argv[3]))
    else:
        reserve(sys.argv[2], sys.argv[3])
