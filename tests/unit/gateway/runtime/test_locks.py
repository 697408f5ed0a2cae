"""TTL key locks: one holder at a time, expiry and dead holders reclaimed, renewals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gateway.disk.locks import LockDirectory
from gateway.runtime.keys import KeyScheduler


def test_a_held_lock_is_refused_to_another_holder(tmp_path: Path) -> None:
    first = LockDirectory(tmp_path, holder="a", ttl_s=60)
    second = LockDirectory(tmp_path, holder="b", ttl_s=60)
    assert first.acquire("conv:x")
    assert not second.acquire("conv:x")
    first.release("conv:x")
    assert second.acquire("conv:x")


def test_lock_file_has_the_spec_001_fields(tmp_path: Path) -> None:
    locks = LockDirectory(tmp_path, holder="host:1", ttl_s=30)
    locks.acquire("run:r1")
    content = json.loads(locks.path_for("run:r1").read_text())
    assert set(content) == {"holder", "resource", "acquired_at", "expires_at", "pid"}
    assert content["resource"] == "run:r1" and content["pid"] == os.getpid()


def test_an_expired_lock_is_reclaimed(tmp_path: Path) -> None:
    already_expired = LockDirectory(tmp_path, holder="a", ttl_s=0)
    assert already_expired.acquire("conv:x")
    assert LockDirectory(tmp_path, holder="b").acquire("conv:x")


def test_a_lock_of_a_dead_process_is_reclaimed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    locks = LockDirectory(tmp_path, holder="b")
    path = locks.path_for("conv:x")
    path.write_text(json.dumps({"holder": "a", "resource": "conv:x", "acquired_at": "2026-01-01T00:00:00Z",
                                "expires_at": "2999-01-01T00:00:00Z", "pid": int(dead.stdout)}))
    assert locks.acquire("conv:x")
    assert LockDirectory.read(path).holder == "b"


def test_renew_moves_the_expiry(tmp_path: Path) -> None:
    locks = LockDirectory(tmp_path, holder="a", ttl_s=5)
    locks.acquire("k")
    before = LockDirectory.read(locks.path_for("k")).expires_at
    locks.ttl_s = 500
    locks.renew(["k"])
    assert LockDirectory.read(locks.path_for("k")).expires_at > before


def test_clean_expired_removes_only_stale_locks(tmp_path: Path) -> None:
    LockDirectory(tmp_path, holder="a", ttl_s=0).acquire("old")
    LockDirectory(tmp_path, holder="b", ttl_s=600).acquire("live")
    assert LockDirectory(tmp_path, holder="c").clean_expired() == ["old"]
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.json")] == ["live"]


def test_scheduler_treats_a_key_held_elsewhere_as_busy(tmp_path: Path) -> None:
    other = LockDirectory(tmp_path, holder="other")
    other.acquire("conv:x")
    scheduler: KeyScheduler[str] = KeyScheduler(4, LockDirectory(tmp_path, holder="me"))
    scheduler.add((1, "a"), ("conv:x",), "blocked")
    scheduler.add((2, "b"), ("conv:y",), "free")
    assert [item for _, item in scheduler.ready()] == ["free"]
    assert scheduler.contended
    other.release("conv:x")
    assert [item for _, item in scheduler.ready()] == ["blocked"]
    scheduler.finish(("conv:x",))
    assert not any(tmp_path.glob("conv_x*"))
