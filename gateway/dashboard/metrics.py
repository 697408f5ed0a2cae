"""Prometheus metrics of a running gateway: counters fed by its events, gauges read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

OTHER = "other"  # the `channel` label of every channel type not known to this gateway
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

Snapshot = Callable[[], dict[str, Any]]


class Metrics:
    """The gateway's metrics in a registry of their own (never the process-global one).

    A `channel` label is one of `channels` (the types configured or installed), else `other`: a payload
    file naming any channel it likes cannot add series without end."""

    def __init__(self, live: Snapshot, channels: Iterable[str], profiles: Iterable[str] = ()):
        self.channels = frozenset(channels)
        self.profiles = frozenset(profiles)
        self.registry = CollectorRegistry(auto_describe=True)
        counter = _factory(Counter, self.registry)
        self.claimed = counter("switchyard_messages_claimed", "Messages claimed from incoming/", ["channel"])
        self.answered = counter("switchyard_messages_answered", "Messages answered", ["channel"])
        self.failed = counter("switchyard_messages_failed", "Messages dead-lettered after their last attempt",
                              ["channel"])
        self.invalid = counter("switchyard_messages_invalid", "Files refused as invalid payloads", [])
        self.retries = counter("switchyard_message_retries", "Message attempts that failed and will be retried",
                               ["channel"])
        self.sent = counter("switchyard_replies_sent", "Replies delivered to a channel", ["channel"])
        self.delivery_retries = counter("switchyard_delivery_retries", "Reply deliveries retried",
                                        ["channel", "rate_limited"])
        self.dead = counter("switchyard_dead_letters", "Payloads moved to failed/", ["kind"])
        self.usd = counter("switchyard_usage_usd", "What agent turns cost, as their CLIs reported it",
                           ["provider", "profile"])
        self.tokens = counter("switchyard_usage_tokens", "Tokens agent turns used, as their CLIs reported them",
                              ["provider", "profile", "direction"])
        self.turns = counter("switchyard_usage_turns", "Agent turns counted against a payer", ["provider", "profile"])
        self.limited = counter("switchyard_usage_limit_reached", "Turns refused because a spending limit was reached",
                               ["per"])
        histogram = _factory(Histogram, self.registry)
        self.processing = histogram("switchyard_processing_duration_seconds",
                                    "Time from a message's start to its answer", ["channel"])
        self.provider = histogram("switchyard_provider_duration_seconds", "Provider (agent CLI) run time",
                                  ["kind"])
        self.delivery = histogram("switchyard_delivery_duration_seconds", "Time a channel took to send a reply",
                                  ["channel"])
        self.heartbeat = histogram("switchyard_heartbeat_rtt_seconds", "Heartbeat round trip through the loop",
                                   ["profile"])
        self.registry.register(_LiveCollector(live))

    def observe(self, event: dict[str, Any]) -> None:
        """Counts one event of the gateway's event log."""
        name = event.get("event")
        handler = _HANDLERS.get(name) if isinstance(name, str) else None
        if handler is not None:
            handler(self, event)

    def channel(self, event: dict[str, Any]) -> str:
        """The `channel` label of an event: its channel when known, else `other`."""
        channel = event.get("channel")
        return channel if isinstance(channel, str) and channel in self.channels else OTHER

    def profile(self, event: dict[str, Any]) -> str:
        """The `profile` label of an event: a configured channel profile, else `other`."""
        profile = event.get("profile")
        return profile if isinstance(profile, str) and profile in self.profiles else OTHER

    def text(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


def _factory(kind: Any, registry: CollectorRegistry) -> Callable[..., Any]:
    def make(name: str, doc: str, labels: list[str]) -> Any:
        extra = {"buckets": DURATION_BUCKETS} if kind is Histogram else {}
        return kind(name, doc, labels, registry=registry, **extra)
    return make


def _seconds(event: dict[str, Any], key: str) -> float | None:
    value = event.get(key)
    return float(value) / 1000 if isinstance(value, int | float) else None


def _is_message(event: dict[str, Any]) -> bool:
    return event.get("kind") == "message"


def _succeeded(m: Metrics, e: dict[str, Any]) -> None:
    if _is_message(e):
        m.answered.labels(m.channel(e)).inc()
        if (took := _seconds(e, "duration_ms")) is not None:
            m.processing.labels(m.channel(e)).observe(took)


def _failed_final(m: Metrics, e: dict[str, Any]) -> None:
    if _is_message(e):
        m.failed.labels(m.channel(e)).inc()
        m.dead.labels("message").inc()


def _retryable(m: Metrics, e: dict[str, Any]) -> None:
    if _is_message(e):
        m.retries.labels(m.channel(e)).inc()


def _invalid(m: Metrics, e: dict[str, Any]) -> None:
    m.invalid.inc()
    m.dead.labels("invalid").inc()


def _sent(m: Metrics, e: dict[str, Any]) -> None:
    m.sent.labels(m.channel(e)).inc()
    if (took := _seconds(e, "duration_ms")) is not None:
        m.delivery.labels(m.channel(e)).observe(took)


def _selector(m: Metrics, e: dict[str, Any]) -> None:
    if (took := _seconds(e, "duration_ms")) is not None:
        m.provider.labels("selector").observe(took)


def _step(m: Metrics, e: dict[str, Any]) -> None:
    if (took := _seconds(e, "duration_ms")) is not None and e.get("step_kind") == "agent":
        m.provider.labels("step").observe(took)


def _usage(m: Metrics, e: dict[str, Any]) -> None:
    """One agent turn's spending (`usage.recorded`); its provider is one the orchestrator's settings name (a bounded
    set: an unknown name never runs), its profile is bounded by the configured ones."""
    labels = (str(e.get("provider") or "-"), m.profile(e))
    m.turns.labels(*labels).inc()
    if isinstance(usd := e.get("usd"), int | float) and usd > 0:
        m.usd.labels(*labels).inc(usd)
    for direction in ("in", "out"):
        if isinstance(count := e.get(f"tokens_{direction}"), int) and count > 0:
            m.tokens.labels(*labels, direction).inc(count)


def _heartbeat(m: Metrics, e: dict[str, Any]) -> None:
    if (took := _seconds(e, "rtt_ms")) is not None:
        m.heartbeat.labels(str(e.get("profile") or "-")).observe(took)


_HANDLERS: dict[str, Callable[[Metrics, dict[str, Any]], None]] = {
    "message.claimed": lambda m, e: m.claimed.labels(m.channel(e)).inc(),
    "job.succeeded": _succeeded,
    "job.failed.final": _failed_final,
    "job.failed.retryable": _retryable,
    "message.invalid": _invalid,
    "outgoing.sent": _sent,
    "outgoing.retry": lambda m, e: m.delivery_retries.labels(m.channel(e), str(bool(e.get("rate_limited"))).lower())
    .inc(),
    "outgoing.failed": lambda m, e: m.dead.labels("reply").inc(),
    "selector.decided": _selector,
    "selector.failed": _selector,
    "step.completed": _step,
    "usage.recorded": _usage,
    "usage.limit_reached": lambda m, e: m.limited.labels(str(e.get("kind") or "-")).inc(),
    "heartbeat.ok": _heartbeat,
    "heartbeat.alert": _heartbeat,
}


class _LiveCollector(Collector):
    """Gauges read when Prometheus scrapes: queue depths and ages, in-flight count, channels up."""

    def __init__(self, live: Snapshot):
        self._live = live

    def collect(self) -> Iterator[Metric]:
        live = self._live()
        depth = GaugeMetricFamily("switchyard_queue_depth", "Payload files per queue folder", labels=["folder"])
        age = GaugeMetricFamily("switchyard_queue_oldest_age_seconds", "Age of the oldest file per queue folder",
                                labels=["folder"])
        for folder in live["queue"]:
            depth.add_metric([folder["folder"]], folder["depth"])
            if folder.get("oldest_age_s") is not None:
                age.add_metric([folder["folder"]], folder["oldest_age_s"])
        yield depth
        yield age
        yield GaugeMetricFamily("switchyard_messages_in_flight", "Messages claimed and not yet settled",
                                value=live["in_flight"])
        up = GaugeMetricFamily("switchyard_channel_up", "1 when a channel profile is running, else 0",
                               labels=["profile", "type"])
        for profile, info in live["channels"].items():
            up.add_metric([profile, str(info.get("type"))], 1 if info.get("state") == "running" else 0)
        yield up
        rtt = GaugeMetricFamily("switchyard_heartbeat_last_rtt_seconds", "The last heartbeat round trip",
                                labels=["profile"])
        for profile, ms in live["heartbeat_last_ms"].items():
            rtt.add_metric([profile], ms / 1000)
        yield rtt
