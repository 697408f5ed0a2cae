"""Helpers for the dashboard's end-to-end tests: start `switchyard run` with it on, talk HTTP to it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard

HOSTILE = '<img src=x onerror="window.pwned=1">&amp;</td><script>window.pwned=2</script>'
FAILS_3_TIMES = "fail-until 4"  # the fake selector fails 3 times (max_attempts), then answers
BEAT = {"id": "beat", "type": "heartbeat", "interval_sec": 0.5, "orchestrator": "beat"}  # the default one: rules


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), type("NoRedirect", (
    urllib.request.HTTPRedirectHandler,), {"redirect_request": lambda *args, **kwargs: None})())


def fetch(url: str, *, headers: dict[str, str] | None = None, data: bytes | None = None) -> Answer:
    """One HTTP request without proxies or redirects; error statuses are answers too."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read())


def start_with_dashboard(switchyard: Switchyard, *, channels: list[dict[str, Any]] | None = None,
                         **dashboard: Any) -> str:
    """Configures and starts the gateway with the dashboard on a free port; returns its address."""
    switchyard.configure({"channels": channels if channels is not None else [BEAT],
                          "orchestrators": {"main": {"workspace": "orchestrators/main"},
                                            "beat": {"workspace": "orchestrators/beat"}},
                          "dashboard": {"port": 0, "refresh_sec": 0.3, **dashboard}})
    switchyard.start()
    return str(wait_until(lambda: _dashboard_url(switchyard), 15))


def _dashboard_url(switchyard: Switchyard) -> str | None:
    try:
        return json.loads((switchyard.home.state / "gateway.json").read_bytes()).get("dashboard")
    except (OSError, ValueError):
        return None


def make_dead_letter(switchyard: Switchyard, conversation: str = HOSTILE) -> dict[str, Any]:
    """Sends a message that fails every attempt and waits until it is a dead letter; returns the payload."""
    sent = switchyard.send(FAILS_3_TIMES, conversationId=conversation, sender=HOSTILE)
    wait_until(lambda: any(e.get("conversation") == conversation for e in switchyard.events("job.failed.final")),
               30)
    return sent
