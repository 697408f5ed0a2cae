"""`python -m bench.firstreply [--runs N]`: how long `switchyard run` takes from its start to its first reply.

A fresh home each run, with one message queued before the gateway starts (`switchyard send`); the time is from
spawning `switchyard run` until the reply's file is in `queue/outgoing/` (the console channel is not attached,
so the reply stays there). Alternates the chat tools on and off (`chat_tools.enabled`), which is what the MCP
server's start costs a user at start-up. Prints the sorted times, seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWITCHYARD = str(Path(sys.executable).parent / "switchyard")
SETTINGS = "channels:\n  - {{id: console, type: console}}\nchat_tools: {{enabled: {enabled}}}\n"


def first_reply_s(enabled: bool) -> float:
    """Seconds from spawning `switchyard run` to the queued message's reply file."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        home = Path(scratch) / "home"
        subprocess.run([SWITCHYARD, "--home", str(home), "init"], capture_output=True, check=True)
        (home / "settings.yaml").write_text(SETTINGS.format(enabled="true" if enabled else "false"))
        subprocess.run([SWITCHYARD, "--home", str(home), "send", "hello"], capture_output=True, check=True)
        outgoing = home / "queue" / "outgoing"
        started = time.perf_counter()
        process = subprocess.Popen([SWITCHYARD, "--home", str(home), "run"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not (outgoing.exists() and any(path.suffix == ".json" for path in outgoing.iterdir())):
                if process.poll() is not None:
                    raise SystemExit(f"switchyard run exited with {process.returncode}")
                time.sleep(0.005)  # polling a folder: the figure's resolution, not a synchronisation
            return time.perf_counter() - started
        finally:
            process.terminate()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(runs):
        for enabled in (True, False):
            times[enabled].append(first_reply_s(enabled))
    for enabled, found in times.items():
        print(f"chat tools {'on ' if enabled else 'off'}: " + " ".join(f"{t:.2f}" for t in sorted(found)))


if __name__ == "__main__":
    main()
