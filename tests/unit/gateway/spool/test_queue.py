"""The file queue: claim order, atomic claims, requeue with bytes intact, dead letters, recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gateway.home import Home, queue_depths
from gateway.spool.queue import FileQueue
from gateway.testing import drop_incoming, make_incoming


def _set_mtime(path, ns):
    os.utime(path, ns=(ns, ns))


def test_claims_oldest_first_by_mtime_then_name(home: Home) -> None:
    base = time.time_ns()
    for name, offset in (("c.json", 0), ("b.json", 0), ("a.json", 5_000_000)):
        path = drop_incoming(home, make_incoming(name), name)
        _set_mtime(path, base + offset)
    queue = FileQueue(home, fsync=False)
    queue.open()
    claimed = [queue.claim().name for _ in range(3)]
    assert claimed == ["b.json", "c.json", "a.json"]
    assert queue.claim() is None


def test_tmp_files_are_never_claimed(home: Home) -> None:
    (home.incoming / "half.json.tmp").write_bytes(b"{")
    queue = FileQueue(home, fsync=False)
    queue.open()
    queue.notice("half.json.tmp")
    assert queue.claim() is None
    assert (home.incoming / "half.json.tmp").exists()


def test_claim_moves_the_file_into_this_workers_processing_folder(home: Home) -> None:
    drop_incoming(home, make_incoming(), "one.json")
    queue = FileQueue(home, fsync=False)
    queue.open()
    claimed = queue.claim()
    assert claimed is not None
    assert not (home.incoming / "one.json").exists()
    assert claimed.path.parent == home.processing / f"w{os.getpid()}"
    assert json.loads(claimed.data)["message"] == "hello"


def test_requeue_keeps_bytes_and_counts_attempts_outside_the_payload(home: Home) -> None:
    original = b'{"channel": "console", "message": "x", "timestamp": 1, "messageId": "m"}'
    drop_incoming(home, original, "m.json")
    queue = FileQueue(home, fsync=False)
    queue.open()
    claimed = queue.claim()
    assert queue.requeue(claimed, "boom", delay_s=0) == 1
    assert (home.incoming / "m.json").read_bytes() == original
    again = queue.claim()
    assert again.attempts == 1 and again.errors == ["boom"]
    assert again.data == original


def test_requeued_file_waits_out_its_backoff(home: Home) -> None:
    drop_incoming(home, make_incoming(), "m.json")
    queue = FileQueue(home, fsync=False)
    queue.open()
    queue.requeue(queue.claim(), "boom", delay_s=60)
    assert queue.claim() is None
    assert 59 < queue.next_due_in() <= 60


def test_dead_letter_keeps_original_bytes_and_writes_the_reason(home: Home) -> None:
    original = b"not json at all"
    drop_incoming(home, original, "bad.json")
    queue = FileQueue(home, fsync=False)
    queue.open()
    target = queue.dead_letter(queue.claim(), "not valid JSON", attempts=1)
    assert target == home.failed / "bad.json"
    assert target.read_bytes() == original
    report = json.loads((home.failed / "bad.json.error.json").read_bytes())
    assert report["reason"] == "not valid JSON" and report["attempts"] == 1


def test_recovery_returns_files_of_a_dead_worker(home: Home) -> None:
    dead = home.processing / "w999999"
    dead.mkdir()
    (dead / "left.json").write_bytes(make_incoming("left behind").to_json())
    queue = FileQueue(home, fsync=False)
    actions = queue.open()
    assert actions == ["returned left.json to incoming as left.json"]
    assert [p.name for p in home.incoming.iterdir()] == ["left.json"]
    assert not dead.exists()


def test_recovery_leaves_a_live_workers_files_alone(home: Home, tmp_path) -> None:
    script = (
        "import sys, time; sys.path.insert(0, '.');"
        "from gateway.home import Home; from gateway.spool.queue import FileQueue;"
        f"q = FileQueue(Home(__import__('pathlib').Path({str(home.root)!r})), fsync=False); q.open();"
        "(q.worker_dir / 'busy.json').write_text('{}'); print('ready', flush=True); time.sleep(30)"
    )
    other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        queue = FileQueue(home, fsync=False)
        assert queue.open() == []
        assert (home.processing / f"w{other.pid}" / "busy.json").exists()
    finally:
        other.kill()
        other.wait()
        other.stdout.close()


def test_recovery_resolves_a_name_present_in_both_folders_without_loss(home: Home) -> None:
    dead = home.processing / "w999998"
    dead.mkdir()
    (dead / "same.json").write_bytes(b'{"version": "processing"}')
    (home.incoming / "same.json").write_bytes(b'{"version": "incoming"}')
    (dead / "twin.json").write_bytes(b'{"identical": true}')
    (home.incoming / "twin.json").write_bytes(b'{"identical": true}')
    FileQueue(home, fsync=False).open()
    contents = sorted(p.read_bytes() for p in home.incoming.iterdir())
    assert contents == [b'{"identical": true}', b'{"version": "incoming"}', b'{"version": "processing"}']


@pytest.mark.parametrize("folder", ["incoming", "outgoing", "failed", "state", "state/attempts"])
def test_stale_tmp_files_are_removed_at_start_and_fresh_ones_kept(home: Home, folder: str) -> None:
    # what a process killed in the middle of an atomic_write leaves behind (a live writer renames
    # its file within milliseconds, so a fresh one may belong to another process on the home)
    (home.queue / folder).mkdir(parents=True, exist_ok=True)
    stale = home.queue / folder / "old.json.4242-0.tmp"
    stale.write_bytes(b"{")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fresh = home.queue / folder / "new.json.4242-1.tmp"
    fresh.write_bytes(b"{")
    actions = FileQueue(home, fsync=False).open()
    assert not stale.exists() and fresh.exists()
    assert f"removed stale {stale.name}" in actions


def test_two_queues_on_one_home_never_claim_the_same_file(home: Home) -> None:
    for i in range(50):
        drop_incoming(home, make_incoming(str(i)), f"{i:03d}.json")
    first, second = FileQueue(home, fsync=False), FileQueue(home, fsync=False)
    first.worker_dir = home.processing / "w-first"
    second.worker_dir = home.processing / "w-second"
    first.open()
    second.open()  # both indexed incoming/ before either claims: each will try files the other already took
    assert queue_depths(home)["incoming"] == 50
    claims: dict[str, list[str]] = {"first": [], "second": []}
    while True:
        taken = [(who, queue.claim()) for who, queue in (("second", second), ("first", first))]
        if all(claimed is None for _, claimed in taken):
            break
        for who, claimed in taken:
            if claimed is not None:
                claims[who].append(claimed.name)
                assert claimed.path.parent == (first if who == "first" else second).worker_dir
    both = claims["first"] + claims["second"]
    assert sorted(both) == [f"{i:03d}.json" for i in range(50)], "a file was claimed twice or lost"
    assert claims["first"] and claims["second"], "one queue never claimed anything"
    assert sorted(p.name for p in first.worker_dir.glob("*.json")) == sorted(claims["first"])
    assert sorted(p.name for p in second.worker_dir.glob("*.json")) == sorted(claims["second"])
    first.close()
    second.close()


def test_enqueue_names_sort_in_arrival_order(home: Home) -> None:
    queue = FileQueue(home, fsync=False)
    paths = [queue.enqueue(make_incoming(str(i)).to_json(), hint="console-x") for i in range(200)]
    assert [p.name for p in paths] == sorted(p.name for p in paths)
    assert queue_depths(home)["incoming"] == 200


def test_files_taken_by_another_process_during_the_start_up_scan_are_skipped(
    home: Home, tmp_path, monkeypatch
) -> None:
    # Another `switchyard run` on the same home claims a file, and a writer renames its .tmp,
    # between our listing of incoming/ and our stat of the entry: start-up must go on.
    for name in ("a.json", "b.json"):
        drop_incoming(home, make_incoming(name), name)
    (home.incoming / "c.json.tmp").write_bytes(b"{}")
    old = time.time() - 3600
    os.utime(home.incoming / "c.json.tmp", (old, old))
    elsewhere = tmp_path / "other-worker"
    elsewhere.mkdir()
    listing = os.scandir
    taken = ["c.json.tmp", "a.json"]  # one per listing: recovery's sweep of .tmp files, then the index

    def racing(path):
        entries = list(listing(path))
        if os.path.realpath(path) == os.path.realpath(home.incoming) and taken:
            gone = taken.pop(0)
            os.rename(home.incoming / gone, elsewhere / gone)
        return iter(entries)

    monkeypatch.setattr(os, "scandir", racing)
    queue = FileQueue(home, fsync=False)
    queue.open()
    monkeypatch.setattr(os, "scandir", listing)
    assert taken == []
    assert queue.claim().name == "b.json"
    assert queue.claim() is None


def test_a_dead_workers_folder_recovered_by_another_starting_process_is_skipped(home: Home, monkeypatch) -> None:
    dead = home.processing / "w999999"
    dead.mkdir(parents=True)
    drop_incoming(home, make_incoming("a"), "a.json")
    os.rename(home.incoming / "a.json", dead / "a.json")
    listing = os.scandir

    def racing(path):
        if os.path.realpath(path) == os.path.realpath(dead) and dead.exists():
            os.rename(dead / "a.json", home.incoming / "a.json")  # the other process was quicker
            dead.rmdir()
        return listing(path)

    monkeypatch.setattr(os, "scandir", racing)
    queue = FileQueue(home, fsync=False)
    queue.open()
    monkeypatch.setattr(os, "scandir", listing)
    queue.rescan()
    assert queue.claim().name == "a.json"
    assert queue.claim() is None


def test_a_restart_after_a_clock_step_back_names_new_files_after_the_queued_ones(home: Home, monkeypatch) -> None:
    before = FileQueue(home, fsync=False)
    before.open()
    first = before.enqueue(make_incoming("first").to_json(), hint="console-c1")
    before.close()
    stepped = time.time_ns() - 60_000_000_000  # the clock went back a minute, then the gateway restarted
    monkeypatch.setattr(time, "time_ns", lambda: stepped)
    after = FileQueue(home, fsync=False)
    after.open()
    second = after.enqueue(make_incoming("second").to_json(), hint="console-c1")
    _set_mtime(second, stepped)
    after.notice(second.name)
    assert [after.claim().name, after.claim().name] == [first.name, second.name]


def test_files_other_programs_drop_in_the_backlog_are_ordered_by_mtime_among_the_gateways_own(home: Home) -> None:
    before = FileQueue(home, fsync=False)
    before.open()
    written = before.enqueue(make_incoming("gateway").to_json(), hint="console-c1")
    before.close()
    dropped = drop_incoming(home, make_incoming("program"), "zz-program.json")
    _set_mtime(dropped, int(written.name[:20]) - 1_000_000)  # dropped a millisecond before the gateway's own
    queue = FileQueue(home, fsync=False)
    queue.open()  # both found at start: the backlog
    assert [queue.claim().name, queue.claim().name] == [dropped.name, written.name]


def _drop_with_mtime(home: Home, name: str, mtime_ns: int) -> str:
    """Drops a payload whose mtime is already `mtime_ns` when it appears (set on the .tmp before the rename)."""
    tmp = home.incoming / f"{name}.tmp"
    tmp.write_bytes(make_incoming(name, conversationId="c1").to_json())
    _set_mtime(tmp, mtime_ns)
    tmp.rename(home.incoming / name)
    return name


def test_files_seen_arriving_are_ordered_by_first_sight_not_by_an_mtime_a_clock_step_moved(home: Home) -> None:
    queue = FileQueue(home, fsync=False)
    queue.open()
    now = time.time_ns()
    queue.notice(_drop_with_mtime(home, "a.json", now))
    queue.notice(_drop_with_mtime(home, "b.json", now - 3600 * 10**9))  # the clock stepped back one hour
    written = queue.enqueue(make_incoming("gateway").to_json(), hint="console-c1")
    queue.notice(written.name)
    queue.notice(_drop_with_mtime(home, "c.json", now - 7200 * 10**9))
    assert [queue.claim().name for _ in range(4)] == ["a.json", "b.json", written.name, "c.json"]


def test_files_seen_arriving_go_after_a_backlog_whose_mtimes_are_ahead_of_the_clock(home: Home) -> None:
    ahead = time.time_ns() + 3600 * 10**9  # queued before the clock stepped back one hour
    _drop_with_mtime(home, "old.json", ahead)
    queue = FileQueue(home, fsync=False)
    queue.open()
    queue.notice(_drop_with_mtime(home, "new.json", time.time_ns()))
    assert [queue.claim().name, queue.claim().name] == ["old.json", "new.json"]


def test_files_a_later_rescan_finds_go_after_those_already_seen_in_their_mtime_order(home: Home) -> None:
    queue = FileQueue(home, fsync=False)
    queue.open()
    now = time.time_ns()
    queue.notice(_drop_with_mtime(home, "seen.json", now))
    _drop_with_mtime(home, "missed-2.json", now - 1000)  # missed by the watch (an inotify overflow)
    _drop_with_mtime(home, "missed-1.json", now - 2000)
    queue.rescan()
    assert [queue.claim().name for _ in range(3)] == ["seen.json", "missed-1.json", "missed-2.json"]
