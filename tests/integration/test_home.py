"""gateway/home.py: atomic writes that concurrent writers of one file cannot break, spare files, capped reads."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.home import SpareFiles, atomic_write, read_file

WRITER = """
import sys, time
from pathlib import Path
from gateway.home import atomic_write
target, mark, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
while not go.exists():  # both start writing together
    time.sleep(0.001)
for _ in range(2000):
    atomic_write(target, (mark * 4096).encode(), fsync=False)
"""


def test_two_processes_writing_one_file_at_once_never_fail_and_leave_a_whole_file(tmp_path: Path) -> None:
    # e.g. two `switchyard run` sharing a home update coordination/active_work.json together
    target, go = tmp_path / "shared.json", tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(target), mark, str(go)], stderr=subprocess.PIPE)
               for mark in "ab"]
    go.touch()
    errors = [writer.communicate(timeout=60)[1].decode() for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    assert target.read_text() in ("a" * 4096, "b" * 4096)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("size", [0, 1, 4096, 200_000])
def test_read_file_returns_the_whole_file(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    assert read_file(path) == path.read_bytes()


@pytest.mark.parametrize(("size", "expected"), [(10, 10), (100, 100), (101, 101), (500_000, 101)])
def test_a_capped_read_stops_one_byte_past_the_limit(tmp_path: Path, size: int, expected: int) -> None:
    # one byte more than the limit tells the queue the payload is too large, without loading it all
    path = tmp_path / "f"
    path.write_bytes(b"y" * size)
    assert read_file(path, limit=100) == b"y" * expected


def _spares_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".spare.*.tmp"))


async def test_a_write_uses_the_spare_made_after_the_one_before(tmp_path: Path) -> None:
    # the file creation moves off the path of the next write, to the loop's next turn
    spares = SpareFiles(tmp_path)
    atomic_write(tmp_path / "a.json", b"first", fsync=False, spares=spares)
    assert _spares_in(tmp_path) == []
    await asyncio.sleep(0)
    [spare] = _spares_in(tmp_path)
    atomic_write(tmp_path / "b.json", b"second", fsync=True, spares=spares)
    assert (tmp_path / "b.json").read_bytes() == b"second" and _spares_in(tmp_path) == []
    await asyncio.sleep(0)
    assert len(_spares_in(tmp_path)) == 1 and _spares_in(tmp_path) != [spare]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a.json", "b.json"]
    spares.close()


async def test_a_spare_removed_meanwhile_still_gets_the_write_through(tmp_path: Path) -> None:
    # e.g. another process starting on a shared home removed it as a stale .tmp file
    spares = SpareFiles(tmp_path)
    atomic_write(tmp_path / "a.json", b"first", fsync=False, spares=spares)
    await asyncio.sleep(0)
    (tmp_path / _spares_in(tmp_path)[0]).unlink()
    atomic_write(tmp_path / "b.json", b"second", fsync=True, spares=spares)
    assert (tmp_path / "b.json").read_bytes() == b"second"
    spares.close()


async def test_close_removes_the_spare_and_no_new_one_is_made(tmp_path: Path) -> None:
    spares = SpareFiles(tmp_path)
    atomic_write(tmp_path / "a.json", b"first", fsync=False, spares=spares)
    await asyncio.sleep(0)
    spares.close()
    atomic_write(tmp_path / "b.json", b"late", fsync=False, spares=spares)
    await asyncio.sleep(0)
    assert _spares_in(tmp_path) == [] and (tmp_path / "b.json").read_bytes() == b"late"


def test_without_a_running_loop_no_spare_is_made(tmp_path: Path) -> None:
    spares = SpareFiles(tmp_path)
    for name in ("a.json", "b.json"):
        atomic_write(tmp_path / name, b"x", fsync=False, spares=spares)
    assert _spares_in(tmp_path) == []
