"""Roles reloaded while running (gateway/runtime/reload.py): `roles:` and a profile's `roles`, `default_role`
and `approvers` are applied at once (a role taken away is gone for the next message), never waiting for a
restart; a profile's other keys still do."""

from __future__ import annotations

from gateway.roles import RoleBook
from gateway.runtime.reload import changed_sections, reloaded, restart_needed
from gateway.settings import Settings


def _settings(profile: dict[str, object], roles: dict[str, object] | None = None) -> Settings:
    return Settings.model_validate({"roles": roles or {},
                                    "channels": [{"id": "tg", "type": "fake", "token_env": "T", **profile}]})


def test_a_role_taken_away_is_applied_while_running() -> None:
    running = _settings({"roles": {"admin": ["42"]}, "allow_from": ["42", "7"]})
    new = _settings({"roles": {"guest": ["42"]}, "default_role": "guest", "allow_from": ["42", "7"]},
                    roles={"reviewer": {"permissions": ["approval.answer"]}})
    applied = reloaded(running, new)
    assert restart_needed(applied, new) == []
    assert RoleBook(applied).grant("tg", "42").roles == ("guest",)
    assert RoleBook(applied).grant("tg", "7").roles == ("guest",)
    assert "reviewer" in RoleBook(applied).roles
    assert applied.channels[0].option("token_env") == "T"
    assert set(changed_sections(running, new)) == {"roles", "channels.tg.roles", "channels.tg.default_role"}


def test_approvers_removed_while_running_are_removed() -> None:
    running = _settings({"approvers": ["42"]})
    applied = reloaded(running, _settings({}))
    assert applied.channels[0].option("approvers") is None
    assert RoleBook(applied).grant("tg", "7").may("approval.answer")


def test_another_key_of_a_profile_still_waits_for_a_restart() -> None:
    running = _settings({"roles": {"admin": ["42"]}})
    new = _settings({"roles": {"admin": ["42"]}, "token_env": "OTHER"})
    assert restart_needed(reloaded(running, new), new) == ["channel tg: token_env"]
