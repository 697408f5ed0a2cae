"""What the trace tests share: an OTLP/HTTP receiver on 127.0.0.1 that decodes what arrives (opentelemetry-proto),
and a `say` channel plugin whose messages come in through the gateway's own sink, as a platform's would.

The `say` channel (loaded with SWITCHYARD_PLUGINS=tests.e2e.traces_kit) reads `<home>/say/<messageId>.txt` files:
each one becomes a message of the conversation `<messageId>` with the file's text; replies are recorded, sent
nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gateway import ChannelContext, ChannelProfile, hookimpl
from gateway.testing import FakeChannel, make_incoming


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector got it: its trace, its name, its parent, its attributes and the process's role."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    role: str
    service: str
    status: str = ""  # the status message (why it failed)


class OtlpReceiver:
    """An OTLP/HTTP trace receiver (POST /v1/traces, protobuf) in a thread; `spans` is what it decoded."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    import gzip

                    body = gzip.decompress(body)
                receiver.take(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    def take(self, path: str, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        assert path == "/v1/traces", path
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.requests += 1
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {kv.key: _value(kv.value) for kv in span.attributes}
                    self.spans.append(ReceivedSpan(span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                                                   span.name, attributes, resource.get("switchyard.role", ""),
                                                   resource.get("service.name", ""), span.status.message))

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in list(self.spans) if span.name == name]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def say(home: Path, message_id: str, text: str) -> None:
    """Makes the `say` channel of the gateway on `home` receive `text` as the message `message_id`."""
    folder = home / "say"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{message_id}.tmp").write_text(text)
    (folder / f".{message_id}.tmp").rename(folder / f"{message_id}.txt")


class SayChannel(FakeChannel):
    """A channel whose platform is the folder `<home>/say/`: each file there is a message, handed to the sink."""

    name = "say"

    def __init__(self, profile_id: str, folder: Path):
        super().__init__("say", profile_id)
        self.folder = folder
        self._reading: asyncio.Task[None] | None = None

    async def start(self, sink: Any) -> None:
        await super().start(sink)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._reading = asyncio.create_task(self._read(sink), name=f"say:{self.profile_id}")

    async def _read(self, sink: Any) -> None:
        while True:
            for path in sorted(self.folder.glob("*.txt")):
                await sink(make_incoming(path.read_text(), channel="say", channelProfileId=self.profile_id,
                                         messageId=path.stem, conversationId=path.stem, senderId=path.stem))
                path.unlink()
            await asyncio.sleep(0.02)  # the fake platform's poll

    async def stop(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        await super().stop()


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["say"]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> SayChannel | None:
    return SayChannel(profile.id, context.home.root / "say") if profile.type == "say" else None
