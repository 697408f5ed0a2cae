"""The dashboard's small plots, drawn as inline SVG by the server with the rest of the page (no library,
nothing fetched): each bar carries its minute (or day) and value as `data-` attributes, each line its minutes
and values as lists, so what a plot says can be read back (the page's script shows the value under the
pointer; tests/e2e/test_dashboard_plots.py reads the peak). A full day is ~1,440 marks a series: they carry
no more than that, and the page fetches them every 30 s, not at each refresh of the tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any

from gateway.dashboard.series import MINUTES

W, H = 480, 110
TOP, BOTTOM = 14, 14  # room for the scale above and the time axis below
PROVIDER_COLOURS = 6  # .p0 … .p5 in dashboard.css, then again


@dataclass(frozen=True)
class Line:
    """One series of a plot: the key of its figure in a minute's row, its label, and how it is drawn."""

    key: str
    label: str
    css: str
    bars: bool = False


def glance(series: dict[str, Any], spend: dict[str, Any] | None) -> str:
    """Every plot of the "last 24 hours" section."""
    start, rows = int(series["start"]), list(series["minutes"])
    figures = [
        minute_plot("plot-messages", "messages in and replies out per minute", start, rows,
                    [Line("in", "in", "in", bars=True), Line("out", "out", "out", bars=True)], _count),
        minute_plot("plot-latency", "reply latency p50 / p99", start, rows,
                    [Line("p50_ms", "p50", "p50"), Line("p99_ms", "p99", "p99")], _ms),
        minute_plot("plot-queue", "messages waiting in the queue", start, rows,
                    [Line("waiting", "waiting", "waiting")], _count),
        minute_plot("plot-oldest", "oldest waiting message", start, rows,
                    [Line("oldest_s", "oldest", "oldest")], _seconds),
        minute_plot("plot-dead", "dead letters per minute", start, rows, [Line("dead", "dead", "dead", bars=True)],
                    _count),
    ]
    figures.extend(spend_plots(spend))
    return "".join(figures)


def minute_plot(ident: str, title: str, start: int, rows: Sequence[dict[str, Any]], lines: Sequence[Line],
                show: Callable[[float], str]) -> str:
    """A plot of per-minute figures over the last 24 hours (oldest left), scaled to the largest value."""
    values = [float(row[line.key]) for row in rows for line in lines if row.get(line.key) is not None]
    top = max(values, default=0.0) or 1.0
    width = max(1.5, W / MINUTES * 2)
    marks: list[str] = []
    for index, line in enumerate(lines):
        points = [(row["minute"], float(row[line.key])) for row in rows if row.get(line.key) is not None]
        if line.bars:
            offset = index * width / len(lines)
            bars = "".join(_bar(_x(minute, start) + offset, value, top, width / len(lines), minute)
                           for minute, value in points if value > 0)
            marks.append(f'<g class="{line.css}">{bars}</g>')
        elif points:
            path = " ".join(f"{_x(minute, start):.1f},{_y(value, top):.1f}" for minute, value in points)
            marks.append(f'<polyline class="{line.css}" points="{path}" '
                         f'data-minutes="{" ".join(_clock(minute) for minute, _ in points)}" '
                         f'data-values="{" ".join(f"{value:g}" for _, value in points)}"/>')
    legend = " ".join(f'<span class="key {line.css}">{escape(line.label)}</span>' for line in lines)
    ticks = "".join(f'<line class="tick" x1="{W * (1 - hours / 24):.1f}" y1="{TOP}" x2="{W * (1 - hours / 24):.1f}" '
                    f'y2="{H - BOTTOM}"/><text x="{W * (1 - hours / 24):.1f}" y="{H - 2}" text-anchor="middle">'
                    f'−{hours} h</text>' for hours in (18, 12, 6))
    scale = show(top) if any(value > 0 for value in values) else "none"
    return _figure(ident, title, legend, scale, ticks + "".join(marks), ("24 h ago", "now"))


def spend_plots(spend: dict[str, Any] | None) -> list[str]:
    """Spend per day by provider, in USD and in tokens (the usage totals; none where the backend keeps none)."""
    if spend is None:
        return ['<figure id="plot-spend"><figcaption>spend per day</figcaption>'
                '<p class="empty">no usage totals on this backend</p></figure>']
    days: list[dict[str, Any]] = spend["days"]
    providers = sorted({name for day in days for name in day["providers"]})
    return [_spend_plot("plot-spend-usd", "spend per day by provider (USD)", days, providers, "usd", _usd),
            _spend_plot("plot-spend-tokens", "tokens per day by provider", days, providers, "tokens", _count)]


def _spend_plot(ident: str, title: str, days: list[dict[str, Any]], providers: list[str], key: str,
                show: Callable[[float], str]) -> str:
    values = [float(spent[key]) for day in days for spent in day["providers"].values()]
    top = max(values, default=0.0) or 1.0
    slot = W / max(1, len(days))
    width = slot * 0.8 / max(1, len(providers))
    marks = []
    for column, day in enumerate(days):
        for index, name in enumerate(providers):
            value = float(day["providers"].get(name, {}).get(key, 0))
            if value <= 0:
                continue
            x = column * slot + slot * 0.1 + index * width
            marks.append(f'<rect class="p{index % PROVIDER_COLOURS}" x="{x:.1f}" y="{_y(value, top):.1f}" '
                         f'width="{width:.1f}" height="{_y(0, top) - _y(value, top):.1f}" '
                         f'data-day="{escape(day["day"], quote=True)}" data-provider="{escape(name, quote=True)}" '
                         f'data-value="{value:g}" data-shown="{escape(show(value), quote=True)}"/>')
    legend = " ".join(f'<span class="key p{index % PROVIDER_COLOURS}">{escape(name)}</span>'
                      for index, name in enumerate(providers)) or "no agent turn counted"
    axis = (days[0]["day"], days[-1]["day"]) if days else ("", "")
    return _figure(ident, title, legend, show(top) if marks else "nothing spent", "".join(marks), axis)


def _figure(ident: str, title: str, legend: str, scale: str, marks: str, axis: tuple[str, str]) -> str:
    return (f'<figure id="{ident}" class="plot"><figcaption>{escape(title)} {legend}</figcaption>'
            f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title, quote=True)}">'
            f'<line class="axis" x1="0" y1="{H - BOTTOM}" x2="{W}" y2="{H - BOTTOM}"/>'
            f'<text x="2" y="10">{escape(scale)}</text>{marks}'
            f'<text x="2" y="{H - 2}">{escape(axis[0])}</text>'
            f'<text x="{W - 2}" y="{H - 2}" text-anchor="end">{escape(axis[1])}</text></svg></figure>')


def _bar(x: float, value: float, top: float, width: float, minute: int) -> str:
    y = _y(value, top)
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.2f}" height="{_y(0, top) - y:.1f}" '
            f'data-minute="{_clock(minute)}" data-value="{value:g}"/>')


def _x(minute: int, start: int) -> float:
    """Where a minute's marks start: the last minute's bars end inside the plot."""
    return (minute - start) / MINUTES * (W - 2)


def _y(value: float, top: float) -> float:
    return H - BOTTOM - (value / top) * (H - TOP - BOTTOM)


def _clock(minute: int) -> str:
    """An epoch minute as `YYYY-MM-DDTHH:MMZ`."""
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _seconds(value: float) -> str:
    return f"{value / 60:.0f} min" if value >= 120 else f"{value:.0f} s"


def _usd(value: float) -> str:
    return f"${value:,.2f}"
