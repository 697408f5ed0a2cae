"""A PostgreSQL server of a test's own, for the tests that stop, crash or restart it: initdb into a
temporary folder, started on a free port of 127.0.0.1 with trust authentication, removed after the test.
The server at SWITCHYARD_TEST_DSN, which other tests (and other people) use, is never touched."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

TIMEOUT_S = 120


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl (the newest installed version), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ThrowawayServer:
    """One initdb'd cluster in `root` (data/, the unix socket, server.log), run by `user` when the tests run
    as root (initdb refuses root)."""

    def __init__(self, bindir: Path, root: Path, user: str | None):
        self.bindir, self.root, self.user = bindir, root, user
        self.data = root / "data"
        self.port = _free_port()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bindir / tool), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=self.root)
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                                 f"\n{self.log()}")
        return done

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8",
                  "--locale=C")

    def start(self) -> None:
        """Starts the server (on the same port each time) and waits until it accepts connections.

        fsync is off: an `immediate` stop is a crash of the server's processes, not of the machine, so the
        WAL it recovers from is still in the page cache either way."""
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w",
                  "-t", str(TIMEOUT_S), "start")

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m fast` (a clean shutdown) or `-m immediate` (as in a crash: recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(TIMEOUT_S), "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def remove(self) -> None:
        """Stops the server whatever its state (SIGKILL as the last resort) and deletes its folder."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", check=False)
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)  # a postmaster pg_ctl could not stop; its children follow it
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_server() -> Iterator[ThrowawayServer]:
    """A running ThrowawayServer, removed afterwards (also when the test failed); skips with the reason when
    the server's binaries are not installed, or the tests run as root and there is no `postgres` user."""
    bindir = server_binaries()
    if bindir is None:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: no throwaway server")
    user = None
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user to run a throwaway server (initdb "
                        "refuses root)")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without `runuser` to run a throwaway server as `postgres`")
        user = account.pw_name
    # /tmp rather than the test's tmp_path: that may sit in a folder `postgres` cannot enter
    root = Path(tempfile.mkdtemp(prefix="sy-pg-", dir="/tmp" if user else None))
    if user:
        os.chown(root, account.pw_uid, account.pw_gid)
    server = ThrowawayServer(bindir, root, user)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.remove()
