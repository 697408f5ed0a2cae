"""gateway/home.py: atomic writes that concurrent writers of one file cannot break."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
