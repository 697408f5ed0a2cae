"""`python -m bench [--quick] [--only P1,P4] [--backends files,postgres] [--dir DIR] [--profile]`: runs the
scenarios of issue 5 (P1 also on the postgres backend of issue 13, P8 the live agent sessions of issue 22),
prints a table per scenario and writes bench/results/bench-<time>.json."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.acplive import p8
from bench.chatpath import p6
from bench.idle import p5
from bench.latency import p2
from bench.machine import machine_facts
from bench.pgthroughput import p1_both
from bench.providers import p3
from bench.report import render, save
from bench.throughput import file_calls, p1_variants, p4

RESULTS = Path(__file__).resolve().parent / "results"
FULL = {"sizes": [1000, 10000], "floor": 2000, "p2": 500, "p3": 200, "p4": 100_000, "p5": 30.0, "p6": 1000,
        "p6_latency": 100, "p8": 20}
QUICK = {"sizes": [1000], "floor": 500, "p2": 100, "p3": 30, "p4": 10_000, "p5": 5.0, "p6": 300, "p6_latency": 30,
         "p8": 5}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs (about a minute)")
    parser.add_argument("--only", default="P6,P1,P2,P3,P4,P5,P8", help="comma-separated scenarios to run")
    parser.add_argument("--dir", help="scratch folder (default: a temporary folder under /tmp)")
    parser.add_argument("--p4", type=int, help="messages in the P4 backlog (default 100,000; --quick 10,000)")
    parser.add_argument("--backends", default="files,postgres",
                        help="P1's queue backends; postgres needs SWITCHYARD_DSN or SWITCHYARD_TEST_DSN (else skipped)")
    parser.add_argument("--profile", action="store_true",
                        help="profile P1 (1k messages, 16 conversations, fsync off) with pyinstrument and stop")
    return parser.parse_args(argv)


async def _run(only: set[str], scratch: Path, sizes: dict[str, Any], results: dict[str, Any]) -> None:
    for name in ("P6", "P1", "P2", "P3", "P4", "P5", "P8"):
        if name in only:
            await _scenario(name, scratch, sizes, results)
            save(results, RESULTS)  # a long run keeps what it measured so far
            print(f"{name} done", file=sys.stderr, flush=True)


async def _scenario(name: str, scratch: Path, sizes: dict[str, Any], results: dict[str, Any]) -> None:
    if name == "P6":
        results["P6"] = await p6(scratch, count=sizes["p6"], conversations=16, latency_count=sizes["p6_latency"])
    elif name == "P1":
        results["P1"], results["P1pg"] = await p1_both(scratch, sizes=sizes["sizes"], conversations=[1, 16, 256],
                                                       fsyncs=[True, False], floor_count=sizes["floor"],
                                                       postgres="postgres" in sizes["backends"])
        results["P1x"] = await p1_variants(scratch, count=1000, conversations=16, floor_count=sizes["floor"])
        results["P1calls"] = await file_calls(scratch, count=300, conversations=16)
    elif name == "P2":
        results["P2"] = await asyncio.to_thread(p2, scratch, count=sizes["p2"], interval_s=0.02)
        results["P2x"] = [await asyncio.to_thread(p2, scratch, count=sizes["p2"] // 2, interval_s=0.02,
                                                  gateway_only=True),
                          await asyncio.to_thread(p2, scratch, count=12, interval_s=0.5, polling=True)]
    elif name == "P3":
        results["P3"] = await p3(scratch, calls=sizes["p3"])
    elif name == "P4":
        results["P4"] = await p4(scratch, count=sizes["p4"], conversations=16, fsync=False)
    elif name == "P5":
        results["P5"] = await asyncio.to_thread(p5, scratch, seconds=sizes["p5"])
    elif name == "P8":
        results["P8"] = await p8(scratch, turns=sizes["p8"])


def _profile(scratch: Path) -> None:
    try:
        from pyinstrument import Profiler
    except ImportError:
        sys.exit("--profile needs pyinstrument: .venv/bin/pip install pyinstrument (not a project dependency)")
    from bench.throughput import throughput

    profiler = Profiler(interval=0.0005)
    profiler.start()
    asyncio.run(throughput(scratch / "profile", 1000, 16, fsync=False))
    profiler.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "profile-p1.html").write_text(profiler.output_html())
    print(profiler.output_text(unicode=True, color=False))
    print(f"html: {RESULTS / 'profile-p1.html'}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="switchyard-bench-")).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        if args.profile:
            _profile(scratch)
            return 0
        started = time.monotonic()
        results: dict[str, Any] = {"started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                   "mode": "quick" if args.quick else "full", "machine": machine_facts(scratch)}
        only = {name.strip().upper() for name in args.only.split(",")}
        sizes = {**(QUICK if args.quick else FULL), **({"p4": args.p4} if args.p4 else {}),
                 "backends": {b.strip().lower() for b in args.backends.split(",")}}
        asyncio.run(_run(only, scratch, sizes, results))
        results["duration_s"] = round(time.monotonic() - started, 1)
        print(render(results))
        print(f"took {results['duration_s']} s; json: {save(results, RESULTS)}")
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
