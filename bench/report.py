"""Prints the bench results as tables with goal checks, and writes them as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISS"


def _table(title: str, header: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title, "  " + "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells[1:]]
    return [*lines, ""]


def goals(results: dict[str, Any]) -> dict[str, bool]:
    """Each goal of issue 5 that this run measured, met or not."""
    met: dict[str, bool] = {}
    for row in results.get("P1", []):
        met[f"P1 {row['messages']}x{row['conversations']} fsync={row['fsync']}"] = row["ratio"] >= 0.5
    if "P2" in results:
        for kind in ("claim", "outgoing"):
            figures = results["P2"][kind]
            met[f"P2 {kind}"] = figures["p50_ms"] <= 2 and figures["p99_ms"] <= 20
    if "P3" in results:
        met["P3"] = results["P3"]["overhead_ms"] <= 5
    if "P4" in results:
        met["P4"] = results["P4"]["end_vs_1k"] >= 0.8
    if "P6" in results:
        row = results["P6"]
        met["P6"] = row["cpu_ms"] <= 5 and row["rate"] >= 150 and row["overhead_p50_ms"] <= 5
    if "P5" in results:
        met["P5"] = results["P5"]["cpu_percent"] < 0.5 and results["P5"]["rss_mib"] < 150
    for like, row in _p8_rows(results):
        met[f"P8 {like}"] = row["acp"]["turns"]["p50_ms"] <= 150 and (row["oneshot_over_warm"] or 0) >= 5
    return met


def _p8_rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The adapters P8 measured (not those it skipped)."""
    return [(like, row) for like, row in (results.get("P8") or {}).items()
            if isinstance(row, dict) and "acp" in row]


def render(results: dict[str, Any]) -> str:
    """The human-readable report: machine facts, then one table per scenario."""
    machine = results["machine"]
    lines = [f"machine: {machine['cpu']} x{machine['cores']}, {machine['memory']}, Linux {machine['kernel']}, "
             f"Python {machine['python']}", f"disk:    {machine['filesystem']}", ""]
    met = goals(results)
    if results.get("P6"):
        r = results["P6"]
        calls = r["calls"]
        rows = [[r["messages"], r["conversations"], r["rate"], r["cpu_ms"], r["latency_p50_ms"], r["provider_p50_ms"],
                 r["overhead_p50_ms"], calls.get("fsync", 0), calls.get("create", 0), calls.get("rename", 0),
                 calls.get("write", 0), r["order_problems"], _mark(met["P6"])]]
        lines += _table("P6 chat path: rules -> chat workflow -> one /bin/sh agent step, fsync on (goal: gateway CPU "
                        "<= 5 ms/msg, >= 150 msg/s, latency over the provider's own p50 <= 5 ms)",
                        ["msgs", "convs", "msg/s", "cpu ms", "latency", "provider", "overhead", "fsync", "create",
                         "rename", "write", "misordered", "goal"], rows)
        if r.get("traced"):
            t = r["traced"]
            lines += _table("P6 with telemetry on (every span exported over OTLP/HTTP to a sink in another process): "
                            "the added gateway CPU per message",
                            ["msg/s", "cpu ms", "added cpu ms", "latency", "cpu ms 1 at a time", "added 1 at a time"],
                            [[t["rate"], t["cpu_ms"], round(t["cpu_ms"] - r["cpu_ms"], 3), t["latency_p50_ms"],
                              t["latency_cpu_ms"], round(t["latency_cpu_ms"] - r["latency_cpu_ms"], 3)]])
        if r.get("five_steps"):
            f = r["five_steps"]
            lines += _table(f"P6 five-step run, one message at a time ({f['messages']} messages; overhead = ms per "
                            "step minus the provider's own p50; cpu = the gateway's, one message at a time)",
                            ["steps", "latency", "ms/step", "overhead/step", "cpu ms/step", "cpu ms 1-step run"],
                            [[f["steps"], f["latency_p50_ms"], f["ms_per_step"], f["overhead_per_step_ms"],
                              f["cpu_ms_per_step"], r["latency_cpu_ms"]]])
    if results.get("P1"):
        rows = [[r["messages"], r["conversations"], r["fsync"], r["variant"], r["rate"], r["floor_rate"], r["ratio"],
                 r.get("user_ms", "-"), r.get("sys_ms", "-"), r["order_problems"],
                 _mark(r["ratio"] >= 0.5) if r["variant"] == "orchestrator" else "-"]
                for r in [*results["P1"], *results.get("P1x", [])]]
        lines += _table("P1 throughput (msg/s; floor = plain file loop, same run; goal ratio >= 0.5; "
                        "user/sys = CPU ms per message)",
                        ["msgs", "convs", "fsync", "path", "msg/s", "floor", "ratio", "user", "sys", "misordered",
                         "goal"], rows)
    if "P1pg" in results:
        lines += _backends_table(results)
    if results.get("P1calls"):
        kinds = ["create", "rename", "unlink", "open-read", "stat", "mkdir", "write", "fsync"]
        rows = [[r["variant"], *[r.get(k, 0) for k in kinds]] for r in results["P1calls"]]
        lines += _table("P1 file-system calls per message (fsync on; unmoved by the disk's drift)",
                        ["path", *kinds], rows)
    if "P2" in results:
        rows = [[p["watch"], kind, p["messages"], p[kind]["p50_ms"], p[kind]["p99_ms"], p[kind]["max_ms"],
                 _mark(met[f"P2 {kind}"]) if p["watch"] == "inotify" and kind != "delivered" else "-"]
                for p in (results["P2"], *results.get("P2x", [])) for kind in ("claim", "outgoing", "delivered")]
        lines += _table("P2 wake-up latency from the rename into incoming/ (ms; goal p50 <= 2, p99 <= 20)",
                        ["watch", "to", "msgs", "p50", "p99", "max", "goal"], rows)
    if "P3" in results:
        p3 = results["P3"]
        rows = [[" ".join(p3["argv"]), p3["calls"], p3["bare"]["p50_ms"], p3["runner"]["p50_ms"], p3["overhead_ms"],
                 _mark(met["P3"])]]
        lines += _table("P3 provider overhead (ms per call, median; goal <= 5)",
                        ["argv", "calls", "bare spawn", "ProviderRunner", "overhead", "goal"], rows)
    if "P4" in results:
        p4 = results["P4"]
        rows = [[p4["messages"], p4["startup_s"], p4["rate_start"], p4["rate_middle"], p4["rate_end"], p4["rate_1k"],
                 p4["end_vs_1k"], p4["order_problems"], _mark(met["P4"])]]
        lines += _table(f"P4 backlog drain (msg/s, fsync={p4['fsync']}, {p4['conversations']} conversations; "
                        "goal end >= 0.8 x the 1k rate)",
                        ["msgs", "start s", "first 10%", "middle 10%", "last 10%", "1k rate", "end/1k",
                         "misordered", "goal"], rows)
    if "P5" in results:
        p5 = results["P5"]
        channels = ", ".join(f"{k}:{v}" for k, v in p5["channels"].items())
        rows = [[p5["seconds"], p5["cpu_percent"], p5["rss_mib"], channels, _mark(met["P5"])]]
        lines += _table("P5 idle `switchyard run` (goal CPU < 0.5 %, RSS < 150 MiB)",
                        ["seconds", "cpu %", "rss MiB", "channels", "goal"], rows)
    if results.get("P8"):
        lines += _p8_table(results, met)
    return "\n".join(lines)


def _p8_table(results: dict[str, Any], met: dict[str, bool]) -> list[str]:
    """P8: each adapter's warm (ACP) and one-shot turns, ms added over the model's own time, and memory."""
    rows = []
    for like, row in results["P8"].items():
        if not isinstance(row, dict):
            continue
        if "acp" not in row:
            rows.append([like, row.get("skipped", "-"), "", "", "", "", "", "", "", ""])
            continue
        acp, oneshot = row["acp"], row["oneshot"]
        rows.append([like, acp["first_turn_ms"], acp["turns"]["p50_ms"], oneshot["turns"]["p50_ms"],
                     row["oneshot_over_warm"], acp["rss_mb_1_conversation"], acp["rss_mb_3_conversations"],
                     acp.get("rss_mb_50_conversations", "-"), oneshot["first_turn_ms"], _mark(met[f"P8 {like}"])])
    return _table(f"P8 live sessions: ms a turn adds over the model's own time, p50 of {results['P8']['turns']} "
                  "turns (goal: warm <= 150 ms and one-shot >= 5x warm), the warm adapters' RSS (MB; max_live 8)",
                  ["adapter", "acp 1st", "acp warm", "one-shot", "x", "rss 1 conv", "rss 3 convs", "rss 50 convs",
                   "one-shot 1st", "goal"], rows)


def _backends_table(results: dict[str, Any]) -> list[str]:
    """P1 on the file and the postgres backend, case by case (each pair measured one after the other)."""
    pg = results["P1pg"]
    if isinstance(pg, str):
        return [f"P1 postgres: {pg}", ""]
    files = {(r["messages"], r["conversations"], r["fsync"]): r for r in results.get("P1", [])}
    rows = []
    for r in pg:
        f = files.get((r["messages"], r["conversations"], r["fsync"]), {})
        rows.append([r["messages"], r["conversations"], r["fsync"], f.get("rate", "-"),
                     round(f["user_ms"] + f["sys_ms"], 2) if f else "-", r["rate"],
                     round(r["user_ms"] + r["sys_ms"], 2), r.get("server_ms", "-"),
                     round(r["rate"] / f["rate"], 2) if f else "-", r["order_problems"]])
    return _table("P1 both backends, same cases (msg/s; cpu = the bench process's CPU ms per message, "
                  "server = PostgreSQL's; fsync applies to the local files only)",
                  ["msgs", "convs", "fsync", "files", "cpu", "postgres", "cpu", "server", "pg/files",
                   "misordered"], rows)


def save(results: dict[str, Any], folder: Path) -> Path:
    """Writes the results as `bench/results/bench-<time>.json`; returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench-{results['started'].replace(':', '').replace('-', '')}.json"
    path.write_text(json.dumps({**results, "goals": goals(results)}, indent=2))
    return path
