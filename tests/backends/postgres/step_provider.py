"""An agent CLI for the multi-host run tests: logs (run, step, the gateway's pid) to STEP_LOG, waits for the
GATE file when its step is GATE_STEP, then answers `answer of <step>`."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    sys.stdin.read()
    step = os.environ.get("SWITCHYARD_STEP_ID", "")
    record = {"run": os.environ.get("SWITCHYARD_RUN_ID"), "step": step, "pid": os.getppid()}
    with open(os.environ["STEP_LOG"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    if step == os.environ.get("GATE_STEP"):
        gateway = os.getppid()
        while not os.path.exists(os.environ["GATE"]):
            if os.getppid() != gateway:  # its gateway is gone (a test that failed and killed it): nothing waits
                sys.exit(1)
            time.sleep(0.02)
    print(f"answer of {step}")


if __name__ == "__main__":
    main()
