"""Counts a process's PostgreSQL statements and round trips, or profiles it, for the bench only.

Loaded by a bench process (`BENCH_PROBE=queries|profile|cprofile`, `BENCH_PROBE_DIR=DIR`) through the bench plugin
module: `SIGUSR2` starts (or restarts) counting or profiling, `SIGUSR1` writes `DIR/<kind>-<pid>.json`
(counts) or `DIR/profile-<kind>-<pid>.txt` (pyinstrument, or cProfile's flat and cumulative tables with
its `.prof` beside: CPU time of the main thread). The counting wraps
psycopg's generators and cursor methods in this process only; nothing of Switchyard is changed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

STATEMENTS: Counter[str] = Counter()  # statement (first 90 characters of its text) → how many
COUNTS: Counter[str] = Counter()  # "round_trips", "pipeline_syncs", "connects"
_profiler: Any = None


def _text(query: Any) -> str:
    text = query.decode() if isinstance(query, bytes) else str(getattr(query, "_obj", query))
    return " ".join(text.split())[:90]


def _counting(generator: Any, kind: str) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        COUNTS[kind] += 1
        return generator(*args, **kwargs)

    return counted


def _install_counters() -> None:
    """Wraps what sends to the server: each `execute` generator is one round trip, each pipeline sync
    one; statements by text from the cursors and the connection's own commands."""
    import psycopg
    from psycopg import _connection_base, _cursor_base, _pipeline_base, generators

    _cursor_base.execute = _counting(_cursor_base.execute, "round_trips")  # type: ignore[attr-defined]
    generators.execute = _counting(generators.execute, "round_trips")
    generators.connect = _counting(generators.connect, "connects")
    _pipeline_base.BasePipeline._enqueue_sync = _counting(  # type: ignore[method-assign]
        _pipeline_base.BasePipeline._enqueue_sync, "pipeline_syncs")
    exec_command = _connection_base.BaseConnection._exec_command

    def command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        STATEMENTS[_text(command)] += 1
        return exec_command(self, command, *args, **kwargs)

    _connection_base.BaseConnection._exec_command = command  # type: ignore[method-assign]
    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        for name in ("execute", "executemany"):
            original = getattr(cls, name)

            def wrapped(self: Any, query: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                STATEMENTS[_text(query)] += 1
                return _original(self, query, *args, **kwargs)

            setattr(cls, name, wrapped)


def _start(signum: int, frame: Any) -> None:
    global _profiler
    STATEMENTS.clear()
    COUNTS.clear()
    if os.environ.get("BENCH_PROBE") == "cprofile":
        import cProfile

        _profiler = cProfile.Profile(time.thread_time)  # CPU time of the main thread
        _profiler.enable()
    if os.environ.get("BENCH_PROBE") == "profile":
        from pyinstrument import Profiler
        from pyinstrument.stack_sampler import get_stack_sampler

        if _profiler is not None and _profiler.is_running:
            _profiler.stop()
        get_stack_sampler().timer_func = time.thread_time  # CPU time of the main thread, not its waits
        _profiler = Profiler(interval=0.0005, async_mode="disabled")
        _profiler.start()


def _dump(signum: int, frame: Any) -> None:
    folder = Path(os.environ["BENCH_PROBE_DIR"])
    kind = os.environ.get("BENCH_PROBE_KIND", "process")
    if os.environ.get("BENCH_PROBE") == "cprofile" and _profiler is not None:
        import io
        import pstats

        _profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(_profiler, stream=out)
        stats.sort_stats("tottime").print_stats(45)
        stats.sort_stats("cumulative").print_stats(80)
        (folder / f"profile-{kind}-{os.getpid()}.txt").write_text(out.getvalue())
        stats.dump_stats(folder / f"profile-{kind}-{os.getpid()}.prof")  # for pstats or a viewer
        return
    if _profiler is not None and _profiler.is_running:
        _profiler.stop()
        text = _profiler.output_text(unicode=False, color=False, show_all=False)
        (folder / f"profile-{kind}-{os.getpid()}.txt").write_text(text)
        return
    data = {"counts": dict(COUNTS), "statements": dict(STATEMENTS.most_common())}
    tmp = folder / f".{kind}-{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data))
    os.rename(tmp, folder / f"{kind}-{os.getpid()}.json")


def install() -> None:
    """Sets the probe up in this process when BENCH_PROBE asks for it."""
    probe = os.environ.get("BENCH_PROBE")
    if not probe:
        return
    if probe == "queries":
        _install_counters()
    signal.signal(signal.SIGUSR2, _start)
    signal.signal(signal.SIGUSR1, _dump)
