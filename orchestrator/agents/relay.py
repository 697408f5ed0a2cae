"""The two halves of `network: model-only` (orchestrator/agents/sandbox.py): the relay outside, a unix socket per
allowed (host, port) that connects to that host and port only, and the relay inside the sandbox's network
namespace, run by the system python3 before the CLI, listening where the CLI connects.

A named host resolves inside to a loopback address of its own (a generated /etc/hosts); every other lookup is
answered NXDOMAIN at once by the relay inside (a resolver of its own, as codex's, would otherwise wait seconds
for a name server that is not there). TLS stays end to end: the relays move bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

RELAY_DIR = "/run/switchyard-relay"  # where the relay's sockets appear inside
CONNECT_TIMEOUT_SEC = 30.0


def listeners(targets: Sequence[tuple[str, int]]) -> dict[str, object]:
    """Where the relay inside listens for each target: its own address when it is one, else a loopback address
    of its own that /etc/hosts names the host by."""
    listen, hosts = [], {}
    for index, (host, port) in enumerate(targets):
        address = host if _is_loopback(host) else f"127.0.0.{index + 2}"
        if address != host:
            hosts[host] = address
        listen.append([address, port, f"{RELAY_DIR}/{index}.sock"])
    return {"listen": listen, "hosts": hosts}


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ModelRelay:
    """The outer half of `model-only`: a unix socket per allowed (host, port), each connection relayed to that
    host and port only. Its folder (0700, private to this run) is bound into the sandbox read-only."""

    def __init__(self, targets: Sequence[tuple[str, int]]):
        self.targets = list(targets)
        self.folder = Path(tempfile.mkdtemp(prefix="switchyard-relay-"))
        self._servers: list[asyncio.Server] = []

    async def __aenter__(self) -> ModelRelay:
        hosts = listeners(self.targets)["hosts"]
        assert isinstance(hosts, dict)
        lines = ["127.0.0.1 localhost", "::1 localhost"] + [f"{a} {h}" for h, a in hosts.items()]
        (self.folder / "hosts").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for index, (host, port) in enumerate(self.targets):
            self._servers.append(await asyncio.start_unix_server(
                functools.partial(self._relay, host=host, port=port), path=str(self.folder / f"{index}.sock")))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for server in self._servers:
            server.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
        try:
            upstream_r, upstream_w = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_SEC)
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_w), _pipe(upstream_r, writer), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


# The inner half of `model-only`, run by the system python3 inside the sandbox before the CLI: it listens where
# the CLI connects (loopback only: the namespace has nothing else) and passes each connection to its socket,
# then runs the CLI as its child and exits with its code (a signal is passed on).
INNER_RELAY = r"""
import json, os, signal, socket, subprocess, sys, threading
spec = json.loads(sys.argv[1])
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve(listener, path):
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
def names():
    # Answers every DNS query NXDOMAIN at once (a resolver of its own, as codex's, would wait seconds for a name
    # server that is not there); the relayed hosts are in /etc/hosts.
    while True:
        query, peer = dns.recvfrom(512)
        if len(query) >= 12:
            dns.sendto(query[:2] + bytes([0x81 | (query[2] & 0x01), 0x83]) + query[4:6] + bytes(6) + query[12:], peer)
try:
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    threading.Thread(target=names, daemon=True).start()
except OSError:
    pass
for address, port, path in spec["listen"]:
    listener = socket.socket(socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
child = subprocess.Popen(sys.argv[2:])
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda n, f: child.send_signal(n))
sys.exit(child.wait() % 256)
"""
