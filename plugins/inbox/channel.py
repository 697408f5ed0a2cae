"""The prompt inbox channel (spec 003): prompt files become jobs, and a job's outcome moves its file."""

# `<root>/<repo>/<branch>/<timestamp>_<slug>.md` is enqueued once (its job id derives from repo,
# branch and file name; a ledger under `queue/state/inbox/<profile>/` remembers it across
# restarts). The orchestrator runs the profile's `workflow` with the file's text. While the job runs
# or waits for a retry the file stays where it is; the final result, delivered to `send()`, moves it
# to `<processed_root>/<repo>/<branch>/<job_id>/` (done) or, with `fatal_policy: move`, to
# `<failed_root>/<repo>/<branch>/<job_id>/` (failed_final or cancelled), next to a `result.md`.

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import (
    ChannelContext,
    ChannelProfile,
    DeliveryRecord,
    IncomingPayload,
    Job,
    OutgoingPayload,
    Sink,
    atomic_write,
    now_ms,
    numbered,
    safe_name,
    utc_now_iso,
)
from plugins.inbox import CHANNEL_TYPE

PROMPT_NAME = re.compile(r"^(?P<timestamp>[^_.][^_]*)_(?P<slug>[^/]+)\.md$")
FINAL_STATES = frozenset({"done", "failed_final", "cancelled"})
FATAL_POLICIES = ("leave", "move")
MISNAMED = "not a prompt file: expected <repo>/<branch>/<timestamp>_<slug>.md"

log = logging.getLogger("switchyard.inbox")


@dataclass(frozen=True)
class PromptFile:
    """One prompt file and the canonical metadata its path carries."""

    path: Path
    repo: str
    branch: str
    timestamp: str
    slug: str

    @property
    def job_id(self) -> str:
        """A stable job id from repo, branch and file name (the same file never makes two jobs)."""
        digest = hashlib.sha256(f"{self.repo}\0{self.branch}\0{self.path.name}".encode()).hexdigest()[:12]
        return f"j-{safe_name(f'{self.timestamp}-{self.slug}')[:48]}-{digest}"


def parse_prompt(root: Path, path: Path) -> PromptFile | None:
    """Reads repo, branch (may contain `/`), timestamp and slug from a path under `root`."""
    parts = path.relative_to(root).parts
    match = PROMPT_NAME.match(parts[-1]) if len(parts) >= 3 else None
    if match is None or any(part.startswith(".") for part in parts):
        return None
    return PromptFile(path, parts[0], "/".join(parts[1:-1]), match["timestamp"], match["slug"])


def find_prompts(root: Path, settle_sec: float) -> tuple[list[PromptFile], list[Path]]:
    """Prompt files under `root` not modified in the last `settle_sec`, in name order; and the settled
    files whose path is not a prompt's (hidden files and folders aside)."""
    found, misnamed = [], []
    cutoff = time.time() - settle_sec
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                if path.stat().st_mtime > cutoff:
                    continue
            except FileNotFoundError:
                continue
            prompt = parse_prompt(root, path)
            if prompt is not None:
                found.append(prompt)
            elif not any(part.startswith(".") for part in path.relative_to(root).parts):
                misnamed.append(path)
    return sorted(found, key=lambda p: (p.timestamp, str(p.path))), sorted(misnamed)


def move_into(source: Path, folder: Path) -> Path | None:
    """Moves `source` into `folder` (idempotent: an earlier move counts); None when the file is gone."""
    target = folder / source.name
    if not source.exists():
        return target if target.exists() else None
    folder.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), str(target))
    return target


class InboxChannel:
    """Watches the prompt inbox, enqueues one job per file, and files each job away when it ends."""

    name = CHANNEL_TYPE
    takes_receipts = False  # a job queue, not a chat: no "queued" receipts

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        home = context.home
        self.profile_id = profile.id
        self.context = context
        self.root = home.resolve(str(profile.option("root", "inbox")))
        self.processed_root = home.resolve(str(profile.option("processed_root", "processed")))
        self.failed_root = home.resolve(str(profile.option("failed_root", "failed")))
        self.workflow = profile.option("workflow")
        self.fatal_policy = str(profile.option("fatal_policy", "move"))
        if self.fatal_policy not in FATAL_POLICIES:
            raise ValueError(f"channel {profile.id}: fatal_policy must be leave or move, not {self.fatal_policy!r}")
        self.poll_sec = float(profile.option("poll_ms", 1000)) / 1000
        self.settle_sec = float(profile.option("settle_ms", 200)) / 1000
        self.jobs = home.state / "inbox" / safe_name(profile.id)
        self._task: asyncio.Task[None] | None = None
        self._misnamed: list[str] = []  # files under the root that are not prompts, as already reported

    async def start(self, sink: Sink) -> None:
        """Creates the inbox and ledger folders and starts watching."""
        for folder in (self.root, self.jobs):
            folder.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._watch(sink), name=f"inbox:{self.profile_id}")

    async def _watch(self, sink: Sink) -> None:
        while True:
            try:
                await self.scan(sink)
            except OSError as exc:
                self.context.events.emit("inbox.error", channel=CHANNEL_TYPE, profile=self.profile_id,
                                         reason=str(exc))
            await asyncio.sleep(self.poll_sec)

    async def scan(self, sink: Sink) -> list[str]:
        """Enqueues every settled prompt file that has no job yet; returns the new job ids."""
        created = []
        prompts, misnamed = await asyncio.to_thread(find_prompts, self.root, self.settle_sec)
        for prompt in prompts:
            if not self._job_path(prompt.job_id).exists():
                await self._enqueue(sink, prompt)
                created.append(prompt.job_id)
        self._report_misnamed(misnamed)
        return created

    def _report_misnamed(self, misnamed: list[Path]) -> None:
        """Tells of each file that is not a prompt once (log, event), and lists them in `status`."""
        names = [str(path.relative_to(self.root)) for path in misnamed]
        if names == self._misnamed:
            return
        for name in sorted(set(names) - set(self._misnamed)):
            log.warning("inbox %s: ignoring %s: %s", self.profile_id, self.root / name, MISNAMED)
            self.context.events.emit("inbox.ignored", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     file=str(self.root / name), reason=MISNAMED)
        self._misnamed = names
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        self.context.note(f"ignoring {len(names)} file(s) ({shown}): {MISNAMED}" if names else None)

    async def _enqueue(self, sink: Sink, prompt: PromptFile) -> None:
        text = prompt.path.read_text(encoding="utf-8", errors="replace")
        now = utc_now_iso()
        job = Job(job_id=prompt.job_id, repo=prompt.repo, branch=prompt.branch, slug=prompt.slug,
                  timestamp=prompt.timestamp, inbox_file=str(prompt.path.resolve()), source_timestamp=prompt.timestamp,
                  metadata={"trigger_source": CHANNEL_TYPE, "profile": self.profile_id, "workflow": self.workflow},
                  ).model_copy(update={"state": "queued", "created_at": now, "updated_at": now, "retries": 0})
        conversation = f"{prompt.repo}/{prompt.branch}"
        queued = await sink(IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender="inbox", senderId=conversation,
            message=text, timestamp=now_ms(), messageId=prompt.job_id, conversationId=conversation, job=job))
        record = job.model_dump(mode="json")
        self._save(record)
        self.context.events.emit("job.created", **self._event_fields(record), queue_path=str(queued),
                                 inbox_file=job.inbox_file, slug=prompt.slug, created_at=now, retries=0,
                                 source_timestamp=prompt.timestamp)

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Receives a job's messages; the final one (`runState` done/failed_final/cancelled) files it away."""
        extra = outgoing.model_extra or {}
        given = outgoing.job.model_dump(mode="json", exclude_none=True) if outgoing.job is not None else {}
        job_id = str(given.get("job_id") or outgoing.messageId)
        known = self._load(job_id) or {}
        job = {**given, **known}
        state = extra.get("runState")
        if known.get("state") in FINAL_STATES:  # a redelivered final result: already filed away
            return DeliveryRecord(platform_ids=[job_id], detail={"state": known["state"]})
        text = numbered(outgoing.message, outgoing.buttons)  # a job file has no buttons: a numbered list
        job.update(updated_at=utc_now_iso(), run_id=outgoing.workflowRunId, last_message=text[:2000])
        if state not in FINAL_STATES:
            self._save(job)
            return DeliveryRecord(platform_ids=[job_id], detail={"state": state})
        job.update(state=state, retries=given.get("retries", job.get("retries", 0)))
        await asyncio.to_thread(self._file_away, job, str(state), text)
        return DeliveryRecord(platform_ids=[job_id], detail={"state": state, "processed_path": job.get(
            "processed_path"), "archived_path": job.get("archived_path")})

    def _file_away(self, job: dict[str, Any], state: str, result: str) -> None:
        source = Path(str(job.get("inbox_file") or ""))
        where = Path(safe_name(str(job.get("repo", "_")))) / Path(*[safe_name(p) for p in
                                                                  str(job.get("branch", "_")).split("/")])
        moved: Path | None = None
        if state == "done":
            moved = move_into(source, self.processed_root / where / safe_name(job["job_id"]))
            job["processed_path"] = str(moved) if moved else None
        elif self.fatal_policy == "move":
            moved = move_into(source, self.failed_root / where / safe_name(job["job_id"]))
            job["archived_path"] = str(moved) if moved else None
        if moved is not None:
            atomic_write(moved.parent / "result.md", (result.rstrip() + "\n").encode(), fsync=False)
        self._save(job)
        if moved is not None:
            self.context.events.emit("job.archived", **self._event_fields(job), archived_path=str(moved),
                                     processed_path=job.get("processed_path"), inbox_file=str(source))

    def _event_fields(self, job: dict[str, Any]) -> dict[str, Any]:
        return {"job_id": job["job_id"], "state": job.get("state"), "repo": job.get("repo"),
                "branch": job.get("branch"), "channel": CHANNEL_TYPE,
                "conversation": f"{job.get('repo')}/{job.get('branch')}"}

    def _job_path(self, job_id: str) -> Path:
        return self.jobs / f"{safe_name(job_id)}.json"

    def _load(self, job_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._job_path(job_id).read_bytes())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _save(self, job: dict[str, Any]) -> None:
        self.jobs.mkdir(parents=True, exist_ok=True)
        atomic_write(self._job_path(str(job["job_id"])), json.dumps(job, indent=2).encode(), fsync=False)

    async def stop(self) -> None:
        """Stops watching (queued jobs and their files stay as they are)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
