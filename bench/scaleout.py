"""P7 scale-out (issue 13): 1, 2 and 4 `switchyard worker` processes on one PostgreSQL database.

Two paths. `light`: the selector is a provider that takes 200 ms (in process, `asyncio.sleep`, so a
2-core machine measures the queue, not process spawns) and answers `command_invoke list_workflows`
(no run, no agent). `chat` (issue 21, the path users take): the `rules` selector starts the one-step
workflow `chat`, whose agent is an in-process provider taking 200 ms (bench.scalechat); a `switchyard
run` owning the bench channel's profile delivers the replies; the file backend's `switchyard run` on
the same orchestrator is measured first, as the reference. 2,000 messages over 64 conversations
dropped at once into the workers' `incoming/` folders (conversation i on host i mod N); throughput from
the first drop to the last message marked done (light) or the last reply delivered (chat). Then, for
the light path, the added latency: one worker, idle, 100 messages one at a time, from the file's rename
into `incoming/` to the reply's NOTIFY from `switchyard_outbox`, minus the provider's 200 ms. Each
worker count gets a fresh schema.

    SWITCHYARD_TEST_DSN=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python -m bench.scaleout
    ... -m bench.scaleout --messages 500 --workers 1,2   # quicker
    ... -m bench.scaleout --paths chat --workers 1,4 --probe queries   # statements per chat message

Also a plugin (SWITCHYARD_PLUGINS=bench.scaleout) giving the workers the `sleepy` and `agent` providers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import probe, scalechat
from bench.process import cpu_split
from gateway import hookimpl

PROVIDER_S = 0.2
LIGHT_ORCHESTRATOR = {"selector": {"provider": "sleepy"}, "diagnostics": {"provider": "rules"}, "workflows": {}}
DECISION = json.dumps({"action": "command_invoke", "function": "list_workflows", "arguments": {}})
REPO = Path(__file__).resolve().parents[1]


@hookimpl
def switchyard_providers() -> dict[str, Any]:
    """`sleepy`: a selector that takes PROVIDER_S and lists the workflows."""

    async def sleepy(prompt: str, request: dict[str, Any]) -> str:
        await asyncio.sleep(PROVIDER_S)
        return DECISION

    return {"sleepy": sleepy, "agent": scalechat.agent}


probe.install()  # in a bench worker started with BENCH_PROBE (bench/probe.py); nothing otherwise


def _payload(seq: int, conversation: str, profile: str = "console", channel: str = "console") -> bytes:
    return json.dumps({"channel": channel, "channelProfileId": profile, "sender": "b", "senderId": conversation,
                       "message": f"hello {seq}", "timestamp": 1_700_000_000_000 + seq,
                       "messageId": f"{conversation}-{seq:06d}", "conversationId": conversation}).encode()


class Cluster:
    """N worker processes with their own homes on a fresh schema; on the chat path also a `switchyard run`
    owning the bench channel's profile (named after the schema), which delivers the replies."""

    def __init__(self, base_dsn: str, root: Path, workers: int, concurrency: int, path: str = "light",
                 env: dict[str, str] | None = None):
        import psycopg
        from psycopg.conninfo import make_conninfo

        self.schema = f"sy_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(base_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.base_dsn = base_dsn
        self.path = path
        self.env = env or {}
        # the workers' connections carry the schema's name, so their server processes can be found (CPU)
        self.dsn = make_conninfo(base_dsn, options=f"-c search_path={self.schema}", application_name=self.schema)
        self._monitor: Any = None
        from gateway.backends.postgres import schema

        schema.migrate(self.dsn)
        self.homes = [root / f"{self.schema}-{i}" for i in range(workers)]
        self.run_home = root / f"{self.schema}-run" if path == "chat" else None
        self.processes: list[subprocess.Popen[bytes]] = []
        self.run_process: subprocess.Popen[bytes] | None = None
        orchestrator = scalechat.CHAT_ORCHESTRATOR if path == "chat" else LIGHT_ORCHESTRATOR
        for home in self.homes:
            scalechat.write_home(home, {"backend": "postgres", "fsync": False, "max_concurrency": concurrency,
                                        "duplicate_window_sec": 0}, [], orchestrator)
        if self.run_home is not None:
            scalechat.write_home(self.run_home, {"backend": "postgres", "fsync": False, "max_concurrency": 1,
                                                 "duplicate_window_sec": 0},
                                 [{"id": self.schema, "type": "bench"}], orchestrator)

    def payload(self, seq: int, conversation: str) -> bytes:
        if self.path == "chat":
            return _payload(seq, conversation, self.schema, "bench")
        return _payload(seq, conversation)

    def start(self) -> None:
        env = {**os.environ, "SWITCHYARD_DSN": self.dsn, "SWITCHYARD_PLUGINS": "bench.scaleout,bench.plugin",
               "PYTHONPATH": str(REPO), **self.env}
        for home in self.homes:
            self.processes.append(_spawn(home, "worker", {**env, "BENCH_PROBE_KIND": "worker"}))
        if self.run_home is not None:
            self.run_process = _spawn(self.run_home, "run", {**env, "BENCH_PROBE_KIND": "run"})
        everyone = [*self.processes, *([self.run_process] if self.run_process else [])]
        deadline = time.monotonic() + 60
        while self.count("SELECT count(*) FROM switchyard_processes") < len(everyone):
            if time.monotonic() > deadline or any(p.poll() is not None for p in everyone):
                raise RuntimeError(f"workers did not start; see {self.homes[0].with_suffix('.log')}")
            time.sleep(0.1)

    def count(self, sql: str) -> int:
        """One figure from the schema, on one kept connection (not a new server process per poll)."""
        import psycopg

        if self._monitor is None:
            self._monitor = psycopg.connect(self.dsn, autocommit=True, application_name="sy_bench_monitor")
        row = self._monitor.execute(sql).fetchone()
        return int(row[0]) if row else 0

    def done(self) -> int:
        """Messages through: marked done (light), or with their reply delivered (chat)."""
        if self.path == "chat":
            return self.count("SELECT count(*) FROM switchyard_outbox WHERE state = 'sent'")
        return self.count("SELECT count(*) FROM switchyard_messages WHERE state = 'done'")

    def cpu(self) -> dict[int, tuple[float, float]]:
        """(user, system) CPU seconds so far of each worker process (by pid) and of each server process
        serving them."""
        backends = {pid for (pid,) in self._monitor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.schema,))}
        seconds = {}
        ours = [*(p.pid for p in self.processes), *([self.run_process.pid] if self.run_process else [])]
        for pid in [*ours, *backends]:
            with contextlib.suppress(OSError):
                seconds[pid] = cpu_split(pid)
        return seconds

    def drop(self, home: Path, name: str, data: bytes) -> None:
        incoming = home / "queue" / "incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        tmp = incoming / f"{name}.tmp"
        tmp.write_bytes(data)
        os.rename(tmp, incoming / name)

    def stop(self) -> None:
        import psycopg

        if self._monitor is not None:
            self._monitor.close()
        everyone = [*self.processes, *([self.run_process] if self.run_process else [])]
        for process in everyone:
            process.terminate()
        for process in everyone:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        with psycopg.connect(self.base_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def _spawn(home: Path, command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = open(home.with_suffix(".log"), "wb")  # noqa: SIM115 - kept open for the process's life
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "--home", str(home), command],
                            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def throughput(base_dsn: str, root: Path, workers: int, messages: int, conversations: int,
               concurrency: int, path: str = "light") -> dict[str, Any]:
    cluster = Cluster(base_dsn, root, workers, concurrency, path)
    try:
        cluster.start()
        cluster.count("SELECT 1")
        cpu_before, machine_before = cluster.cpu(), _machine_ticks()
        started = time.perf_counter()
        for seq in range(messages):
            conversation = f"c{seq % conversations:03d}"
            cluster.drop(cluster.homes[(seq % conversations) % workers], f"{seq:07d}.json",
                         cluster.payload(seq, conversation))
        while cluster.done() < messages:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        cpu_after, machine_after = cluster.cpu(), _machine_ticks()
        workers_pids = {p.pid for p in cluster.processes}
        run_pid = cluster.run_process.pid if cluster.run_process else None
        split = {pid: [a - b for a, b in zip(cpu_after[pid], cpu_before.get(pid, (0.0, 0.0)), strict=True)]
                 for pid in cpu_after}
        used = {pid: user + system for pid, (user, system) in split.items()}
        worker_s = sum(v for pid, v in used.items() if pid in workers_pids)
        worker_sys_s = sum(split[pid][1] for pid in split if pid in workers_pids)
        run_s = used.get(run_pid, 0.0) if run_pid else 0.0
        server_s = sum(v for pid, v in used.items() if pid not in workers_pids and pid != run_pid)
        busy, total = (a - b for a, b in zip(machine_after, machine_before, strict=True))
        misordered = cluster.count(
            "SELECT count(*) FROM (SELECT payload->>'messageId' AS m, lag(payload->>'messageId') OVER "
            "(PARTITION BY conversation ORDER BY id) AS prev FROM switchyard_outbox) s WHERE prev > m")
        replies = cluster.count("SELECT count(*) FROM switchyard_outbox")
        # the agent's answer names its process: how many messages the `run` answered itself
        by_run = cluster.count("SELECT count(*) FROM switchyard_outbox WHERE payload->>'message' LIKE "
                               f"'%(pid {int(run_pid)})%'") if run_pid else 0
    finally:
        cluster.stop()
    by_workers = messages - by_run
    row = {"path": path, "workers": workers, "messages": messages, "seconds": round(elapsed, 2),
           "msg_s": round(messages / elapsed, 1), "replies": replies, "misordered": misordered,
           # the workers' own rate: what they answered over the run (the `run` answers some messages too,
           # more of them beside one worker than beside four, which would flatter one worker's figure)
           "workers_msg_s": round(by_workers / elapsed, 1),
           # CPU per message: all worker processes (per message they answered), the PostgreSQL processes
           # serving them; the machine's busy share over the run (every process on it, other sessions'
           # included), of all its cores
           "worker_cpu_ms": round(worker_s * 1000 / by_workers, 2),
           "worker_sys_ms": round(worker_sys_s * 1000 / by_workers, 2),
           "pg_cpu_ms": round(server_s * 1000 / messages, 2),
           "worker_cpu_pct": round(worker_s * 100 / elapsed / max(workers, 1), 1),
           "machine_busy_pct": round(busy * 100 / total, 1) if total else None}
    if run_pid:
        row.update(run_cpu_ms=round(run_s * 1000 / messages, 2), answered_by_run=by_run,
                   total_cpu_ms=round((worker_s + run_s + server_s) * 1000 / messages, 2))
    return row


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def added_latency(base_dsn: str, root: Path, count: int) -> dict[str, Any]:
    """Drop-to-reply time of one message at a time on an idle worker, minus the provider's time."""
    import psycopg

    cluster = Cluster(base_dsn, root, 1, 8)
    samples: list[float] = []
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as listener:
            listener.execute("LISTEN switchyard_outbox")
            # NOTIFY channels are per database, not per schema: other schemas' replies are told apart by
            # this run's own profile name (the notification's payload is `channel/profile`)
            ours = f"console/{cluster.schema}"
            for seq in range(count):
                for _ in listener.notifies(timeout=0):  # nothing stale may count for this message
                    pass
                sent = time.perf_counter()
                cluster.drop(cluster.homes[0], f"{seq:07d}.json", _payload(seq, "lat", cluster.schema))
                deadline = sent + 10
                while time.perf_counter() < deadline:
                    if any(n.payload == ours for n in listener.notifies(timeout=deadline - time.perf_counter(),
                                                                           stop_after=1)):
                        samples.append((time.perf_counter() - sent - PROVIDER_S) * 1000)
                        break
                time.sleep(0.02)
    finally:
        cluster.stop()
    samples.sort()
    return {"messages": len(samples), "p50_ms": round(statistics.median(samples), 2),
            "p90_ms": round(samples[int(len(samples) * 0.9) - 1], 2), "max_ms": round(samples[-1], 2)}


def probed(base_dsn: str, root: Path, args: argparse.Namespace, path: str, workers: int) -> None:
    """Statements and round trips per message (`--probe queries`) or profiles (`--probe profile`)."""
    folder = root / f"probe-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    cluster = Cluster(base_dsn, root, workers, args.concurrency, path,
                      env={"BENCH_PROBE": args.probe, "BENCH_PROBE_DIR": str(folder)})
    try:
        cluster.start()
        figures = scalechat.probe(cluster, args.messages, args.conversations, folder)
    finally:
        cluster.stop()
    print(json.dumps({"path": path, "workers": workers, "probe": args.probe, **figures}, indent=1))
    for profile in sorted(folder.glob("profile-*.txt")):
        print(f"--- {profile.name}\n{profile.read_text()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("SWITCHYARD_TEST_DSN"))
    parser.add_argument("--paths", default="light,chat", help="light, chat or both")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8, help="queue.max_concurrency of each worker")
    parser.add_argument("--latency", type=int, default=100)
    parser.add_argument("--no-files", action="store_true", help="chat path: skip the file backend's reference")
    parser.add_argument("--probe", choices=["queries", "profile", "cprofile"],
                        help="instead of throughput: count statements per message, or profile (bench/probe.py)")
    args = parser.parse_args()
    if not args.dsn:
        parser.error("set SWITCHYARD_TEST_DSN or --dsn")
    with tempfile.TemporaryDirectory(prefix="sy-scaleout-") as scratch:
        root = Path(os.environ.get("BENCH_KEEP") or scratch)
        for path in args.paths.split(","):
            if args.probe:
                for workers in (int(n) for n in args.workers.split(",")):
                    probed(args.dsn, root, args, path, workers)
                continue
            rows = []
            if path == "chat" and not args.no_files:
                files = scalechat.files_chat(root, args.messages, args.conversations, args.concurrency)
                print(json.dumps(files), flush=True)
            for workers in (int(n) for n in args.workers.split(",")):
                row = throughput(args.dsn, root, workers, args.messages, args.conversations, args.concurrency, path)
                rows.append(row)
                print(json.dumps(row), flush=True)
            if path == "chat" and not args.no_files:
                print(f"files, one run: {files['msg_s']:7.1f} msg/s  ({files['messages']} messages in "
                      f"{files['seconds']} s); CPU ms/msg: run {files['run_cpu_ms']} "
                      f"(system {files['run_sys_ms']})")
            base, own_base = rows[0]["msg_s"], rows[0]["workers_msg_s"]
            for row in rows:
                run = (f", run {row['run_cpu_ms']} (answered {row['answered_by_run']} itself), total "
                       f"{row['total_cpu_ms']}" if "run_cpu_ms" in row else "")
                own = (f"; the workers' own {row['workers_msg_s']:.1f} msg/s ×{row['workers_msg_s'] / own_base:.2f}"
                       if "run_cpu_ms" in row else "")
                print(f"{path}, {row['workers']} worker(s): {row['msg_s']:7.1f} msg/s  "
                      f"×{row['msg_s'] / base:.2f}{own}  "
                      f"({row['messages']} messages in {row['seconds']} s, misordered {row['misordered']}); "
                      f"CPU ms/msg: workers {row['worker_cpu_ms']} (system {row['worker_sys_ms']}), "
                      f"PostgreSQL {row['pg_cpu_ms']}{run}; each "
                      f"worker {row['worker_cpu_pct']} % of a core; machine busy {row['machine_busy_pct']} %")
        if args.latency and not args.probe and "light" in args.paths.split(","):
            latency = added_latency(args.dsn, root, args.latency)
            print(json.dumps(latency))
            print(f"added latency over the provider's {PROVIDER_S * 1000:.0f} ms: p50 {latency['p50_ms']} ms, "
                  f"p90 {latency['p90_ms']} ms, max {latency['max_ms']} ms")


if __name__ == "__main__":
    main()
