"""Roles reloaded while running (gateway/runtime/reload.py): `roles:` and a profile's `roles`, `default_role`
and `approvers` are applied at once (a role taken away is gone for the next message), never waiting for a
restart; a profile's other keys still do."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.roles import RoleBook
from gateway.runtime.reload import SettingsReload, changed_sections, reloaded, restart_needed
from gateway.settings import Settings, load_settings


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


def test_a_reload_that_changes_who_holds_a_role_is_audited_once_per_change(tmp_path: Path) -> None:
    """Each grant and revocation is one record by `operator:settings.yaml`; two hosts reading the same version
    (one audit log) record it once; the same grant made again by a later edit is recorded again."""
    from gateway.backends.files.audit import FileAuditLog

    path = tmp_path / "settings.yaml"
    audit = FileAuditLog(tmp_path / "audit.jsonl", fsync=False)

    def write(profile: dict[str, object]) -> None:
        path.write_text(yaml.safe_dump({"channels": [{"id": "tg", "type": "fake", "token_env": "T", **profile}]}))

    write({"roles": {"admin": ["42"]}})
    start = load_settings(path)
    hosts = [SettingsReload(path, start, lambda new, running: [], audit=audit) for _ in range(2)]
    write({"roles": {"admin": ["7", "group:admins"]}, "default_role": "guest"})
    for host in hosts:
        assert host.poll()
    assert sorted((r.by, r.where, r.action, r.what) for r in audit.records()) == [
        ("operator:settings.yaml", "tg", "role.granted", "granted admin to 7"),
        ("operator:settings.yaml", "tg", "role.granted", "granted admin to group:admins"),
        ("operator:settings.yaml", "tg", "role.granted", "granted guest to (everyone else admitted)"),
        ("operator:settings.yaml", "tg", "role.revoked", "revoked admin from 42")]
    write({"roles": {"admin": ["42", "7", "group:admins"]}, "default_role": "guest", "allow_from": ["42", "7"]})
    assert hosts[0].poll()
    assert len(audit.records()) == 5 and "granted admin to 42" in {r.what for r in audit.records()}
    write({"roles": {"admin": ["42", "7", "group:admins"]}, "default_role": "guest", "allow_from": ["42"]})
    assert hosts[0].poll() and len(audit.records()) == 5  # who holds which role did not change: nothing recorded


def test_two_hosts_on_postgresql_record_a_role_change_once(db: str, tmp_path: Path) -> None:
    """Each host has its own connection to the database's audit log and reads the same edit: one record."""
    from gateway.backends.postgres.audit import PgAuditLog

    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({"channels": [{"id": "tg", "type": "fake", "roles": {"admin": ["42"]}}]}))
    start = load_settings(path)
    hosts = [SettingsReload(path, start, lambda new, running: [], audit=PgAuditLog.direct(db)) for _ in range(2)]
    path.write_text(yaml.safe_dump({"channels": [{"id": "tg", "type": "fake", "roles": {"admin": ["42", "7"]}}]}))
    for host in hosts:
        assert host.poll()
    assert [(r.by, r.action, r.what) for r in PgAuditLog.direct(db).records()] == [
        ("operator:settings.yaml", "role.granted", "granted admin to 7")]
