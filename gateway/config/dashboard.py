"""`dashboard:` in settings.yaml: the web dashboard and `/metrics`, and when they need a token."""

from __future__ import annotations

import ipaddress

from pydantic import Field, model_validator

from gateway.config.strict import Strict


class DashboardSettings(Strict):
    """The web dashboard and `/metrics` served by `switchyard run` (off unless `port` is set)."""

    port: int | None = Field(default=None, ge=0, le=65535)  # 0: any free port (written to status)
    host: str = "127.0.0.1"
    token_env: str | None = Field(default=None, min_length=1)
    refresh_sec: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _check_token(self) -> DashboardSettings:
        if self.port is not None and self.token_env is None and not is_loopback(self.host):
            raise ValueError(f"token_env: required when host is not a loopback address (host: {self.host!r}); "
                             "name an environment variable holding the dashboard token")
        return self


def is_loopback(host: str) -> bool:
    """Whether a host name or address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
