"""P5 idle: CPU and memory of a `switchyard run` process with nothing to do but its channels' upkeep."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.process import REPO, GatewayProcess, cpu_seconds, memory_kib
from bench.rig import write_home
from gateway.settings import ChannelProfile, Settings

HEARTBEAT_INTERVAL_S = 15


def _start_fakes() -> tuple[subprocess.Popen[str] | None, dict[str, Any]]:
    """The fake platforms in a helper process, or (None, reason) when they cannot start here."""
    helper = subprocess.Popen([sys.executable, "-m", "bench.fakes_host"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert helper.stdout is not None
    line = helper.stdout.readline()
    if not line:
        error = helper.stderr.read() if helper.stderr else ""
        helper.wait(10)
        return None, {"error": error.strip().splitlines()[-1] if error.strip() else "no output"}
    return helper, json.loads(line)


def p5(scratch: Path, *, seconds: float, settle_s: float = 5.0, fakes: bool = True) -> dict[str, Any]:
    """Starts the gateway with a heartbeat (and the four chat channels against fakes), lets it settle,
    then measures its CPU share over `seconds` and its memory."""
    fake: dict[str, Any] = {"error": "not requested"}
    helper = None
    if fakes:
        helper, fake = _start_fakes()
    channels = [ChannelProfile.model_validate({"id": "beat", "type": "heartbeat",
                                               "interval_sec": HEARTBEAT_INTERVAL_S})]
    channels += [ChannelProfile.model_validate(profile) for profile in fake.get("channels", [])]
    root = scratch / "p5"
    write_home(root, Settings(channels=channels))
    try:
        env = {str(k): str(v) for k, v in (fake.get("env") or {}).items()}
        with GatewayProcess(root, env=env, plugins="") as gateway:
            time.sleep(settle_s)  # connections established, imports done: measure the steady state
            cpu_before, wall_before = cpu_seconds(gateway.pid), time.monotonic()
            time.sleep(seconds)
            cpu = cpu_seconds(gateway.pid) - cpu_before
            wall = time.monotonic() - wall_before
            memory = memory_kib(gateway.pid)
            status = json.loads((root / "queue" / "state" / "gateway.json").read_text()).get("channels", {})
    finally:
        if helper is not None:
            helper.communicate(timeout=10)
    shutil.rmtree(root, ignore_errors=True)
    return {"seconds": round(wall, 1), "cpu_seconds": round(cpu, 3), "cpu_percent": round(100 * cpu / wall, 3),
            "rss_mib": round(memory.get("VmRSS", 0) / 1024, 1), "peak_rss_mib": round(memory.get("VmHWM", 0) / 1024, 1),
            "heartbeat_interval_s": HEARTBEAT_INTERVAL_S,
            "channels": {profile: info.get("state") for profile, info in status.items()},
            "fakes_error": fake.get("error")}
