"""The checks roles make before anything starts (docs/roles.md): which workflows a sender may start, which
functions they may invoke, whether they may answer approvals, stop another sender's turn, ask about another
sender's usage, or reach a run of another conversation. A refused action gets one reply naming what the sender
may do, and an `access.refused` event; an allowed privileged action is an audit record (gateway/audit.py).

The rules live here, on both backends alike: a backend stores the audit records, it decides nothing. Who holds
which role comes from settings.yaml only (gateway/roles.py), so nothing a sender writes can raise it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gateway.audit import OPERATOR, AuditRecord, operator_answer_key
from gateway.roles import ADMIN_ROLE, Grant, RoleBook

if TYPE_CHECKING:
    from gateway.approvals import Approval
    from gateway.models import IncomingPayload
    from gateway.settings import Settings
    from gateway.stores import AuditLog
    from gateway.telemetry.events import EventLog
    from orchestrator.chat.selector import Decision
    from orchestrator.config.loading import LoadedConfig
    from orchestrator.runs.state import RunState

log = logging.getLogger("switchyard.orchestrator.access")

REFUSED_EVENT = "access.refused"
UNAUDITED_FUNCTIONS = frozenset({"list_workflows", "heartbeat_check"})
"""Functions that only read what the sender may see anyway: invoking them is no privileged action (the heartbeat's
probe invokes `heartbeat_check` on every beat: audited, it filled the log with one record a beat)."""


class Access:
    """The role checks of one orchestrator process, and its audit records (None: a backend without an audit log,
    whose privileged actions are then only logged)."""

    def __init__(self, settings: Settings, events: EventLog, audit: AuditLog | None):
        self._settings = settings
        self._book = RoleBook(settings)
        self._events = events
        self._audit = audit
        self._handling: dict[str, list[str]] = {}

    def reconfigure(self, settings: Settings) -> None:
        """Takes roles reloaded with settings.yaml: the next message is checked against them."""
        self._settings = settings
        self._book = RoleBook(settings)

    def grant(self, message: IncomingPayload) -> Grant:
        """What the message's sender holds on its profile."""
        return self._book.grant_of(message)

    def roles_of(self, sender_key: str) -> tuple[str, ...]:
        """The roles of a usage sender key `<channel>/<profile>/<senderId>` (orchestrator/usage/records.py Payer),
        for the limits given per role."""
        parts = sender_key.split("/", 2)
        return self._book.grant(parts[1], parts[2]).roles if len(parts) == 3 else ()

    # --- who is being answered here now (what `/stop` would stop) ---

    @contextmanager
    def handling(self, message: IncomingPayload, scope: str) -> Iterator[None]:
        """Counts `message`'s sender as having a turn in `scope` while the block answers it."""
        senders = self._handling.setdefault(scope, [])
        senders.append(_sender(message))
        try:
            yield
        finally:
            senders.remove(_sender(message))
            if not senders:
                del self._handling[scope]

    def others_in(self, message: IncomingPayload, scope: str, run: RunState | None) -> set[str]:
        """The senders other than `message`'s whose work `/stop` in `scope` would stop: those answered here now,
        and the sender who started `run`."""
        owners = set(self._handling.get(scope, ()))
        if run is not None and run.conversation.senderId:
            owners.add(run.conversation.senderId)
        return owners - {_sender(message)}

    # --- the checks: each returns the refusal's text, or None when allowed ---

    def stop_refusal(self, message: IncomingPayload, others: set[str]) -> str | None:
        """`/stop` or `/cancel` would stop what `others` started: refused without `turn.stop_others`."""
        if not others:
            return None
        grant = self.grant(message)
        if grant.may("turn.stop_others"):
            return None
        return self.refuse(message, grant, "turn.stop_others",
                           "stop what another sender started (only your own turns and runs)")

    def reaches(self, message: IncomingPayload, run: RunState) -> bool:
        """Whether the sender may see or stop `run` named by its id: a run of their own conversation, or with
        `run.any_conversation`. A refusal is an event only: the reply is that of an unknown run (no leak)."""
        from orchestrator.runs.state import belongs_to

        if belongs_to(run, message):
            return True
        grant = self.grant(message)
        if grant.may("run.any_conversation"):
            return True
        self._event(message, grant, "run.any_conversation", f"run {run.runId} belongs to another conversation")
        return False

    def usage_refusal(self, message: IncomingPayload, other: str) -> str | None:
        """`/usage <sender>` about someone else: refused without `usage.others`."""
        grant = self.grant(message)
        if other == _sender(message) or grant.may("usage.others"):
            return None
        return self.refuse(message, grant, "usage.others", "see another sender's usage")

    def may_answer_approvals(self, message: IncomingPayload) -> bool:
        """Whether the sender's role answers approvals (the profile's admission is checked beside it)."""
        grant = self.grant(message)
        if grant.may("approval.answer"):
            return True
        self._event(message, grant, "approval.answer", "answer approvals")
        return False

    def workflow_refusal(self, message: IncomingPayload, loaded: LoadedConfig, workflow_id: str) -> str | None:
        """Starting `workflow_id`: refused unless the sender holds a role of its `allow:`, or (without `allow:`)
        `workflow.start_edit` for a workflow with a `mode: edit` agent, else `workflow.start`."""
        workflow = loaded.config.workflows.get(workflow_id)
        if workflow is None:
            return None  # no such workflow: the action says so itself
        grant = self.grant(message)
        if self.may_start(grant, loaded, workflow_id):
            return None
        needed = f"roles {', '.join(workflow.allow)}" if workflow.allow is not None else (
            f"{ADMIN_ROLE} (it has an agent that edits files)" if self.edits(loaded, workflow_id) else "")
        what = f"start workflow {workflow_id}" + (f": it is for {needed}" if needed else "")
        return self.refuse(message, grant, "workflow.start", what, loaded=loaded, workflow=workflow_id)

    def function_refusal(self, message: IncomingPayload, loaded: LoadedConfig, name: str) -> str | None:
        """Invoking function `name`: refused without `function.invoke` or `function:<name>`."""
        grant = self.grant(message)
        if grant.may(f"function:{name}"):
            return None
        return self.refuse(message, grant, "function.invoke", f"run the command {name}", loaded=loaded,
                           function=name)

    def decision_refusal(self, message: IncomingPayload, loaded: LoadedConfig, decision: Decision,
                         load_run: Callable[[str], RunState | None]) -> str | None:
        """The selector's decision checked before it is carried out (a workflow_start or command_invoke; a
        `cancel_run` of a run another sender started also needs `turn.stop_others`); an allowed privileged one
        is audited here, once per message."""
        fields = decision.fields
        if decision.action == "workflow_start" and isinstance(fields.get("workflowId"), str):
            workflow_id = fields["workflowId"]
            refusal = self.workflow_refusal(message, loaded, workflow_id)
            if refusal is None and self.edits(loaded, workflow_id):
                self.record(message, "workflow.start_edit", f"started workflow {workflow_id}", workflow=workflow_id)
            return refusal
        if decision.action == "command_invoke" and isinstance(fields.get("function"), str):
            name = fields["function"]
            refusal = self.function_refusal(message, loaded, name) or self._cancel_refusal(message, name, fields,
                                                                                            load_run)
            if refusal is None and name not in UNAUDITED_FUNCTIONS:
                self.record(message, "function.invoke", f"invoked {name}", function=name,
                            arguments=fields.get("arguments"))
            return refusal
        return None

    def _cancel_refusal(self, message: IncomingPayload, name: str, fields: dict[str, Any],
                        load_run: Callable[[str], RunState | None]) -> str | None:
        arguments = fields.get("arguments")
        run_id = arguments.get("runId") if name == "cancel_run" and isinstance(arguments, dict) else None
        run = load_run(run_id) if isinstance(run_id, str) else None
        from orchestrator.runs.state import belongs_to

        if run is None or not belongs_to(run, message):  # cancel_run answers "no such run" itself: no leak
            return None
        return self.stop_refusal(message, self.others_in(message, "", run))

    def approval_asked(self, message: IncomingPayload, approval: Approval) -> None:
        """The audit record of a tool approval an agent asked for, in the turn answering `message`."""
        self.record(message, "approval.request", f"asked to allow {approval.title}", key=approval.id,
                    approval=approval.id)

    def operator_answered(self, approval: Approval) -> None:
        """The audit record of an approval an operator answered (`switchyard approvals`, the dashboard): keyed by
        the approval, so the CLI's own record of the same answer is this one."""
        verdict = "allowed" if approval.allowed() else "denied"
        where = "dashboard" if approval.answered_by == "dashboard" else "cli"
        self._append(AuditRecord.new(by=OPERATOR, where=where, action="approval.answer",
                                     what=f"{verdict} {approval.title}", key=operator_answer_key(approval.id),
                                     approval=approval.id, answered_by=approval.answered_by))

    def named_workflow(self, message: IncomingPayload, loaded: LoadedConfig) -> str | None:
        """The workflow a message's first word names (`fix …`, `/fix …`), which the rules selector starts as it
        is: known by rule, so checked before any selector runs."""
        words = message.message.strip().lower().split()
        first = words[0].lstrip("/") if words else ""
        return first if first in loaded.config.workflows else None

    # --- what a role may start ---

    def may_start(self, grant: Grant, loaded: LoadedConfig, workflow_id: str) -> bool:
        """Whether `grant` may start the workflow (see workflow_refusal)."""
        workflow = loaded.config.workflows[workflow_id]
        if workflow.allow is not None:
            return grant.holds_any(workflow.allow)
        return grant.may("workflow.start_edit" if self.edits(loaded, workflow_id) else "workflow.start")

    def edits(self, loaded: LoadedConfig, workflow_id: str) -> bool:
        """Whether a step of the workflow runs a provider with `mode: edit` (through an agent or directly)."""
        config = loaded.config
        workflow = config.workflows.get(workflow_id)
        for step in workflow.steps if workflow is not None else ():
            for _, body in step.bodies():
                agent = config.agents.get(body.agent) if body.agent is not None else None
                names = [agent.provider, agent.fallback] if agent is not None else [body.provider]
                for name in names:
                    provider = self._settings.providers.get(name) if name else None
                    if provider is not None and provider.mode == "edit":
                        return True
        return False

    def you_may(self, grant: Grant, loaded: LoadedConfig | None) -> str:
        """What the sender may do, for a refusal: the workflows they may start and the commands."""
        parts = []
        if loaded is not None:
            startable = [w for w in loaded.config.workflows if self.may_start(grant, loaded, w)]
            parts.append("start " + (", ".join(startable) if startable else "no workflow"))
        parts.append("/status, /help, /usage" + (", /stop (your own turns)" if not grant.may("turn.stop_others")
                                                  else ", /stop"))
        if grant.may("approval.answer"):
            parts.append("answer approvals")
        return "; ".join(parts)

    # --- refusals and records ---

    def refuse(self, message: IncomingPayload, grant: Grant, permission: str, what: str, *,
               loaded: LoadedConfig | None = None, **fields: Any) -> str:
        """The one reply of a refused action (with what the sender may do), after its event."""
        self._event(message, grant, permission, what, **fields)
        return f"You may not {what} (your role here: {grant.role}). You may: {self.you_may(grant, loaded)}."

    def _event(self, message: IncomingPayload, grant: Grant, permission: str, what: str, **fields: Any) -> None:
        self._events.emit(REFUSED_EVENT, channel=message.channel, profile=message.profile,
                          conversation=message.conversation, sender=_sender(message), role=grant.role,
                          permission=permission, reason=what, messageId=message.messageId, **fields)

    def record(self, message: IncomingPayload, action: str, what: str, *, key: str | None = None,
               **details: Any) -> None:
        """Appends the audit record of a privileged action this message took (once, however often the message
        is handled again); a failing audit log is logged, never fatal to the action."""
        from orchestrator.runs.state import conversation_key

        identity = f"{message.channel}/{message.profile}/{message.messageId}" + (f"/{key}" if key else "")
        record = AuditRecord.new(by=f"{message.channel}/{message.profile}/{_sender(message)}",
                                 where=conversation_key(message), action=action, what=what, key=identity,
                                 role=self.grant(message).role, **details)
        self._append(record)

    def _append(self, record: AuditRecord) -> None:
        if self._audit is None:
            log.info("audit (no audit log on this backend): %s %s: %s", record.by, record.action, record.what)
            return
        try:
            self._audit.append(record)
        except Exception as exc:  # the action goes ahead: it was allowed; the operator sees the warning
            log.warning("cannot write the audit record of %s by %s: %s", record.action, record.by, exc)


def _sender(message: IncomingPayload) -> str:
    return message.senderId or message.sender
