"""A second process adding to a home's usage totals (tests/contract/test_usage.py): `python -m
tests.contract.usageproc HOME STOP` adds one of tests/contract/test_usage.py's TURN to KEYS on day DAY after another,
writes `started` once its first turn is added, and keeps adding until the file STOP exists; then it writes
`done <turns added>`."""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.home import Home
from orchestrator.usagefiles import FileUsageRecords
from tests.contract.test_usage import DAY, KEYS, TURN


def main(home: str, stop: Path) -> None:
    records = FileUsageRecords(Home(Path(home)))
    records.add(DAY, KEYS, TURN)
    print("started", flush=True)
    added = 1
    while not stop.exists():
        records.add(DAY, KEYS, TURN)
        added += 1
    print(f"done {added}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
