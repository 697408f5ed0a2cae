"""A selector CLI for the multi-process tests: writes a `start` line, sleeps SLOW_S seconds, writes an
`end` line (message id, conversation, times, the gateway's pid) to FAULT_LOG, then answers."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _log(record: dict[str, object]) -> None:
    with open(os.environ["FAULT_LOG"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def main() -> None:
    request = json.loads(Path(os.environ["SWITCHYARD_REQUEST"]).read_text(encoding="utf-8"))
    base = {"messageId": request["message"]["messageId"], "conversation": request["message"]["conversationId"],
            "pid": os.getppid()}
    started = time.time()
    _log({**base, "phase": "start", "at": started})
    time.sleep(float(os.environ.get("SLOW_S", "0.05")))
    _log({**base, "phase": "end", "start": started, "end": time.time()})
    print(json.dumps({"action": "command_invoke", "function": "list_workflows", "arguments": {}}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
