"""Provider CLIs for the fault tests: `hang` (forks a child, both sleep), `flood` (20 MB of stdout),
`slowlog` (a selector that logs when it ran for which message, taking 30 ms), `escape PIDFILE [hang|HOLDFILE]`
(leaves a grandchild that called setsid() and writes its pid, then answers, hangs, or waits for HOLDFILE)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _record_pid(pid: int) -> None:
    with open(os.environ["FAULT_PIDS"], "a", encoding="utf-8") as handle:
        handle.write(f"{pid}\n")


def _escape(pid_file: str) -> None:
    """Leaves an orphan outside the process group, its pipes closed, as a daemonising child does."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            Path(pid_file + ".tmp").write_text(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(1000)
        os._exit(0)
    os.wait()
    while not Path(pid_file).exists():
        time.sleep(0.01)


def main() -> None:
    mode = sys.argv[1]
    if mode == "hang":
        os.fork()
        _record_pid(os.getpid())  # the provider and its child each record themselves
        time.sleep(120)
    elif mode == "escape":
        _escape(sys.argv[2])
        then = sys.argv[3] if len(sys.argv) > 3 else ""
        if then == "hang":
            time.sleep(120)
        while then and not Path(then).exists():
            time.sleep(0.01)
        print(json.dumps({"action": "command_invoke", "function": "list_workflows", "arguments": {}}))
    elif mode == "flood":
        chunk = b"x" * 65536
        for _ in range(320):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.write(b'\n{"action": "workflow_status"}\n')
        sys.stdout.flush()
    elif mode == "slowlog":
        request = json.loads(Path(os.environ["SWITCHYARD_REQUEST"]).read_text(encoding="utf-8"))
        started = time.time()
        time.sleep(0.03)
        record = {"messageId": request["message"]["messageId"], "conversation": request["message"]["conversationId"],
                  "start": started, "end": time.time(), "pid": os.getppid()}
        with open(os.environ["FAULT_LOG"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        print(json.dumps({"action": "command_invoke", "function": "list_workflows", "arguments": {}}))


if __name__ == "__main__":
    main()
