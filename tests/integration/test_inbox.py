"""The prompt inbox channel (plugins/inbox/): jobs from prompt files, idempotent intake, file movement."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import ChannelContext, ChannelProfile, IncomingPayload, OutgoingPayload
from gateway.home import Home
from gateway.settings import Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until
from plugins.inbox.channel import InboxChannel, parse_prompt

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """A sink that keeps what the channel enqueues."""

    def __init__(self, home: Home):
        self.home = home
        self.payloads: list[IncomingPayload] = []

    async def __call__(self, payload: IncomingPayload) -> Path:
        self.payloads.append(payload)
        return self.home.incoming / f"{payload.messageId}.json"


class NullOutbox:
    def write(self, payload: OutgoingPayload) -> Path:
        raise AssertionError("the inbox channel never writes replies")


@pytest.fixture
def events(home: Home) -> Iterator[EventLog]:
    log = EventLog(home.events_file)
    yield log
    log.close()


def _channel(home: Home, events: EventLog, **options: Any) -> InboxChannel:
    profile = ChannelProfile.model_validate({"id": "prompts", "type": "inbox", "workflow": "review",
                                             "settle_ms": 0, **options})
    context = ChannelContext(home=home, settings=Settings(channels=[profile]), profile=profile, events=events,
                             outbox=NullOutbox())
    return InboxChannel(profile, context)


def _prompt(home: Home, relative: str, text: str = "Please fix the login page.") -> Path:
    path = home.root / "inbox" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    past = time.time() - 5
    os.utime(path, (past, past))
    return path


def _final(payload: IncomingPayload, state: str, text: str = "all done") -> OutgoingPayload:
    job = {**payload.job.model_dump(mode="json"), "retries": 1} if payload.job else {}
    return OutgoingPayload.reply_to(payload, text, agent="x", timestamp=1, workflowRunId=job.get("job_id"),
                                    runState=state, job=job)


def test_prompt_paths_carry_repo_branch_timestamp_and_slug(tmp_path: Path) -> None:
    prompt = parse_prompt(tmp_path, tmp_path / "app" / "feature" / "x" / "20250101T120000_fix-login.md")
    assert prompt is not None
    assert (prompt.repo, prompt.branch, prompt.timestamp, prompt.slug) == ("app", "feature/x", "20250101T120000",
                                                                           "fix-login")
    assert prompt.job_id.startswith("j-20250101T120000-fix-login-")
    for wrong in ("app/20250101_x.md", "app/main/notes.txt", "app/main/nounderscore.md", "app/.git/a_b.md"):
        assert parse_prompt(tmp_path, tmp_path / wrong) is None


async def test_one_job_per_file_even_after_a_restart(home: Home, events: EventLog) -> None:
    path = _prompt(home, "app/main/20250101T120000_fix-login.md")
    sink = Recorder(home)
    assert len(await _channel(home, events).scan(sink)) == 1
    [payload] = sink.payloads
    job = payload.job.model_dump(mode="json") if payload.job else {}
    assert (payload.channel, payload.channelProfileId, payload.message) == ("inbox", "prompts", path.read_text())
    assert payload.messageId == job["job_id"] and payload.conversationId == "app/main"
    assert {k: job[k] for k in ("state", "repo", "branch", "slug", "retries", "source_timestamp")} == {
        "state": "queued", "repo": "app", "branch": "main", "slug": "fix-login", "retries": 0,
        "source_timestamp": "20250101T120000"}
    assert job["inbox_file"] == str(path.resolve()) and job["created_at"] == job["updated_at"]
    assert job["metadata"]["workflow"] == "review"
    assert await _channel(home, events).scan(sink) == []
    [created] = [e for e in read_events(home.events_file) if e["event"] == "job.created"]
    assert (created["job_id"], created["state"], created["repo"], created["branch"]) == (
        job["job_id"], "queued", "app", "main")
    assert created["queue_path"].endswith(".json") and created["inbox_file"] == job["inbox_file"]


async def test_a_file_still_being_written_waits(home: Home, events: EventLog) -> None:
    path = _prompt(home, "app/main/1_x.md")
    os.utime(path, None)
    sink = Recorder(home)
    assert await _channel(home, events, settle_ms=60000).scan(sink) == []


async def test_success_moves_the_file_to_processed(home: Home, events: EventLog) -> None:
    path = _prompt(home, "app/main/20250101T120000_fix-login.md")
    channel, sink = _channel(home, events), Recorder(home)
    await channel.scan(sink)
    [payload] = sink.payloads
    job_id = payload.messageId
    ack = OutgoingPayload.reply_to(payload, "Queued job", agent="x", timestamp=1)
    await channel.send(ack)
    assert path.exists()
    record = await channel.send(_final(payload, "done"))
    target = home.root / "processed" / "app" / "main" / job_id / path.name
    assert not path.exists() and target.read_text() == "Please fix the login page."
    assert (target.parent / "result.md").read_text() == "all done\n"
    assert record.detail["processed_path"] == str(target)
    [archived] = [e for e in read_events(home.events_file) if e["event"] == "job.archived"]
    assert (archived["job_id"], archived["state"], archived["archived_path"]) == (job_id, "done", str(target))
    assert archived["processed_path"] == str(target)
    await channel.send(_final(payload, "done"))
    assert target.exists() and len([e for e in read_events(home.events_file) if e["event"] == "job.archived"]) == 1


@pytest.mark.parametrize("policy", ["move", "leave"])
async def test_a_fatal_failure_follows_the_policy(home: Home, events: EventLog, policy: str) -> None:
    path = _prompt(home, "app/dev/2_broken.md")
    channel, sink = _channel(home, events, fatal_policy=policy), Recorder(home)
    await channel.scan(sink)
    [payload] = sink.payloads
    record = await channel.send(_final(payload, "failed_final", "it broke"))
    target = home.root / "failed" / "app" / "dev" / payload.messageId / path.name
    archived = [e for e in read_events(home.events_file) if e["event"] == "job.archived"]
    if policy == "move":
        assert target.exists() and not path.exists() and record.detail["archived_path"] == str(target)
        assert archived[0]["archived_path"] == str(target) and archived[0]["state"] == "failed_final"
    else:
        assert path.exists() and not target.exists() and archived == []
    assert await channel.scan(sink) == []


def test_an_unknown_fatal_policy_disables_the_profile(home: Home, events: EventLog) -> None:
    with pytest.raises(ValueError, match="fatal_policy must be leave or move"):
        _channel(home, events, fatal_policy="delete")


async def test_the_watcher_task_picks_up_new_files(home: Home, events: EventLog) -> None:
    channel, sink = _channel(home, events, poll_ms=20), Recorder(home)
    await channel.start(sink)
    try:
        _prompt(home, "app/main/3_new.md")
        await async_wait_until(lambda: sink.payloads, 5)
    finally:
        await channel.stop()


async def test_a_file_that_is_not_a_prompt_is_reported_once_and_listed_until_it_goes(home: Home,
                                                                                     events: EventLog) -> None:
    notes: list[tuple[str, str | None]] = []
    channel, sink = _channel(home, events), Recorder(home)
    channel.context.on_state = lambda state, note: notes.append((state, note))
    good = _prompt(home, "app/main/20250101T120000_fix-login.md")
    wrong = [_prompt(home, "app/main/notes.md"), _prompt(home, "README.md")]
    _prompt(home, "app/main/.draft_x.md.swp")
    _prompt(home, ".git/20250101_x.md")
    for _ in range(3):
        await channel.scan(sink)
    assert [p.message for p in sink.payloads] == [good.read_text()]
    ignored = [e for e in read_events(home.events_file) if e["event"] == "inbox.ignored"]
    assert sorted(e["file"] for e in ignored) == sorted(str(path) for path in wrong)
    assert all("<repo>/<branch>/<timestamp>_<slug>.md" in e["reason"] for e in ignored)
    [(state, note)] = notes
    assert state == "running" and note is not None and "2 file(s)" in note and "app/main/notes.md" in note
    for path in wrong:
        path.unlink()
    await channel.scan(sink)
    assert notes[-1] == ("running", None)


async def test_a_message_with_buttons_is_kept_with_them_as_a_numbered_list(home: Home, events: EventLog) -> None:
    _prompt(home, "app/main/20250101T120000_fix-login.md")
    channel, sink = _channel(home, events), Recorder(home)
    await channel.scan(sink)
    [payload] = sink.payloads
    question = OutgoingPayload.reply_to(payload, "Deploy now?", agent="x", timestamp=1,
                                        buttons=[{"id": "ap:a1:0", "label": "Yes"}, {"id": "ap:a1:1", "label": "No"}])
    await channel.send(question)
    saved = channel._load(payload.messageId) or {}
    assert saved["last_message"] == "Deploy now?\n\n1. Yes\n2. No\nReply 1 or 2"
