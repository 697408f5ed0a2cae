"""Usage limits per role (gateway/config/usage.py `role:`): a `per: sender` rule with `role` limits each sender
holding that role, replaces the rule for everyone, and a `match` for one sender still wins over it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.config.usage import LimitRule, UsageSettings
from orchestrator.usage.meter import LimitReached, UsageMeter
from orchestrator.usage.records import MemoryUsageRecords, Payer, Spent

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
ROLES = {"console/console/eve": ("guest",), "console/console/root": ("admin",)}
EVE = Payer("console/console/eve", "console/console/c1", "console")
ROOT = Payer("console/console/root", "console/console/c1", "console")
ADA = Payer("console/console/ada", "console/console/c1", "console")


def _meter(limits: list[dict[str, object]]) -> UsageMeter:
    settings = UsageSettings.model_validate({"limits": limits})
    return UsageMeter(MemoryUsageRecords(), settings, clock=lambda: NOW,
                      roles_of=lambda key: ROLES.get(key, ("member",)))


def test_a_roles_limit_applies_to_its_senders_only_and_replaces_the_general_one() -> None:
    meter = _meter([{"per": "sender", "day": {"turns": 3}},
                    {"per": "sender", "role": "guest", "day": {"turns": 1}},
                    {"per": "sender", "role": "admin", "day": {"turns": 10}},
                    {"per": "sender", "match": "console/console/root", "day": {"turns": 2}}])
    for payer in (EVE, ROOT, ADA):
        meter.record(payer, "claude", Spent(turns=1))
    with pytest.raises(LimitReached):
        meter.check(EVE, "claude")  # a guest: one turn a day
    meter.check(ADA, "claude")  # a member: the general three
    meter.record(ROOT, "claude", Spent(turns=1))
    with pytest.raises(LimitReached):
        meter.check(ROOT, "claude")  # the match for root (2) wins over the admin role's 10


def test_a_role_limit_is_per_sender() -> None:
    with pytest.raises(ValueError, match="per sender of that role"):
        LimitRule.model_validate({"per": "conversation", "role": "guest", "day": {"turns": 1}})
