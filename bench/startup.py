"""`python -m bench.startup [--runs N]`: how long `switchyard` takes to start, per command (issue 12).

Each command runs N times as a process on a scratch home (stdout to /dev/null, no TTY); the table
gives the median wall time and the median CPU time (user + system, from wait4) next to a bare
`python -c pass`. CPU time is the steadier figure on a shared machine. Goal: `--help` and `status`
under 300 ms. `status` runs on an unchanged home (answered from its validation cache after the first
run); `status, config edited` touches orchestrator.yaml before each run, so each one validates;
`status on a terminal` writes to a pseudo-terminal, where the tables are drawn with rich.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SWITCHYARD = str(Path(sys.executable).parent / "switchyard")


def measure(argv: list[str], runs: int, env: dict[str, str], before: Callable[[], None],
            *, terminal: bool = False) -> tuple[float, float]:
    """Median wall and CPU seconds of `argv` over `runs` runs (`before` runs, untimed, before each); with
    `terminal`, stdout is a pseudo-terminal (drained after the run: status writes far less than its buffer)."""
    walls, cpus = [], []
    for _ in range(runs):
        before()
        leader, follower = pty.openpty() if terminal else (-1, subprocess.DEVNULL)
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=follower, stderr=subprocess.DEVNULL, env=env)
        _, _, usage = os.wait4(process.pid, 0)
        if terminal:
            os.close(follower)
            with contextlib.suppress(OSError):
                while os.read(leader, 65536):
                    pass
            os.close(leader)
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
        process.returncode = 0  # reaped by wait4 already
    return statistics.median(walls), statistics.median(cpus)


def _nothing() -> None:
    """Nothing to prepare before a run."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per command (default 21)")
    parser.add_argument("--repo", help="measure `python -m gateway.cli` run in this checkout instead of the "
                                       "installed command (to compare with another branch)")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_HOME"}
    switchyard = [SWITCHYARD]
    if args.repo:
        switchyard = [sys.executable, "-m", "gateway.cli"]
        os.chdir(args.repo)  # `-m` puts the working directory first on sys.path, before the installed copy
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        home = str(Path(scratch) / "home")
        subprocess.run([*switchyard, "--home", home, "init"], check=True, capture_output=True, env=env)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "switchyard --help": [*switchyard, "--help"],
            "switchyard --version": [*switchyard, "--version"],
            "switchyard status": [*switchyard, "--home", home, "status"],
            "status, config edited": [*switchyard, "--home", home, "status"],
            "status on a terminal": [*switchyard, "--home", home, "status"],
            "switchyard runs": [*switchyard, "--home", home, "runs"],
        }
        config = Path(home) / "orchestrators" / "main" / "orchestrator.yaml"
        print(f"{'command':<22} {'wall ms':>8} {'cpu ms':>8}   (median of {args.runs}, load {os.getloadavg()[0]:.1f})")
        for name, command in commands.items():
            wall, cpu = measure(command, args.runs, env, config.touch if name == "status, config edited" else _nothing,
                                terminal=name == "status on a terminal")
            print(f"{name:<22} {wall * 1000:>8.0f} {cpu * 1000:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
