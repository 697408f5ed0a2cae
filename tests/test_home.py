"""gateway/home.py: atomic writes that concurrent writers of one file cannot break; capped reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.home import read_file

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
