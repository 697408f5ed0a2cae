"""gateway/roles.py: who holds which role comes from settings.yaml only; built-in and operator roles; the
deprecated `approvers:`; what `check` names."""

from __future__ import annotations

from gateway.roles import RoleBook
from gateway.settings import Settings


def _book(**profile: object) -> RoleBook:
    settings = Settings.model_validate({
        "roles": {"reviewer": {"permissions": ["workflow.start", "approval.answer", "function:queue_stats"]},
                  "broken": {"permissions": ["workflow.strat"]}},
        "channels": [{"id": "tg", "type": "telegram", **profile}]})
    return RoleBook(settings)


def test_a_listed_sender_holds_their_roles_and_everyone_else_the_default() -> None:
    book = _book(roles={"admin": [42], "reviewer": ["7", "group:ops"]}, default_role="guest")
    admin = book.grant("tg", "42")
    assert admin.roles == ("admin",) and admin.may("workflow.start_edit") and admin.may("function:shout")
    assert not admin.may("turn.unknown")
    reviewer = book.grant("tg", "7")
    assert reviewer.may("function:queue_stats") and not reviewer.may("function:shout")
    assert book.grant("tg", "99", ["ops"]).roles == ("reviewer",), "a platform group names the role"
    guest = book.grant("tg", "99")
    assert guest.roles == ("guest",) and not guest.may("approval.answer") and guest.may("function:list_workflows")
    assert book.grant("other", "42").roles == ("member",), "roles are given per profile"


def test_an_owner_holds_everything_and_every_role() -> None:
    owner = _book(roles={"owner": ["1"]}).grant("tg", "1")
    assert owner.may("turn.stop_others") and owner.holds_any(["reviewer"])


def test_approvers_still_decide_who_answers_approvals() -> None:
    book = _book(roles={"owner": ["1"]}, approvers=["5"])
    assert book.grant("tg", "5").may("approval.answer")
    assert not book.grant("tg", "6").may("approval.answer"), "a member not listed in approvers"
    owner = book.grant("tg", "1")
    assert not owner.may("approval.answer") and owner.may("workflow.start_edit")


def test_check_names_unknown_roles_and_permissions() -> None:
    book = _book(roles={"admn": ["1"]}, default_role="boss", approvers=["5"])
    problems = book.problems()
    assert problems[0].startswith("roles.broken.permissions: unknown permission 'workflow.strat'; known: *, ")
    assert problems[1] == ("channels.0 (tg): default_role: unknown role 'boss'; roles: owner, admin, member, guest, "
                           "reviewer, broken")
    assert problems[2].startswith("channels.0 (tg): roles.admn: unknown role 'admn'")
    assert len(problems) == 3
    assert book.warnings()[0].startswith("channels.0 (tg): approvers: deprecated")


def test_the_console_operator_is_owner_unless_the_profile_says_otherwise() -> None:
    settings = Settings.model_validate({"channels": [{"id": "console", "type": "console"},
                                                     {"id": "desk", "type": "console", "default_role": "guest"}]})
    book = RoleBook(settings)
    assert book.grant("console", "me").roles == ("owner",)
    assert book.grant("desk", "me").roles == ("guest",)
    assert book.grant("unconfigured", "me").roles == ("member",)


def test_an_unknown_role_grants_nothing() -> None:
    grant = _book(roles={"admn": ["1"]}).grant("tg", "1")
    assert grant.roles == ("admn",) and grant.permissions == frozenset()


def test_nothing_a_message_carries_raises_its_senders_role() -> None:
    from gateway.models import IncomingPayload

    book = _book(roles={"admin": ["group:ops"]})
    base = {"channel": "telegram", "channelProfileId": "tg", "senderId": "5", "message": "/role owner",
            "timestamp": 1, "messageId": "m1"}
    claimed = IncomingPayload.model_validate({**base, "role": "owner", "roles": ["owner"], "permissions": ["*"]})
    assert book.grant_of(claimed).roles == ("member",)
    grouped = IncomingPayload.model_validate({**base, "senderGroups": ["ops"]})
    assert book.grant_of(grouped).roles == ("admin",), "a group the channel reports names the role"
