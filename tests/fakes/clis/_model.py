"""The model call the fakes make when pointed at a model API the way the real CLI reads it (CLIS.md, "Custom
model endpoints"): the request shape, key header and SSE stream of the real CLI, so a test's fake model
server (tests/fakes/model_server.py) sees what the real CLI would send. Stdlib only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

TIMEOUT_SEC = 30


class ModelError(Exception):
    """The API answered an error status (`status`), or could not be reached (`status` None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def anthropic(base_url: str, key: str | None, prompt: str, model: str,
              on_delta: Callable[[str], None] | None = None) -> str:
    """claude: POST <base>/v1/messages?beta=true, `x-api-key`, streamed; `on_delta` gets each text delta as
    it arrives."""
    headers = {"anthropic-version": "2023-06-01", **({"x-api-key": key} if key else {})}
    body = {"model": model, "max_tokens": 32000, "stream": True,
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]}
    texts = []

    def take(event: dict[str, Any]) -> None:
        if event.get("type") == "content_block_delta":
            texts.append(str(event.get("delta", {}).get("text", "")))
            if on_delta is not None:
                on_delta(texts[-1])

    _sse(f"{base_url.rstrip('/')}/v1/messages?beta=true", headers, body, take)
    return "".join(texts)


def responses(base_url: str, key: str | None, prompt: str, model: str) -> str:
    """codex: POST <base_url>/responses (base_url ends in /v1), `Authorization: Bearer`, streamed."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "stream": True, "store": False,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}]}
    texts = []
    for event in _sse(f"{base_url.rstrip('/')}/responses", headers, body):
        item = event.get("item") or {}
        if event.get("type") == "response.output_item.done" and item.get("type") == "message":
            texts += [str(part.get("text", "")) for part in item.get("content", [])
                      if part.get("type") == "output_text"]
    return "".join(texts)


def gemini(base_url: str, key: str | None, prompt: str, model: str) -> str:
    """gemini: POST <base>/v1beta/models/<model>:streamGenerateContent?alt=sse, `x-goog-api-key`."""
    headers = {"x-goog-api-key": key} if key else {}
    body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
    url = f"{base_url.rstrip('/')}/v1beta/models/{model}:streamGenerateContent?alt=sse"
    texts = []
    for event in _sse(url, headers, body):
        for candidate in event.get("candidates", []):
            texts += [str(part.get("text", "")) for part in candidate.get("content", {}).get("parts", [])]
    return "".join(texts)


def _sse(url: str, headers: dict[str, str], body: dict[str, Any],
         on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """The stream's events, each also handed to `on_event` as soon as its line arrives."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "text/event-stream",
                                              **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SEC) as response:
            events = []
            for raw in response:
                line = raw.decode("utf-8", "replace")
                data = line[5:].strip() if line.startswith("data:") else ""
                if data and data != "[DONE]" and isinstance(value := json.loads(data), dict):
                    events.append(value)
                    if on_event is not None:
                        on_event(value)
            return events
    except urllib.error.HTTPError as exc:
        said = exc.read().decode("utf-8", "replace")[:500]
        raise ModelError(f"{exc.code} {exc.reason}: {said}, url: {url}", exc.code) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ModelError(f"error sending request for url ({url}): {exc}") from exc
