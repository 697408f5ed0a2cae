"""Roles: who may do what, per channel profile (docs/roles.md). The model and the resolution, written once for the
gateway and the orchestrator; the checks that use them before anything starts are orchestrator/chat/access.py.

A sender's roles come only from settings.yaml (a profile's `roles:`, else its `default_role:`), never from a
message: nothing a chat user sends can raise their own role. A platform group is named `group:<id>` in a
profile's `roles:` and matches the ids a channel puts in the payload's `senderGroups` (Telegram chat
administrators, Discord roles and Slack user groups: gateway/channelkit/groups.py and each plugin's groups.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.settings import ChannelProfile, Settings

ALL = "*"
FUNCTION_PREFIX = "function:"
GROUP_PREFIX = "group:"
GROUPS_FIELD = "senderGroups"
"""The payload key (an extra, kept verbatim) where a channel lists the platform groups its sender is in."""

PERMISSIONS: dict[str, str] = {
    "workflow.start": "start a workflow without a `mode: edit` agent",
    "workflow.start_edit": "start a workflow with a `mode: edit` agent (one that changes files)",
    "function.invoke": "invoke any command_invoke function (`function:<name>`: that one only)",
    "approval.answer": "answer the tool approvals asked in the conversation",
    "turn.stop_others": "/stop or /cancel what another sender started",
    "usage.others": "/usage <sender id> about another sender",
    "run.any_conversation": "ask about (or stop) a run of another conversation by its workflowRunId",
}
"""Every permission a role may hold, with what it lets a sender do (also `*`: all, and `function:<name>`)."""

BUILTIN_ROLES: dict[str, tuple[str, ...]] = {
    "owner": (ALL,),
    "admin": tuple(PERMISSIONS),
    "member": ("workflow.start", "function.invoke", "approval.answer"),
    "guest": ("workflow.start", f"{FUNCTION_PREFIX}list_workflows"),
}
"""The roles every install has; settings.yaml `roles:` may redefine them or add more."""

DEFAULT_ROLE = "member"
"""The role of a sender a profile admits but does not list, when the profile names no `default_role:`."""
CONSOLE_ROLE = "owner"
"""The default role on a `type: console` profile: whoever types at the gateway's terminal (or runs `switchyard
send`) can write its home and settings anyway."""
ADMIN_ROLE = "admin"
"""The role a workflow with a `mode: edit` agent is for, unless its `allow:` says otherwise."""


def permission_problem(permission: str) -> str | None:
    """Why `permission` is no permission (for `check`), or None."""
    if permission == ALL or permission in PERMISSIONS:
        return None
    if permission.startswith(FUNCTION_PREFIX) and permission.removeprefix(FUNCTION_PREFIX):
        return None
    return f"unknown permission {permission!r}; known: {', '.join([ALL, *PERMISSIONS, 'function:<name>'])}"


@dataclass(frozen=True)
class Grant:
    """What one sender of one profile holds: their roles (settings order) and the permissions of all of them."""

    sender: str
    profile: str
    roles: tuple[str, ...]
    permissions: frozenset[str]

    @property
    def role(self) -> str:
        """The role a reply names (the first one the sender holds)."""
        return self.roles[0] if self.roles else "none"

    def may(self, permission: str) -> bool:
        """Whether the grant holds `permission` (`function:<name>` is also held through `function.invoke`)."""
        if ALL in self.permissions or permission in self.permissions:
            return True
        return permission.startswith(FUNCTION_PREFIX) and "function.invoke" in self.permissions

    def holds_any(self, roles: Iterable[str]) -> bool:
        """Whether the sender holds one of `roles` (a workflow's `allow:`); an owner holds every role."""
        return ALL in self.permissions or bool(set(roles) & set(self.roles))


class RoleBook:
    """The roles of one settings.yaml and who holds them; rebuilt when the settings are reloaded."""

    def __init__(self, settings: Settings):
        self._settings = settings
        defined = {name: tuple(role.permissions) for name, role in settings.roles.items()}
        self.roles: dict[str, tuple[str, ...]] = {**BUILTIN_ROLES, **defined}

    def grant(self, profile_id: str, sender_id: str, groups: Iterable[str] = ()) -> Grant:
        """The grant of `sender_id` on `profile_id`: every role whose list in the profile's `roles:` names the
        sender (or `group:<id>` of one of `groups`), else the profile's `default_role:` (else `member`). The
        deprecated `approvers:` still decides who answers approvals: listed senders may, the others may not."""
        profile = self._settings.profile(profile_id)
        held = list(held_roles(profile, sender_id, groups))
        if not held:
            held = [default_role(profile)]
        permissions = {p for name in held for p in self.roles.get(name, ())}
        approvers = profile.option("approvers") if profile is not None else None
        if approvers is not None:
            permissions.discard("approval.answer")
            if sender_id in {str(approver) for approver in approvers}:
                permissions.add("approval.answer")
            elif ALL in permissions:
                permissions = set(PERMISSIONS) - {"approval.answer"}
        return Grant(sender_id, profile_id, tuple(held), frozenset(permissions))

    def grant_of(self, message: Any) -> Grant:
        """The grant of an incoming payload's sender (its `senderGroups` extra, when a channel sets one)."""
        extra = getattr(message, "model_extra", None) or {}
        groups = extra.get(GROUPS_FIELD) or ()
        groups = [str(g) for g in groups] if isinstance(groups, list) else []
        return self.grant(message.profile, message.senderId or message.sender, groups)

    def problems(self) -> list[str]:
        """Unknown permissions of `roles:` and unknown roles a profile names, as `key: problem` (for `check`)."""
        found = []
        for name, role in self._settings.roles.items():
            for permission in role.permissions:
                problem = permission_problem(permission)
                if problem is not None:
                    found.append(f"roles.{name}.permissions: {problem}")
        for index, profile in enumerate(self._settings.channels):
            where = f"channels.{index} ({profile.id})"
            named = profile.option("default_role")
            if named is not None and named not in self.roles:
                found.append(f"{where}: default_role: {self.unknown(named)}")
            for name in (profile.option("roles") or {}):
                if name not in self.roles:
                    found.append(f"{where}: roles.{name}: {self.unknown(name)}")
        for index, rule in enumerate(self._settings.usage.limits):
            if rule.role is not None and rule.role not in self.roles:
                found.append(f"usage.limits.{index}.role: {self.unknown(rule.role)}")
        return found

    def warnings(self) -> list[str]:
        """What `check` warns of: a profile's deprecated `approvers:`."""
        return [f"channels.{index} ({profile.id}): approvers: deprecated; give the senders a role with "
                "`approval.answer` (until then it still decides who answers approvals)"
                for index, profile in enumerate(self._settings.channels) if profile.option("approvers") is not None]

    def unknown(self, role: str) -> str:
        """The text for a role that is not defined."""
        return f"unknown role {role!r}; roles: {', '.join(self.roles)}"

    def table(self) -> list[dict[str, Any]]:
        """Who has what, per profile (what `switchyard roles` prints)."""
        rows = []
        for profile in self._settings.channels:
            assigned: Mapping[str, list[Any]] = profile.option("roles") or {}
            for role, members in assigned.items():
                for member in members:
                    rows.append({"profile": profile.id, "who": str(member), "role": role,
                                 "permissions": list(self.roles.get(role, ()))})
            role = default_role(profile)
            rows.append({"profile": profile.id, "who": "(everyone else admitted)", "role": role,
                         "permissions": list(self.roles.get(role, ()))})
            if profile.option("approvers") is not None:
                rows.append({"profile": profile.id, "who": ", ".join(str(a) for a in profile.option("approvers")),
                             "role": "(approvers, deprecated)", "permissions": ["approval.answer"]})
        return rows


def held_roles(profile: ChannelProfile | None, sender_id: str, groups: Iterable[str] = ()) -> Iterable[str]:
    """The roles a profile's `roles:` gives `sender_id` (directly or through `group:<id>`), in the file's order."""
    if profile is None:
        return ()
    names = {sender_id, *(f"{GROUP_PREFIX}{group}" for group in groups)}
    assigned: Mapping[str, list[Any]] = profile.option("roles") or {}
    return [role for role, members in assigned.items() if names & {str(member) for member in members}]


def default_role(profile: ChannelProfile | None) -> str:
    """The role of the senders a profile admits and does not list: its `default_role:`, else `owner` on a console
    profile, else `member` (also for a message of a profile settings.yaml does not configure)."""
    named = profile.option("default_role") if profile is not None else None
    if named:
        return str(named)
    return CONSOLE_ROLE if profile is not None and profile.type == "console" else DEFAULT_ROLE
