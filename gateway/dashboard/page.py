"""Renders the dashboard's state as HTML; every value is escaped here, the one place that writes markup."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from html import escape
from importlib import resources
from typing import Any

from gateway.dashboard import lines, plots

CHART_W, CHART_H = 480, 120


def page(state: dict[str, Any], *, refresh_ms: int) -> str:
    """The whole page: the static shell with the sections rendered in."""
    shell = resources.files("gateway.dashboard").joinpath("static/index.html").read_text("utf-8")
    return (shell.replace("<!--GLANCE-->", glance(state)).replace("<!--SECTIONS-->", sections(state))
            .replace("REFRESH_MS", str(refresh_ms)))


def glance(state: dict[str, Any]) -> str:
    """The plots of the last 24 hours (`plots` and `spend` of the state), refreshed apart from the sections:
    they change once a minute and weigh more."""
    if "plots" not in state:
        return ""
    return _section("Last 24 hours", "glance", plots.glance(state["plots"], state.get("spend")))


def sections(state: dict[str, Any]) -> str:
    """The page's live part: every section, refreshed in place by the page's script (the processes and
    channel owners only when the backend has them: postgres)."""
    return "\n".join([
        _section("Queue", "queue", _database_note(state) + _table(["folder", "files", "oldest"], [
            [q["folder"], q["depth"], _age(q["oldest_age_s"])] for q in state["queue"]])),
        _section("In flight", "in-flight", _table(["message", "channel", "conversation", "attempt", "elapsed"], [
            [m["name"], m.get("profile") or m.get("channel"), m.get("conversation"), m.get("attempt"),
             _age(m["elapsed_s"])] for m in state["in_flight"]], empty="nothing in flight")),
        _section(f"Tool approvals ({len(state.get('approvals', []))})", "approvals",
                 _approvals(state.get("approvals", []))),
        _section(f"Dead letters ({state['dead_total']})", "dead-letters", _dead_letters(state["dead_letters"])),
        _section("Recent runs", "runs", _runs(state["runs"])),
        _section("Audit log", "audit", _table(["when", "by", "where", "action", "what"], [
            [a["at"], a["by"], a["where"], a["action"], a["what"]] for a in state.get("audit", [])],
            empty="no privileged action recorded")),
        _section("Schedules", "schedules", _table(["schedule", "when", "deliver to", "next", "last", "outcome"], [
            [s["schedule"], s["when"], s["deliver"], s["next"] or "disabled", s["last"] or "never",
             (s["outcome"] or "—") + (f": {s['detail']}" if s.get("detail") else "")]
            for s in state.get("schedules", [])], empty="no schedules")),
        _section("Channels", "channels", _table(
            ["profile", "type", "status", "last inbound", "last outbound", "retries", "429s"],
            [[c["profile"], c["type"], _status_cell(c), c["last_inbound"] or "—", c["last_outbound"] or "—",
              c["retries"], c["rate_limited"]] for c in state["channels"]], empty="no channels configured", raw=(2,))),
        *_processes(state),
        _section("Heartbeat round trip", "beats", _heartbeats(state["heartbeats"])),
        _section("Last events", "events", _events(state["events"])),
    ])


def _database_note(state: dict[str, Any]) -> str:
    return f'<p class="empty">{escape(state["database"])}</p>' if state.get("database") else ""


def _processes(state: dict[str, Any]) -> list[str]:
    if "processes" not in state:
        return []
    return [
        _section("Processes", "processes", _table(["role", "host", "pid", "last seen", "state"], [
            [p["role"], p["host"], p["pid"], f"{p['last_seen']} ({p['seen_ago_s']:g} s ago)",
             "stale" if p["stale"] else "ok"] for p in state["processes"]], empty="no process attached")),
        _section("Channel owners", "owners", _table(["lease", "owner", "until"], [
            [lease["name"], lease["holder"], f"{lease['expires_at']}{' (expired)' if lease['expired'] else ''}"]
            for lease in state.get("leases", [])], empty="no channel owned")),
    ]


def _section(title: str, ident: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{body}</section>'


def _cell(value: Any) -> str:
    return escape("—" if value is None else str(value))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str = "none",
           raw: Sequence[int] = ()) -> str:
    """A table; the cells at the `raw` column indexes are markup this module built (already escaped)."""
    body = "".join("<tr>" + "".join(f"<td>{cell if index in raw else _cell(cell)}</td>"
                                    for index, cell in enumerate(row)) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _status(channel: dict[str, Any]) -> str:
    return f"{channel['state']} — {channel['reason']}" if channel.get("reason") else str(channel["state"])


def _status_cell(channel: dict[str, Any]) -> str:
    """The status, escaped; a running web chat's address (its note) as a link to the chat."""
    reason = str(channel.get("reason") or "")
    if channel.get("type") == "web" and channel.get("state") == "running" and reason.startswith(("http://", "https://")):
        return f'running — <a href="{escape(reason, quote=True)}">open the web chat</a>'
    return escape(_status(channel))


def _dead_letters(letters: list[dict[str, Any]]) -> str:
    rows = [[letter["name"], letter["kind"], letter.get("conversation"), letter["reason"], letter["attempts"],
             letter.get("failed_at"),
             f'<button type="button" class="retry" data-name="{escape(letter["name"], quote=True)}">retry</button>']
            for letter in letters]
    return _table(["name", "kind", "conversation", "reason", "attempts", "failed at", ""], rows,
                  empty="no dead letters", raw=(6,))


def _approvals(approvals: list[dict[str, Any]]) -> str:
    rows = []
    for approval in approvals:
        ident = escape(approval["id"], quote=True)
        left = approval["expires_in_s"]
        rows.append([approval["id"], approval["conversation"], approval["title"], approval["options"],
                     _age(approval["age_s"]), f"in {_age(left)}" if left > 0 else "expired",
                     f'<button type="button" class="approval" data-id="{ident}" data-verdict="allow">allow</button> '
                     f'<button type="button" class="approval" data-id="{ident}" data-verdict="deny">deny</button>'])
    return _table(["id", "conversation", "tool call", "options", "asked", "expires", ""], rows,
                  empty="no tool call waiting for an answer", raw=(6,))


def _runs(runs: list[dict[str, Any]]) -> str:
    rows = []
    for run in runs:
        steps = " ".join(f'<span class="step {escape(str(s["status"]), quote=True)}">{escape(str(s["id"]))}'
                         f'{_duration(s.get("durationMs"))}</span>' for s in run.get("steps", []))
        rows.append([_run_details(run), run.get("workflowId"), run.get("conversation"), run.get("state"), steps,
                     run.get("updatedAt")])
    return _table(["run", "workflow", "conversation", "state", "steps", "updated"], rows, empty="no runs yet",
                  raw=(0, 4))


def _run_details(run: dict[str, Any]) -> str:
    """The run's id, opening onto its steps one a line (and its trace id and error, when it has them)."""
    ident = str(run.get("runId"))
    steps = "".join(f"<li>{_cell(s.get('id'))}: {_cell(s.get('status'))}{_duration(s.get('durationMs'))}</li>"
                    for s in run.get("steps", []))
    extra = "".join(f"<p>{label}: <code>{_cell(run[key])}</code></p>"
                    for key, label in (("traceId", "trace id"), ("error", "error")) if run.get(key))
    return (f'<details class="run" data-key="run:{escape(ident, quote=True)}"><summary>{escape(ident)}</summary>'
            f'<ol class="steps">{steps or "<li>no step yet</li>"}</ol>{extra}</details>')


def _duration(ms: Any) -> str:
    return f" <small>{ms / 1000:.1f}s</small>" if isinstance(ms, int | float) else ""


def _heartbeats(histories: dict[str, list[dict[str, Any]]]) -> str:
    if not histories:
        return '<p class="empty">no heartbeat answered yet</p>'
    return "".join(f"<figure><figcaption>{escape(profile)}: last {_cell(points[-1].get('rtt_ms'))} ms</figcaption>"
                   f"{chart(points)}</figure>" for profile, points in histories.items() if points)


def chart(points: list[dict[str, Any]]) -> str:
    """An inline SVG line of round-trip times (oldest left), scaled to the largest; failed beats in red."""
    values = [float(p["rtt_ms"]) if isinstance(p.get("rtt_ms"), int | float) else 0.0 for p in points]
    top = max(values) or 1.0
    step = CHART_W / max(1, len(values) - 1)
    xy = [(round(i * step, 1), round(CHART_H - 4 - (v / top) * (CHART_H - 8), 1)) for i, v in enumerate(values)]
    line = " ".join(f"{x},{y}" for x, y in xy)
    alerts = "".join(f'<circle cx="{x}" cy="{y}" r="3" class="alert"/>'
                     for (x, y), p in zip(xy, points, strict=True) if not p.get("ok"))
    return (f'<svg class="chart" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
            f'aria-label="heartbeat round trip, max {top:.0f} ms"><polyline points="{line}"/>{alerts}'
            f'<text x="2" y="12">{top:.0f} ms</text></svg>')


def _events(events: list[dict[str, Any]]) -> str:
    """One readable line per event (time, what, conversation, run); its JSON in a closed `<details>`."""
    rows = []
    for event in events:
        said = lines.line(event)
        key = "|".join(str(event.get(k)) for k in ("ts", "event", "job_id", "file"))
        raw = json.dumps(event, ensure_ascii=False, default=str, indent=1)
        rows.append([f'<span title="{escape(str(event.get("ts")), quote=True)}">{escape(said["time"])}</span>',
                     said["what"], said["conversation"] or None, said["run"] or None,
                     f'<details class="json" data-key="event:{escape(key, quote=True)}"><summary>JSON</summary>'
                     f'<pre>{escape(raw)}</pre></details>'])
    return _table(["time", "what", "conversation", "run", ""], rows, empty="no events yet", raw=(0, 4))
