"""`telemetry:` in settings.yaml: where OpenTelemetry traces go and what they may hold."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.strict import Strict


class TelemetrySettings(Strict):
    """`telemetry:`: OpenTelemetry traces of each message's path (gateway/telemetry/tracing.py); off unless set.
    Needs the `otel` extra (`pip install -e '.[otel]' in the clone`)."""

    exporter: Literal["otlp", "console"] = "otlp"  # console: each span printed as JSON on stdout
    endpoint: str = "http://127.0.0.1:4318"  # an OTLP/HTTP collector; `/v1/traces` is appended
    service_name: str = Field(default="switchyard", min_length=1)
    content: bool = False  # true: prompts, answers and message text as span attributes (else never)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)  # the share of new traces kept (a carried one follows)
