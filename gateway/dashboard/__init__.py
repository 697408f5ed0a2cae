"""The web dashboard and Prometheus `/metrics` that `switchyard run` serves when `dashboard.port` is set.

Importing this package is cheap; the HTTP server and the metrics load with `gateway.dashboard.service`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gateway.settings import DashboardSettings, SettingsError


def dashboard_token(settings: DashboardSettings, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token the dashboard requires, read from the variable `token_env` names (None: no token).

    Raises SettingsError when `token_env` names a variable that is unset or empty.
    """
    if settings.token_env is None:
        return None
    token = environ.get(settings.token_env, "").strip()
    if not token:
        raise SettingsError(f"dashboard.token_env: the environment variable {settings.token_env} is not set "
                            "(it must hold the dashboard token)")
    return token
