"""One prompt of a live session: the answer its chunks build (passed on to `on_text` as it grows), the
tool approvals it asks for (the chat's asker, or the provider's `permissions` rule), and what it used."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

from orchestrator.agents.clis.base import Figures
from orchestrator.agents.live import ApprovalOption, PermissionAsker, TextSink, ToolApproval
from orchestrator.usage.records import TokenUsage

log = logging.getLogger(__name__)

ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")
DETAIL_CHARS = 500


def denied() -> RequestPermissionResponse:
    """The outcome of a permission nobody chose: cancelled."""
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def selected(option_id: str) -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=option_id))


class Turn:
    """What one prompt collects; `stop` ends its pending approval as cancelled."""

    def __init__(self, *, on_text: TextSink | None, ask: PermissionAsker | None, permissions: str):
        self.on_text, self.ask, self.permissions = on_text, ask, permissions
        self.parts: list[str] = []
        self.chunks = 0  # chunks with text (claude sends an empty one before each message)
        self.usage_total: int | None = None
        self.used: int | None = None  # `usage_update`: the tokens in the session's context now
        self.cost: float | None = None  # `usage_update`: the session's cost so far (USD, cumulative)
        self.usage: TokenUsage | None = None  # what the turn used, once it ended (`spent`)
        self.figures = Figures()  # reads what its adapter reported, keeping what is no amount
        self.stop_reason = ""
        self.denied: list[str] = []  # titles of the tool calls denied in this turn
        self.asked = 0
        self.stopped = False
        self._pending: asyncio.Task[str | None] | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def update(self, update: dict[str, Any]) -> None:
        """A session update of this turn: an answer chunk adds to the text (and reaches `on_text`); a
        `usage_update` says what the session holds and has cost so far."""
        if update.get("sessionUpdate") == "usage_update":
            self.used = self.figures.count("used", update.get("used"))
            spent = update.get("cost")
            self.cost = self.figures.cost("cost.amount", spent.get("amount")) if isinstance(spent, dict) else None
        if update.get("sessionUpdate") != "agent_message_chunk":
            return
        content = update.get("content") or {}
        piece = content.get("text") if content.get("type") == "text" else None
        if not piece:
            return
        self.parts.append(str(piece))
        self.chunks += 1
        if self.on_text is not None:
            try:
                self.on_text(self.text)
            except Exception:  # a preview that fails must not fail the turn
                log.exception("on_text failed")

    def ended_empty(self, stop_reason: str) -> bool:
        """claude's answer after a cancel: `end_turn` at once, no chunk, no tokens (FINDINGS)."""
        return stop_reason == "end_turn" and self.chunks == 0 and not self.usage_total and not self.asked

    def spent(self, usage: Any, meta: Any, cost_before: float | None) -> TokenUsage | None:
        """What this turn used, from what its adapter reported (tests/fakes/acp/FINDINGS.md, "Usage"):
        claude the prompt result's `usage` (input apart from both cache counts; the total holds them all)
        and the session's cumulative cost in `usage_update` (this turn: its growth since `cost_before`);
        gemini the result's `_meta.quota.token_count`; codex only `usage_update.used`, the context's
        tokens after the turn's last model call (its input and output: a turn of several calls counts
        only its last one). None: nothing reported."""
        usd = None if self.cost is None else max(0.0, self.cost - (cost_before or 0.0))
        figures = self.figures
        if usage is not None:
            out = sum(figures.count(name, getattr(usage, name, None)) or 0
                      for name in ("output_tokens", "thought_tokens"))
            total = figures.count("total_tokens", getattr(usage, "total_tokens", None))
            return figures.usage(usd, None if total is None else max(0, total - out), out)
        quota = meta.get("quota") if isinstance(meta, dict) else None
        tokens = quota.get("token_count") if isinstance(quota, dict) else None
        if isinstance(tokens, dict):
            return figures.usage(usd, figures.count("input_tokens", tokens.get("input_tokens")),
                                 figures.count("output_tokens", tokens.get("output_tokens")))
        if self.used is not None or usd is not None or figures.invalid:
            return figures.usage(usd, self.used, None if self.used is None else 0)
        return None

    def answer(self, stop_reason: str) -> str:
        """The turn's answer; a turn that a denied tool call ended without text (codex) says so."""
        if self.text.strip() or not self.denied:
            return self.text
        return "The tool call was denied: " + "; ".join(self.denied) + "."

    async def permission(self, tool_call: Any, options: list[Any]) -> RequestPermissionResponse:
        """Answers `session/request_permission`: by the chat's choice, else by the provider's rule."""
        self.asked += 1
        offered = tuple(ApprovalOption(str(o.option_id), str(o.name), str(o.kind)) for o in options)
        approval = ToolApproval(title=str(getattr(tool_call, "title", None) or "a tool call"), options=offered,
                                detail=_detail(tool_call), tool_call_id=str(getattr(tool_call, "tool_call_id", "")))
        chosen = await self._choose(approval)
        option = next((o for o in offered if o.id == chosen), None)
        if option is None or option.kind not in ALLOW_KINDS:
            self.denied.append(approval.title)
        if option is None:
            reject = next((o for o in offered if o.kind in REJECT_KINDS), None)
            return selected(reject.id) if reject is not None and not self.stopped else denied()
        return selected(option.id)

    async def _choose(self, approval: ToolApproval) -> str | None:
        if self.stopped:
            return None
        if self.permissions == "allow":
            return next((o.id for o in sorted(approval.options, key=lambda o: o.kind != "allow_once")
                         if o.kind in ALLOW_KINDS), None)
        if self.permissions == "deny" or self.ask is None:
            return None
        self._pending = asyncio.ensure_future(self.ask(approval))
        try:
            return await self._pending
        except asyncio.CancelledError:
            if self.stopped:
                return None
            raise
        except Exception:
            log.exception("asking for an approval failed: denied")
            return None
        finally:
            self._pending = None

    def stop(self) -> None:
        """/stop: a pending approval is answered as cancelled, later ones are not asked."""
        self.stopped = True
        if self._pending is not None:
            self._pending.cancel()

    def abandon(self) -> None:
        """The agent is gone: nobody waits for a pending approval any longer."""
        self.stop()


def _detail(tool_call: Any) -> str:
    raw = getattr(tool_call, "raw_input", None)
    if not raw:
        return ""
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    return text[:DETAIL_CHARS]
