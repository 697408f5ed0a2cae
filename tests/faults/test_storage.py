"""Disk full and folders that refuse writes: a clear error, nothing lost, work resumes once fixed."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.faults.harness import GatewayRun, message

MESSAGES = 6


def _answered(run: GatewayRun) -> set[str]:
    return {reply["messageId"] for reply in run.replies()}


def _drop_batch(run: GatewayRun) -> set[str]:
    ids = set()
    for seq in range(MESSAGES):
        payload = message(seq, f"c{seq % 2}")
        run.drop(payload)
        ids.add(payload.messageId)
    return ids


def _error_events(run: GatewayRun, text: str) -> list[str]:
    return [e["reason"] for e in run.events("queue.error") if text in e.get("reason", "")]


def _cannot_run_as(user: str) -> str:
    """Why `user` cannot start the gateway's interpreter and import the checkout ("" when it can)."""
    probe = GatewayRun(Path(tempfile.gettempdir()) / "unused", user=user)
    argv = [*probe.command()[:-5], "-c", "import gateway.cli"]  # setpriv … python, without `-m gateway.cli …`
    try:
        result = subprocess.run(argv, env=probe.env, cwd="/", capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return str(exc)
    lines = (result.stderr or result.stdout).strip().splitlines()
    return "" if result.returncode == 0 else (lines[-1] if lines else f"exit code {result.returncode}")


@pytest.fixture
def unprivileged_home() -> Iterator[Path]:
    """A home owned by `nobody` in a folder that user can reach (pytest's tmp_path is root-only)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the gateway as an unprivileged user")
    reason = _cannot_run_as("nobody")
    if reason:
        pytest.skip(f"`nobody` cannot run this interpreter on this checkout (is it under a private folder, "
                    f"such as /root or `mktemp -d`?): {reason}")
    folder = Path(tempfile.mkdtemp(prefix="switchyard-perm-"))
    folder.chmod(0o755)
    try:
        yield folder / "home"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_unwritable_outgoing_folder_is_reported_and_the_replies_follow_once_fixed(
        unprivileged_home: Path) -> None:
    run = GatewayRun(unprivileged_home, user="nobody")
    run.configure(queue={"fsync": True})
    subprocess.run(["chown", "-R", "nobody:", str(unprivileged_home)], check=True)
    run.start()
    run.home.outgoing.chmod(0o555)  # root could still write; the gateway, as nobody, cannot
    ids = _drop_batch(run)
    wait_until(lambda: _error_events(run, "Permission denied"), 20)
    assert "cannot write the reply" in _error_events(run, "Permission denied")[0]
    assert run.alive() and not _answered(run)
    assert run.queued_files() == MESSAGES, "every message is still queued (claimed or waiting)"
    assert not list(run.home.failed.iterdir()), "a folder problem never dead-letters a message"
    run.home.outgoing.chmod(0o755)
    wait_until(lambda: _answered(run) == ids, 20)
    assert run.stop() == 0


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[list[Path]]:
    """Folders made immutable with `chattr +i` (refused even to root); always made mutable again."""
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this file system")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    folders: list[Path] = []
    yield folders
    for folder in folders:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


def test_an_immutable_incoming_folder_is_reported_and_claims_resume_once_fixed(
        tmp_path: Path, immutable: list[Path]) -> None:
    run = GatewayRun(tmp_path / "home")
    run.configure()
    ids = _drop_batch(run)
    immutable.append(run.home.incoming)
    subprocess.run(["chattr", "+i", str(run.home.incoming)], check=True)
    run.start()
    wait_until(lambda: _error_events(run, "Operation not permitted"), 20)
    assert "cannot claim" in _error_events(run, "Operation not permitted")[0]
    assert run.alive() and not _answered(run)
    assert len(list(run.home.incoming.glob("*.json"))) == MESSAGES
    subprocess.run(["chattr", "-i", str(run.home.incoming)], check=True)
    wait_until(lambda: _answered(run) == ids, 20)
    assert run.stop() == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (root only); unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Writes a ballast file until the file system is full."""
    ballast = folder / "ballast"
    with ballast.open("wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return ballast


def test_a_full_disk_is_reported_nothing_is_lost_and_work_resumes_when_space_returns(
        small_disk: Path, tmp_path: Path) -> None:
    run = GatewayRun(small_disk / "home", log=tmp_path / "run.log")
    run.configure(queue={"fsync": True})
    run.start()
    staged = small_disk / "staged"
    staged.mkdir()
    ids = set()
    for seq in range(MESSAGES):
        payload = message(seq, f"c{seq % 2}")
        (staged / f"{seq:03d}.json").write_bytes(payload.to_json())
        ids.add(payload.messageId)
    ballast = _fill(small_disk)
    for path in sorted(staged.iterdir()):
        os.rename(path, run.home.incoming / path.name)  # a rename needs no free space
    wait_until(lambda: "No space left on device" in run.output(), 20)
    assert run.alive() and not _answered(run)
    assert run.queued_files() == MESSAGES
    ballast.unlink()
    wait_until(lambda: _answered(run) == ids, 30)
    assert not list(run.home.failed.glob("*.json"))
    assert run.stop() == 0
