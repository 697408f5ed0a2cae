"""The dashboard of one running gateway: watches its events, reads its state, serves both over HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from gateway.approvals import describe, operator_answer
from gateway.audit import OPERATOR, AuditRecord, operator_answer_key
from gateway.dashboard import dashboard_token
from gateway.dashboard.metrics import Metrics
from gateway.dashboard.series import Minutes
from gateway.dashboard.server import Server, build_app
from gateway.dashboard.state import Activity
from gateway.plugin_manager import call_each
from gateway.stores import AUDIT, StoreKey
from gateway.telemetry.events import read_events

if TYPE_CHECKING:
    import pluggy

    from gateway.backends import Backend
    from gateway.backends.runtime import QueueView
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.dashboard")

SEED_EVENTS = 500
RUNS_SHOWN = 20
DEAD_SHOWN = 50
EVENTS_SHOWN = 30
AUDIT_SHOWN = 30
AUDIT_CACHE_S = 5.0  # the audit log is read at most this often (the file backend's is read whole)
SERIES_SEED_EVENTS = 20_000  # the log's tail the per-minute plots start from (its last ~20 MB at most)
SAMPLE_S = 20.0  # the queue's depth is sampled this often for its plot (and at each refresh)
SPEND_DAYS = 7
SPEND_CACHE_S = 60.0  # the usage totals are read at most this often (a query per day on PostgreSQL)
USAGE: StoreKey[Any] = StoreKey("usage")  # the orchestrator's per-day totals (orchestrator/usage/records.py)


@dataclass(frozen=True)
class Served:
    """What the dashboard reads of the gateway it serves (gateway/app.py builds it): no Gateway, only these."""

    home: Home
    settings: Settings
    """The settings the gateway started with (a reload changes nothing the dashboard shows)."""
    events: EventLog
    pm: pluggy.PluginManager
    channel_status: Mapping[str, dict[str, Any]]
    """Each channel's state, by profile id: the supervisor's, kept up to date as channels change."""
    started_at: str
    backend: Backend
    """The backend of the gateway's stores: the runs, approvals and audit records the page lists are read through it
    (and an answer given on the page is recorded in its audit log)."""
    view: QueueView
    """The queue as the backend shows it (the home's folders, or the database)."""


class Dashboard:
    """Serves the page, `/api/state` and `/metrics` for the gateway `served` describes; built before the
    gateway starts so that it sees every event."""

    def __init__(self, served: Served):
        self._served = served
        self.settings = served.settings.dashboard
        self.token = dashboard_token(self.settings)
        if self.token is not None:
            served.events.add_secret(self.token)
        self.view = served.view
        self.activity = Activity()
        self.activity.seed(read_events(served.home.events_file, limit=SEED_EVENTS))
        self.minutes = Minutes()
        self.minutes.seed(read_events(served.home.events_file, limit=SERIES_SEED_EVENTS))
        self._spend: tuple[float, dict[str, Any] | None] | None = None
        self._sampler: asyncio.Task[None] | None = None
        installed = [t for types in call_each(served.pm, "switchyard_channel_types") for t in types]
        self._metrics = Metrics(self._live, [p.type for p in served.settings.channels] + installed,
                                [p.id for p in served.settings.channels])
        served.events.observe(self._observe)
        self._server: Server | None = None
        self._approval_store: Any = None
        self._audit_log: Any = None  # False: this backend keeps none
        self._audited: tuple[float, list[dict[str, Any]]] | None = None
        self.url: str | None = None

    def _observe(self, event: dict[str, Any]) -> None:
        self.activity.observe(event)
        self._metrics.observe(event)
        self.minutes.observe(event)

    async def start(self) -> str | None:
        """Starts serving; returns the page's address. A port it cannot bind is logged and written as a
        `dashboard.failed` event, and the gateway runs on without a dashboard (None)."""
        server = Server(build_app(self, self.settings, self.token), self.settings)
        try:
            self.url = await server.start()
        except OSError as exc:
            log.error("dashboard: cannot listen on %s port %s: %s", self.settings.host, self.settings.port, exc)
            self._served.events.emit("dashboard.failed", reason=str(exc))
            await server.stop()
            return None
        self._server = server
        self._sampler = asyncio.create_task(self._sample(), name="dashboard-sampler")
        log.info("dashboard at %s", self.url)
        self._served.events.emit("dashboard.started", url=self.url)
        return self.url

    async def stop(self) -> None:
        """Stops serving."""
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
        if self._server is not None:
            await self._server.stop()

    # --- what the server reads (server.Source) -----------------------------------------------

    def redact(self, text: str) -> str:
        """Masks every secret the gateway knows of."""
        return self._served.events.redact(text)

    async def state(self) -> dict[str, Any]:
        """Everything the page shows, as JSON values (what `/api/state` answers)."""
        read = await asyncio.to_thread(self._read)
        return {
            **{k: v for k, v in read.items() if k != "processing"},
            "pid": os.getpid(), "started_at": self._served.started_at, "in_flight": self._in_flight(read),
            "channels": self._channels(), "heartbeats": self.activity.heartbeat_history(),
            "events": self.activity.recent_events(EVENTS_SHOWN), "plots": self.minutes.series(),
        }

    async def glance(self) -> dict[str, Any]:
        """The figures of the plots of the last 24 hours (what `/api/glance` draws)."""
        return {"plots": self.minutes.series(), "spend": await asyncio.to_thread(self._spent)}

    async def metrics(self) -> bytes:
        """The Prometheus text of every metric."""
        return await asyncio.to_thread(self._metrics.text)

    async def retry(self, names: list[str]) -> list[str]:
        """Puts dead letters back into the queue (KeyError naming any that is not one)."""
        retried = await asyncio.to_thread(self.view.retry, names)
        self._served.events.emit("dead_letter.retried", names=retried, reason="retried from the dashboard")
        return retried

    async def answer(self, approval_id: str, verdict: str) -> dict[str, Any]:
        """Allows or denies a pending tool approval for the turn waiting on it (KeyError for an unknown id);
        `won` is False when it was settled already (then `state` and `by` say how)."""
        done, won = await asyncio.to_thread(operator_answer, self._approvals(), approval_id, verdict, "dashboard")
        if won:
            await asyncio.to_thread(self._record_answer, done)
        return {"id": done.id, "won": won, "state": done.state, "allowed": done.allowed(), "by": done.answered_by}

    def _record_answer(self, approval: Any) -> None:
        """The audit record of an operator's answer from the page, whether or not a turn still waits for it: keyed
        by the approval (gateway.audit.operator_answer_key), so the waiting turn's own record of it is this one."""
        verdict = "allowed" if approval.allowed() else "denied"
        record = AuditRecord.new(by=OPERATOR, where="dashboard", action="approval.answer",
                                 what=f"{verdict} {approval.title}", key=operator_answer_key(approval.id),
                                 approval=approval.id, answered_by="dashboard")
        audit = self._audit()
        if audit is not None:
            audit.append(record)
            self._audited = None  # the table shows it at the next refresh

    def _audit(self) -> Any:
        """The backend's audit log (gateway.stores.AUDIT), opened once; None where no plugin keeps one."""
        if self._audit_log is None:
            try:
                self._audit_log = self._served.backend.store(AUDIT)
            except KeyError:
                self._audit_log = False
        return self._audit_log or None

    def _approvals(self) -> Any:
        if self._approval_store is None:
            self._approval_store = self._served.backend.approvals()
        return self._approval_store

    # --- reading ----------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        runs: list[dict[str, Any]] = []
        served = self._served
        for found in call_each(served.pm, "switchyard_recent_runs", events=served.events,
                               home=served.home, limit=RUNS_SHOWN, settings=served.settings,
                               backend=served.backend):
            runs.extend(found)
        runs.sort(key=lambda run: str(run.get("updatedAt")), reverse=True)
        approvals = [describe(approval) for approval in self._approvals().pending()]
        schedules: list[dict[str, Any]] = []
        for found in call_each(served.pm, "switchyard_schedules", events=served.events,
                               home=served.home, settings=served.settings, backend=served.backend):
            schedules.extend(found)
        queue = self.view.read(DEAD_SHOWN)
        self.minutes.sample_queue(queue["queue"])
        return {**queue, "runs": runs[:RUNS_SHOWN], "approvals": approvals, "schedules": schedules,
                "spend": self._spent(), "audit": self._recent_audit()}

    def _recent_audit(self) -> list[dict[str, Any]]:
        """The last AUDIT_SHOWN audit records, newest first (read at most every AUDIT_CACHE_S; none where the
        backend keeps no audit log, the last ones read while its database is away)."""
        now = time.monotonic()
        if self._audited is not None and now - self._audited[0] < AUDIT_CACHE_S:
            return self._audited[1]
        audit = self._audit()
        if audit is None:
            return []
        try:
            records = audit.records()
        except Exception as exc:
            log.debug("dashboard: cannot read the audit log: %s", exc)
            return self._audited[1] if self._audited is not None else []
        newest = sorted(records, key=lambda r: (r.at, r.id), reverse=True)[:AUDIT_SHOWN]
        self._audited = (now, [{"at": r.at, "by": r.by, "where": r.where, "action": r.action, "what": r.what}
                               for r in newest])
        return self._audited[1]

    def _spent(self) -> dict[str, Any] | None:
        """Spend per day by provider over the last SPEND_DAYS days (in the usage time zone), from the backend's
        usage totals (None where it keeps none); read at most every SPEND_CACHE_S."""
        now = time.monotonic()
        if self._spend is not None and now - self._spend[0] < SPEND_CACHE_S:
            return self._spend[1]
        try:
            records = self._served.backend.store(USAGE)
        except KeyError:  # no plugin keeps usage totals for this backend
            self._spend = (now, None)
            return None
        today = datetime.now(ZoneInfo(self._served.settings.usage.timezone)).date()
        try:
            spend = spend_per_day(records, today, SPEND_DAYS)
        except Exception as exc:  # a database away: the last figures stay, the next refresh tries again
            log.debug("dashboard: cannot read the usage totals: %s", exc)
            return self._spend[1] if self._spend is not None else None
        self._spend = (now, spend)
        return self._spend[1]

    async def _sample(self) -> None:
        """Samples the queue for its plot every SAMPLE_S, whether or not a page is open."""
        while True:
            try:
                live = await asyncio.to_thread(self.view.live)
                self.minutes.sample_queue(live["queue"])
            except Exception as exc:  # a database away: a gap in the plot
                log.debug("dashboard: cannot sample the queue: %s", exc)
            await asyncio.sleep(SAMPLE_S)

    def _in_flight(self, read: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages in flight: as the backend lists them, else those claimed here still in processing/."""
        if "in_flight" in read:
            self.activity.in_flight({job["name"] for job in read["in_flight"]})  # forgets the settled ones
            return list(read["in_flight"])
        return self.activity.in_flight(read["processing"])

    def _channels(self) -> list[dict[str, Any]]:
        status = self._served.channel_status
        return [{"profile": p.id, "type": p.type, "state": status.get(p.id, {}).get("state", "starting"),
                 "reason": status.get(p.id, {}).get("reason"), **self.activity.profile_counts(p.id)}
                for p in self._served.settings.channels]

    def _live(self) -> dict[str, Any]:
        """The figures `/metrics` reads at scrape time (on a worker thread)."""
        live = self.view.live()
        return {"queue": live["queue"], "in_flight": len(self._in_flight(live)),
                "channels": dict(self._served.channel_status), "heartbeat_last_ms": self.activity.last_rtt_ms()}


def spend_per_day(records: Any, today: date, days: int) -> dict[str, Any]:
    """What each provider spent (USD, tokens) on each of the `days` days up to `today`, oldest first, from the
    usage totals (orchestrator/usage/records.py UsageRecords, read as the backend hands it)."""
    listed = []
    for back in range(days - 1, -1, -1):
        day = today - timedelta(days=back)
        listed.append({"day": day.isoformat(), "providers": {
            key: {"usd": spent.usd, "tokens": spent.tokens_in + spent.tokens_out}
            for key, spent in records.table("provider", day, day)}})
    return {"days": listed}
