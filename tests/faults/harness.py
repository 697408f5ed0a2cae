"""`switchyard run` as a process on a temporary home, driven through files (for the fault tests)."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path
from typing import Any

import yaml

from gateway.models import IncomingPayload
from tests.process import SwitchyardProcess, clean_environment

REPO = Path(__file__).resolve().parents[2]
# No workflows: the built-in `rules` selector answers each message with `list_workflows`, in process.
FAST_ORCHESTRATOR = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "workflows": {}}


def message(seq: int, conversation: str, text: str | None = None, **fields: Any) -> IncomingPayload:
    """A console-style message whose id names its conversation and sequence number."""
    values: dict[str, Any] = {"channel": "console", "channelProfileId": "console", "sender": "Ada",
                              "senderId": conversation, "message": text or f"hello {seq}",
                              "timestamp": 1_700_000_000_000 + seq, "messageId": f"{conversation}-{seq:05d}",
                              "conversationId": conversation}
    values.update(fields)
    return IncomingPayload(**values)


class GatewayRun(SwitchyardProcess):
    """Configures a home, starts / kills / stops `switchyard run` (as another user when asked), and
    reads what it wrote."""

    def __init__(self, root: Path, env: dict[str, str] | None = None, user: str | None = None,
                 log: Path | None = None):
        super().__init__(root, clean_environment({"PYTHONPATH": str(REPO), **(env or {})}),
                         log=log or root.parent / f"{root.name}-run.log")
        self.user = user
        self.dropped = 0

    def configure(self, queue: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None,
                  **settings: Any) -> None:
        self.home.create()
        base: dict[str, Any] = {"queue": {"backoff_initial_ms": 50, "backoff_max_ms": 400, **(queue or {})},
                                "channels": [], **settings}
        self.home.settings_file.write_text(yaml.safe_dump(base))
        workspace = self.home.orchestrators / "main"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(orchestrator or FAST_ORCHESTRATOR))

    def command(self) -> list[str]:
        """`python -m gateway.cli run`, through setpriv when the test runs it as another user."""
        argv = [sys.executable, "-m", "gateway.cli", "--home", str(self.home.root), "run"]
        if self.user:
            account = pwd.getpwnam(self.user)
            argv = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", *argv]
        return argv

    def drop(self, payload: IncomingPayload | bytes, name: str | None = None) -> str:
        """Writes a payload into incoming/ the way other programs must (`.tmp`, then rename)."""
        self.dropped += 1
        name = name or f"{self.dropped:07d}.json"
        data = payload if isinstance(payload, bytes) else payload.to_json()
        tmp = self.home.incoming / f"{name}.tmp"
        tmp.write_bytes(data)
        os.rename(tmp, self.home.incoming / name)
        return name

    def queued_files(self) -> int:
        """Payload files still in incoming/ or processing/ (claimed, not yet answered)."""
        incoming = sum(1 for p in self.home.incoming.glob("*.json"))
        return incoming + sum(1 for p in self.home.processing.rglob("*.json"))
