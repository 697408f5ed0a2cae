"""A fake model API on 127.0.0.1: just enough of the Anthropic Messages, OpenAI Responses and
Gemini generateContent APIs for the agent CLIs (real ones and the fakes in tests/fakes/clis) to get an
answer, recording every request (method, path, headers, JSON body).

Any path prefix is accepted (a gateway's base URL may carry one): the API is chosen by how the path ends.
Streaming is answered as the real APIs do (SSE) when the request asks for it.

Run alone to watch what a CLI sends: `python -m tests.fakes.model_server [port]` prints one JSON line per request.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.base import FakeServer

DEFAULT_REPLY = "hello from the fake model"


@dataclass(frozen=True)
class Usage:
    """The tokens every answer reports, each API spelling them its own way (distinct numbers, so a test sees
    which ones a CLI added up): `cached_in` of `fresh_in` … are read from a cache, `reasoning` of `out` think."""

    fresh_in: int = 1200  # input not read from a cache
    cache_write: int = 300  # Anthropic only: input written to the cache
    cached_in: int = 4000  # input read from the cache
    out: int = 70  # output, reasoning included
    reasoning: int = 20

    def anthropic(self, output: int | None = None) -> dict[str, Any]:
        """Messages API: input_tokens excludes both cache counts; output_tokens is cumulative."""
        return {"input_tokens": self.fresh_in, "cache_creation_input_tokens": self.cache_write,
                "cache_read_input_tokens": self.cached_in, "output_tokens": self.out if output is None else output,
                "service_tier": "standard"}

    def responses(self) -> dict[str, Any]:
        """Responses API: input_tokens includes the cached ones, output_tokens the reasoning ones."""
        total_in = self.fresh_in + self.cached_in
        return {"input_tokens": total_in, "input_tokens_details": {"cached_tokens": self.cached_in},
                "output_tokens": self.out, "output_tokens_details": {"reasoning_tokens": self.reasoning},
                "total_tokens": total_in + self.out}

    def gemini(self) -> dict[str, Any]:
        """generateContent: promptTokenCount includes the cached ones; thoughts are counted apart from
        candidatesTokenCount."""
        prompt, candidates = self.fresh_in + self.cached_in, self.out - self.reasoning
        return {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
                "cachedContentTokenCount": self.cached_in, "thoughtsTokenCount": self.reasoning,
                "totalTokenCount": prompt + candidates + self.reasoning}


LIMIT_ANSWERS: dict[str, tuple[int, dict[str, Any]]] = {
    "anthropic": (429, {"type": "error", "error": {"type": "rate_limit_error", "message":
                        "This request would exceed your organization's rate limit. Please try again later."}}),
    "responses": (429, {"error": {"type": "usage_limit_reached", "code": "insufficient_quota", "message":
                        "You exceeded your current quota, please check your plan and billing details.",
                        "param": None}}),
    "gemini": (429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message":
                     "You exceeded your current quota, please check your plan and billing details.",
                     "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                         {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                          "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "250"}]},
                                 {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"}]}}),
}
"""What each API answers once the account's usage limit or quota is reached (Gemini: a daily quota, which
gemini-cli does not retry; the same body without `details` it retries for minutes: CLIS.md)."""


@dataclass
class ModelRequest:
    """One request the server received."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def api_key(self) -> str | None:
        """The key as any of the three APIs sends it: x-api-key, x-goog-api-key, Authorization: Bearer, ?key=."""
        for name in ("x-api-key", "x-goog-api-key"):
            if name in self.headers:
                return self.headers[name]
        bearer = self.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            return bearer[7:]
        for part in self.query.split("&"):
            if part.startswith("key="):
                return part[4:]
        return None


class ModelServer(FakeServer):
    """Answers every model call with `reply`; `requests` holds what was asked, `model_calls` the calls
    that asked for an answer (not model listings or token counts)."""

    def __init__(self, reply: str = DEFAULT_REPLY, *, chunks: int = 1, chunk_delay: float = 0.0,
                 usage: Usage | None = None, limited: bool = False) -> None:
        self.reply = reply
        self.usage = usage or Usage()
        self.limited = limited  # True: every model call is answered with the API's usage-limit error
        self.chunks = chunks  # a streamed Anthropic answer comes in this many text deltas …
        self.chunk_delay = chunk_delay  # … this many seconds apart
        self.requests: list[ModelRequest] = []
        self.echo: bool = False  # True: print each request as a JSON line (when run alone)
        super().__init__()

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._any)

    @property
    def model_calls(self) -> list[ModelRequest]:
        """Requests that asked a model for an answer."""
        return [r for r in self.requests if _api(r.path) is not None and r.method == "POST"]

    async def _any(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")[:2000]}
        record = ModelRequest(request.method, request.path, request.query_string,
                              {k.lower(): v for k, v in request.headers.items()},
                              body if isinstance(body, dict) else {"_body": body})
        self.requests.append(record)
        self.changed.set()
        if self.echo:
            print(json.dumps(record.__dict__), flush=True)
        api = _api(request.path)
        if request.method == "GET" and request.path.endswith("/models"):
            return web.json_response({"object": "list", "data": [], "models": []})
        if api is None or request.method != "POST":
            return web.json_response({"error": {"message": f"fake model server: no {request.path}"}}, status=404)
        if self.limited:
            status, error = LIMIT_ANSWERS[api.split("-")[0]]
            return web.json_response(error, status=status, headers={"retry-after": "1"})
        stream = bool(record.body.get("stream")) or api == "gemini-stream"
        if api == "anthropic" and stream:
            return await _anthropic_stream(request, record, self.reply, self.usage, self.chunks, self.chunk_delay)
        return await _ANSWERS[api](request, record, self.reply, self.usage, stream)


def _api(path: str) -> str | None:
    if path.endswith("/v1/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith(":streamGenerateContent"):
        return "gemini-stream"
    if path.endswith(":generateContent"):
        return "gemini"
    return None


async def _sse(request: web.Request, events: list[tuple[str | None, dict[str, Any] | str]],
               delays: dict[int, float] | None = None) -> web.StreamResponse:
    """Writes the events as Server-Sent Events; `delays`: seconds to wait before the event at that index."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for index, (name, data) in enumerate(events):
        if delays and delays.get(index):
            await asyncio.sleep(delays[index])
        text = data if isinstance(data, str) else json.dumps(data)
        await response.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode())
    await response.write_eof()
    return response


def split_reply(reply: str, chunks: int) -> list[str]:
    """The reply cut into `chunks` pieces of about equal length (fewer when it is shorter)."""
    size = max(1, -(-len(reply) // max(1, chunks)))
    return [reply[start:start + size] for start in range(0, len(reply), size)] or [""]


def _anthropic_message(record: ModelRequest, usage: dict[str, Any]) -> dict[str, Any]:
    model = str(record.body.get("model", "claude-fake"))
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
            "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}


async def _anthropic(request: web.Request, record: ModelRequest, reply: str, usage: Usage,
                     stream: bool) -> web.StreamResponse:
    if stream:
        return await _anthropic_stream(request, record, reply, usage, 1, 0.0)
    return web.json_response({**_anthropic_message(record, usage.anthropic()),
                              "content": [{"type": "text", "text": reply}]})


async def _anthropic_stream(request: web.Request, record: ModelRequest, reply: str, usage: Usage, chunks: int,
                            delay: float) -> web.StreamResponse:
    """The Messages API's SSE answer, its text in `chunks` deltas `delay` seconds apart: `message_start` holds
    the input counts and one output token, `message_delta` the whole usage (output cumulative)."""
    message = _anthropic_message(record, usage.anthropic(output=1))
    deltas = [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": piece}})
              for piece in split_reply(reply, chunks)]
    return await _sse(request, [
        ("message_start", {"type": "message_start",
                           "message": {**message, "content": [], "stop_reason": None}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        *deltas,
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": usage.anthropic()}),
        ("message_stop", {"type": "message_stop"}),
    ], {2 + index: delay for index in range(1, len(deltas))})


async def _responses(request: web.Request, record: ModelRequest, reply: str, usage: Usage,
                     stream: bool) -> web.StreamResponse:
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": reply, "annotations": []}]}
    done = {"id": response_id, "object": "response", "status": "completed", "model": record.body.get("model"),
            "output": [item], "usage": usage.responses()}
    if not stream:
        return web.json_response(done)
    return await _sse(request, [
        ("response.created", {"type": "response.created",
                              "response": {**done, "status": "in_progress", "output": [], "usage": None}}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": {**item, "status": "in_progress", "content": []}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                        "output_index": 0, "content_index": 0, "delta": reply}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ])


async def _gemini(request: web.Request, record: ModelRequest, reply: str, usage: Usage,
                  stream: bool) -> web.StreamResponse:
    config = record.body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if config.get("responseMimeType") == "application/json":  # gemini-cli's own helper calls (model routing, …)
        reply = json.dumps(_sample(schema or {}))
    answer = {"candidates": [{"content": {"parts": [{"text": reply}], "role": "model"}, "finishReason": "STOP",
                              "index": 0}],
              "usageMetadata": usage.gemini(),
              "modelVersion": record.path.rsplit("/", 1)[-1].split(":")[0]}
    if not stream:
        return web.json_response(answer)
    return await _sse(request, [(None, answer)])


def _sample(schema: dict[str, Any]) -> Any:
    """A small value that fits a JSON schema (what a structured-output call of the CLI expects)."""
    kind = str(schema.get("type", "object")).lower()
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {key: _sample(value) for key, value in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    return {"string": "fake", "integer": 1, "number": 1, "boolean": False}.get(kind)


_ANSWERS = {"anthropic": _anthropic, "responses": _responses, "gemini": _gemini,
            "gemini-stream": _gemini}


async def _serve(port: int) -> None:
    server = ModelServer()
    server.echo = True
    runner = web.AppRunner(server.app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
