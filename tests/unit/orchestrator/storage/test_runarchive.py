"""orchestrator/storage/files/runarchive.py, through the file run store: settled runs kept as lines of a per-day log and
listed from the end of its index, across crashes, a lost or corrupt index and retention."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.home import Home
from orchestrator.execution.coordination import Coordination
from orchestrator.runs.base import SPARE_DIR, SPARE_FOLDERS
from orchestrator.runs.jobs import parse_iso
from orchestrator.runs.retention import prune_runs
from orchestrator.runs.state import Conversation, RunState, StepState
from orchestrator.storage.files.runarchive import RECORD
from orchestrator.storage.files.runs import RunStore


def _chat_run(index: int, day: str = "20231114") -> RunState:
    message = {"channel": "console", "sender": "Ada", "senderId": "ada", "message": f"hello {index}",
               "timestamp": 1_700_000_000_000, "messageId": f"m{index}", "conversationId": "c1"}
    return RunState(runId=f"r-{day}-000000-{index:08x}", workflowId="chat", orchestratorId="main",
                    message=message,
                    conversation=Conversation(channel="console", conversationId="c1"),
                    steps={"Reply": StepState(kind="agent", agent="echo")})


def _finished(store: RunStore, index: int, day: str = "20231114") -> RunState:
    """A one-step run created, run and ended with its result handed over (not yet settled)."""
    run = store.create(_chat_run(index, day), None, durable=False)
    run = store.transition(run, "running", save=False)
    run = store.update_step(run, "Reply", status="completed", output=f"You said: hello {index}", exitCode=0)
    run = store.transition(run, "done", save=False)
    return store.save(run.model_copy(update={"delivery": "reply"}))


def _settled(store: RunStore, index: int, day: str = "20231114") -> RunState:
    run = _finished(store, index, day)
    store.settle(run)
    return run


def _archive(home: Home) -> Path:
    return home.runs / ".archive"


def _ids(runs: list[RunState]) -> list[str]:
    return [run.runId for run in runs]


def test_a_settled_chat_run_is_one_line_and_reads_back_in_another_process(home: Home) -> None:
    run = _settled(RunStore(home, fsync=False), 1)
    assert not (home.runs / run.runId).exists()
    assert sorted(os.listdir(home.runs)) == [".archive", SPARE_DIR]  # and one emptied folder, for the next run
    assert [os.listdir(spare) for spare in (home.runs / SPARE_DIR).iterdir()] == [[]]
    other = RunStore(home, fsync=False)  # nothing in memory: read from the archive
    assert other.load(run.runId) == run
    events = [event["event"] for event in other.events(run.runId)]
    assert events[0] == "run.created" and events[-2:] == ["step.completed", "run.state"]
    assert other.stored_at(run.runId) == str(_archive(home) / "2023-11-14.jsonl")
    assert other.active_for("console/console/c1") is None and other.unfinished() == []
    assert other.needing_recovery() == []


def test_a_run_that_keeps_files_stays_a_folder(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = _finished(store, 1)
    (store.made(store.folder(run.runId) / "outputs") / "Reply.txt").write_text("a long answer")
    store.settle(run)
    assert (home.runs / run.runId / "state.json").exists()
    assert _ids(RunStore(home, fsync=False).newest(0)[0]) == [run.runId]


def test_an_unfinished_run_is_never_settled(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = store.create(_chat_run(1), "console/console/c1")
    store.settle(run)
    assert (home.runs / run.runId / "state.json").exists()
    assert RunStore(home, fsync=False).active_for("console/console/c1") == run


def test_listing_is_newest_first_across_folders_and_days(home: Home) -> None:
    store = RunStore(home, fsync=False)
    made = [_settled(store, index, day="20231114" if index % 3 else "20231115") for index in range(30)]
    waiting = store.create(_chat_run(30), None)
    other = RunStore(home, fsync=False)
    runs, matched = other.newest(5)
    newest_first = sorted([*made, waiting], key=lambda run: (run.createdAt, run.runId), reverse=True)
    assert _ids(runs) == _ids(newest_first[:5]) and waiting.runId in _ids(runs)
    assert matched == 31
    every, _ = other.newest(0)
    assert [run.createdAt for run in every] == sorted((run.createdAt for run in every), reverse=True)
    assert len(set(_ids(every))) == 31
    done, matched_done = other.newest(3, states={"queued"})
    assert _ids(done) == [waiting.runId] and matched_done == 1
    since = parse_iso(made[20].createdAt)
    recent = [run for run in newest_first if parse_iso(run.createdAt) >= since]
    assert other.newest(3, since=since) == (recent[:3], len(recent))
    assert other.newest(0, since=since, states={"done"}) == (recent[1:], len(recent) - 1)
    assert _ids(other.recent(2))[0] == waiting.runId


def test_listing_the_newest_reads_only_the_end_of_the_index(home: Home) -> None:
    store = RunStore(home, fsync=False)
    for index in range(40):
        _settled(store, index)
    index_file = _archive(home) / "2023-11-14.idx"
    data = bytearray(index_file.read_bytes())
    data[RECORD * 2:RECORD * 3] = b"x" * (RECORD - 1) + b"\n"  # an old record no short listing reaches
    index_file.write_bytes(bytes(data))
    runs, matched = RunStore(home, fsync=False).newest(5)
    assert _ids(runs) == [_chat_run(index).runId for index in (39, 38, 37, 36, 35)] and matched == 40
    assert index_file.read_bytes() == bytes(data)  # never read, so never found corrupt and rebuilt


def test_a_missing_or_corrupt_index_is_rebuilt_from_the_log(home: Home) -> None:
    store = RunStore(home, fsync=False)
    created = [_settled(store, index).runId for index in range(10)]
    index_file = _archive(home) / "2023-11-14.idx"
    index_file.unlink()
    runs, matched = RunStore(home, fsync=False).newest(3)
    assert _ids(runs) == created[:-4:-1] and matched == 10
    intact = index_file.read_bytes()
    assert len(intact) == 10 * RECORD
    index_file.write_bytes(intact[:RECORD * 4] + b"not a record".ljust(RECORD - 1) + b"\n" + intact[RECORD * 5:])
    assert _ids(RunStore(home, fsync=False).newest(0)[0]) == created[::-1]
    assert index_file.read_bytes() == intact
    index_file.write_bytes(intact[:-10])  # a record torn by a crash
    assert _ids(RunStore(home, fsync=False).newest(0)[0]) == created[::-1]
    assert index_file.read_bytes() == intact


def test_a_crash_between_the_line_and_the_folder_removal_keeps_the_run_once(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = _settled(store, 1)
    store.save(run)  # as if the crash came before the folder went: the run is in both places
    other = RunStore(home, fsync=False)
    assert _ids(other.newest(0)[0]) == [run.runId] and other.newest(5)[1] == 1
    other.tidy()
    assert not (home.runs / run.runId).exists()
    assert len((_archive(home) / "2023-11-14.jsonl").read_bytes().splitlines()) == 1
    assert _ids(RunStore(home, fsync=False).newest(0)[0]) == [run.runId]


def test_a_line_torn_by_a_crash_is_cut_off_and_its_run_archived_again(home: Home) -> None:
    store = RunStore(home, fsync=False)
    first = _settled(store, 1)
    torn = _finished(store, 2)  # ended, its result handed over, its line half written when the power went
    log = _archive(home) / "2023-11-14.jsonl"
    with log.open("ab") as handle:
        handle.write(b'{"run":{"runId":"' + torn.runId.encode() + b'","workflowId":"ch')
    other = RunStore(home, fsync=False)
    assert _ids(other.newest(0)[0]) == [torn.runId, first.runId]
    other.tidy()  # at start: the torn tail is cut, the run archived and its folder removed
    assert not (home.runs / torn.runId).exists()
    lines = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [line["run"]["runId"] for line in lines] == [first.runId, torn.runId]
    assert RunStore(home, fsync=False).load(torn.runId) == torn


def test_a_line_whose_record_was_lost_is_indexed_from_the_log(home: Home) -> None:
    store = RunStore(home, fsync=False)
    first = _settled(store, 1)
    second = _settled(store, 2)
    index_file = _archive(home) / "2023-11-14.idx"
    index_file.write_bytes(index_file.read_bytes()[:RECORD])  # the crash came between the line and its record
    other = RunStore(home, fsync=False)
    assert _ids(other.newest(5)[0]) == [second.runId, first.runId] and other.newest(5)[1] == 2
    assert other.load(second.runId) == second
    assert len(index_file.read_bytes()) == 2 * RECORD


def test_retention_removes_a_day_once_all_its_runs_expired(home: Home) -> None:
    store = RunStore(home, fsync=False)
    ids = [_settled(store, index).runId for index in range(3)]
    kept = _settled(store, 3, day="20231115").runId
    coordination = Coordination(home)
    now = datetime.now(UTC)
    assert prune_runs(home, store, coordination, 30, now=now + timedelta(days=29)) == []
    removed = prune_runs(home, store, coordination, 30, now=now + timedelta(days=31))
    assert sorted(removed) == sorted([*ids, kept])
    other = RunStore(home, fsync=False)
    assert other.newest(5) == ([], 0) and other.load(ids[0]) is None and other.load(kept) is None
    assert os.listdir(_archive(home)) == []
    assert prune_runs(home, store, coordination, 0, now=now + timedelta(days=400)) == []


def test_a_run_is_found_by_id_after_others_appended_or_rebuilt_the_index_since_it_was_read(home: Home) -> None:
    reader, writer = RunStore(home, fsync=False), RunStore(home, fsync=False)  # two processes sharing the home
    first = _settled(writer, 1)
    assert reader.load(first.runId) == first and reader.load(_chat_run(2).runId) is None  # the index read once
    second = _settled(writer, 2)  # appended by the other process after that read
    assert reader.load(second.runId) == second
    index = _archive(home) / "2023-11-14.idx"
    index.unlink()  # lost, then rebuilt from the log (a new file) by the other process's next run
    third = _settled(writer, 3)
    assert [reader.load(run.runId) for run in (first, second, third)] == [first, second, third]
    assert reader.load(_chat_run(4).runId) is None


def test_a_day_pruned_and_begun_again_is_read_afresh_by_a_store_that_had_read_it(home: Home) -> None:
    reader, writer = RunStore(home, fsync=False), RunStore(home, fsync=False)
    old = [_settled(writer, index) for index in range(2)]
    assert [reader.load(run.runId) for run in old] == old  # its index read: 2 records
    assert prune_runs(home, writer, Coordination(home), 30, now=datetime.now(UTC) + timedelta(days=31))
    late = [_settled(writer, index) for index in range(10, 13)]  # late messages of that day: a new index, longer
    assert [reader.load(run.runId) for run in late] == late
    assert [reader.load(run.runId) for run in old] == [None, None]


def test_a_removed_run_folder_is_made_again_with_its_workspace_when_its_id_runs_again(home: Home) -> None:
    store = RunStore(home, fsync=False)
    other = store.made(store.folder("r-20231114-000000-0000000a") / "workspace")
    run = store.create(_chat_run(1), None)
    workspace = store.made(store.folder(run.runId) / "workspace")
    assert store.remove(run.runId) and not workspace.exists()
    store.create(run, None)  # a refused run's message came back (`dead retry`): the same id runs afresh
    assert store.made(workspace).is_dir() and (store.folder(run.runId) / "state.json").is_file()
    assert other.is_dir()  # another run's folders are left alone


def test_a_settled_runs_emptied_folder_is_the_next_runs_and_nothing_of_it_is_left_inside(home: Home) -> None:
    store = RunStore(home, fsync=False)
    first = _finished(store, 1)
    workspace = store.made(store.folder(first.runId) / "workspace")
    store.settle(first)
    [spare] = os.listdir(home.runs / SPARE_DIR)
    spare_inode = os.stat(home.runs / SPARE_DIR / spare).st_ino
    assert os.listdir(home.runs / SPARE_DIR / spare) == ["workspace"] and not workspace.exists()
    second = store.create(_chat_run(2), None)
    folder = home.runs / second.runId
    assert os.stat(folder).st_ino == spare_inode and os.listdir(home.runs / SPARE_DIR) == []
    assert sorted(os.listdir(folder)) == ["events.jsonl", "state.json", "workspace"]
    assert os.listdir(folder / "workspace") == []
    assert [e["event"] for e in store.events(second.runId)] == ["run.created"]  # none of the first run's
    assert store.load(first.runId) == first  # archived, read back from its line


def test_a_folder_holding_files_in_a_subfolder_is_deleted_not_kept(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = store.create(_chat_run(1), None)
    (store.made(store.folder(run.runId) / "workspace") / "notes.txt").write_text("kept by the agent")
    assert store.remove(run.runId)
    assert not (home.runs / run.runId).exists() and os.listdir(home.runs / SPARE_DIR) == []


def test_spare_folders_are_bounded_and_a_gone_process_s_are_dropped_at_start(home: Home) -> None:
    store = RunStore(home, fsync=False)
    runs = [store.create(_chat_run(index), None) for index in range(SPARE_FOLDERS + 3)]
    assert all(store.remove(run.runId) for run in runs)
    assert len(os.listdir(home.runs / SPARE_DIR)) == SPARE_FOLDERS
    (home.runs / SPARE_DIR / "999999999-0").mkdir()  # left by a process that died
    RunStore(home, fsync=False).tidy()
    spares = os.listdir(home.runs / SPARE_DIR)
    assert len(spares) == SPARE_FOLDERS and all(name.startswith(f"{os.getpid()}-") for name in spares)
    assert store.all_runs() == [] and store.newest(5) == ([], 0)  # a spare is never taken for a run
