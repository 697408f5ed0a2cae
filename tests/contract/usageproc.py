"""A second process adding to a home's usage totals (tests/contract/test_usage.py): `python -m
tests.contract.usageproc HOME TURNS` writes `started <epoch>` once its first turn is added, then adds the rest
and writes `done <epoch>`. Each turn is one of tests/contract/test_usage.py's TURN to KEYS on day DAY."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gateway.home import Home
from orchestrator.usagefiles import FileUsageRecords
from tests.contract.test_usage import DAY, KEYS, TURN


def main(home: str, turns: int) -> None:
    records = FileUsageRecords(Home(Path(home)), fsync=False)
    for index in range(turns):
        records.add(DAY, KEYS, TURN)
        if index == 0:
            print(f"started {time.time()}", flush=True)
    print(f"done {time.time()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
