"""A scripted fake model API on 127.0.0.1 for recording the real ACP adapters: the Anthropic Messages, OpenAI
Responses and Gemini generateContent endpoints, where the prompt itself says what the model does.

Directives in the last user text of a request (all optional):
- `[chunks=N]` streams the answer in N text deltas (default 1); `[delay=S]` waits S seconds before each delta;
- `[run=CMD]` answers with a shell tool call running CMD (when the request offers a shell tool and the last
  message is not already that tool's result; the model's answer after the result quotes its output); codex's
  call asks to leave the sandbox (`require_escalated`, as a real model does to write), `[sandboxed=CMD]` does not;
- `[recall=WORD]` answers whether WORD appears in the earlier messages of the request (the session's memory);
- `[mcp=TOOL:KEY=VALUE]` answers with a call of the offered tool named TOOL or ending in `_TOOL` (an MCP tool as
  the CLI names it: claude `mcp__switchyard__send_message`, gemini and codex their own spelling) with the one
  string argument KEY=VALUE (none when `:…` is left out; several as `K1=V1|K2=V2`; `KEY:=JSON` gives KEY any
  JSON value, `options:=["red","green"]`, whose own `[…]` may nest in the directive, but not a `|`), then, given
  its result, quotes it like `[run=]`. Each API carries the arguments as JSON (claude's `input`, codex's
  `arguments` string, gemini's `args`), so a list reaches the CLI as a list.

Every request is kept in `calls` with its start and end time (`time.monotonic()`), so a caller in the same
process can tell the model's own time from the agent's. `hold_tool_results()` makes every request that carries a
tool's result wait until `release()`: an agent held mid-turn, after its tool call, for as long as a test needs.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.base import FakeServer

DIRECTIVE_START = re.compile(r"\[([a-z]+)=")
SHELL_TOOLS = ("Bash", "run_shell_command", "shell_command", "exec_command", "shell")
RELEASED = web.AppKey("released", asyncio.Event)


@dataclass
class Call:
    """One model request: which API, the user text it acted on, what it answered, when."""

    api: str
    path: str
    started: float
    body: dict[str, Any]
    prompt: str = ""
    answer: str = ""
    tool_call: str | None = None
    ended: float = 0.0
    tools: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What a recording keeps of the call (not the whole body: system prompts are large)."""
        return {"api": self.api, "path": self.path, "prompt": self.prompt[-300:], "answer": self.answer,
                "tool_call": self.tool_call, "tools": self.tools,
                "ms": round((self.ended - self.started) * 1000, 1) if self.ended else "unfinished",
                "body_bytes": len(json.dumps(self.body))}


@dataclass
class Turn:
    """What the model does for one request."""

    text: str
    chunks: int
    delay: float
    tool: tuple[str, str] | None  # (tool name, command)
    escalated: bool = True
    arguments: dict[str, Any] | None = None  # an MCP tool's own arguments (`[mcp=]`) instead of a shell command


class ScriptedModel(FakeServer):
    """The scripted model API; `calls` lists every answered request in order."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        super().__init__()
        self.app[RELEASED] = asyncio.Event()
        self.app[RELEASED].set()

    def hold_tool_results(self) -> None:
        self.app[RELEASED].clear()

    def release(self) -> None:
        self.app[RELEASED].set()

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._route)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        path = request.path
        if request.method != "POST":
            return web.json_response({"object": "list", "data": [], "models": []})
        if path.endswith("/v1/messages"):
            handler = _anthropic
        elif path.endswith("/responses"):
            handler = _responses
        elif path.endswith("GenerateContent"):
            handler = _gemini
        else:
            return web.json_response({"error": {"message": f"scripted model: no {path}"}}, status=404)
        call = Call(api=handler.__name__.strip("_"), path=path, started=time.monotonic(), body=body)
        self.calls.append(call)
        try:
            return await handler(request, call)
        finally:
            call.ended = time.monotonic()
            self.changed.set()


def plan(call: Call, user_texts: list[str], tool_result: str | None, tools: list[str]) -> Turn:
    """Reads the directives of the last user text block and decides the answer; `user_texts` are all the user
    text blocks of the request in order (an agent may put its own reminders or an interrupted prompt before the
    new one in the same message)."""
    prompt = user_texts[-1] if user_texts else ""
    call.prompt, call.tools = prompt, tools
    chunks = int(_directive(prompt, "chunks") or 1)
    delay = float(_directive(prompt, "delay") or 0)
    command = _directive(prompt, "run") or _directive(prompt, "sandboxed")
    shell = next((name for name in SHELL_TOOLS if name in tools), None)
    mcp = _directive(prompt, "mcp")
    if mcp and tool_result is None:
        wanted, _, argument = mcp.partition(":")
        offered = next((name for name in tools if name == wanted or name.endswith("_" + wanted)), None)
        if offered is not None:
            call.tool_call = f"{offered}: {argument}"
            return Turn("", 0, delay, (offered, ""), arguments=_arguments(argument))
    if command and tool_result is None and shell:
        call.tool_call = f"{shell}: {command}"
        return Turn("", 0, delay, (shell, command), escalated=_directive(prompt, "sandboxed") is None)
    if tool_result is not None:
        text = f"the tool said: {tool_result.strip()[:400]}"
    elif (word := _directive(prompt, "recall")) is not None:
        seen = _without_directives(" ".join(user_texts))
        text = f"recall {word}: {'yes' if word in seen else 'no'} ({len(user_texts)} user texts seen)"
    else:
        text = "answer to: " + _without_directives(prompt).strip()[:80]
    call.answer = text
    return Turn(text, max(chunks, 1), delay, None)


def _directives(prompt: str) -> list[tuple[str, str, int, int]]:
    """(name, value, start, end) of each `[name=value]` in the prompt, in order; a value may hold balanced
    `[…]` of its own (a JSON list), never read as a directive; a `[` never closed ends nothing."""
    found: list[tuple[str, str, int, int]] = []
    for match in DIRECTIVE_START.finditer(prompt):
        if found and match.start() < found[-1][3]:
            continue
        depth, at = 1, match.end()
        while at < len(prompt) and depth:
            depth += {"[": 1, "]": -1}.get(prompt[at], 0)
            at += 1
        if depth == 0:
            found.append((match.group(1), prompt[match.end():at - 1], match.start(), at))
    return found


def _directive(prompt: str, name: str) -> str | None:
    values = [value for found, value, _, _ in _directives(prompt) if found == name]
    return values[-1] if values else None


def _without_directives(text: str) -> str:
    for _, _, start, end in reversed(_directives(text)):
        text = text[:start] + text[end:]
    return text


def _arguments(argument: str) -> dict[str, Any]:
    """`K1=V1|K2:=JSON` as a tool call's arguments: a string, or the JSON value given."""
    arguments: dict[str, Any] = {}
    for part in argument.split("|") if argument else []:
        key, _, value = part.partition("=")
        if key.endswith(":"):
            arguments[key[:-1]] = json.loads(value)
        elif key:
            arguments[key] = value
    return arguments


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // count))
    parts = [text[i:i + size] for i in range(0, len(text), size)]
    return parts + [""] * (count - len(parts)) if len(parts) < count else parts


async def _sse(request: web.Request, events: list[tuple[str | None, Any]], delay: float = 0,
               delayed: str | None = None) -> web.StreamResponse:
    """Writes server-sent events; waits `delay` before each event named `delayed` (every event when the
    stream names none, as gemini's `data:`-only stream)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for name, data in events:
        if delay and name == delayed:
            await asyncio.sleep(delay)
        await response.write(((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n").encode())
    await response.write_eof()
    return response


async def _held(request: web.Request, tool_result: str | None) -> None:
    """Waits, when the request carries a tool's result, for as long as the test holds those (`hold_tool_results`)."""
    if tool_result is not None:
        await request.app[RELEASED].wait()


def _texts_of(content: Any) -> list[str]:
    """The non-empty text blocks of a message's content."""
    if isinstance(content, str):
        return [content] if content.strip() else []
    if isinstance(content, list):
        return [str(part["text"]) for part in content if isinstance(part, dict)
                and part.get("type") in ("text", "input_text") and str(part.get("text", "")).strip()]
    return []


async def _anthropic(request: web.Request, call: Call) -> web.StreamResponse:
    messages = [m for m in call.body.get("messages", []) if m.get("role") == "user"]
    last = messages[-1].get("content") if messages else ""
    results = [p for p in last if isinstance(p, dict) and p.get("type") == "tool_result"] \
        if isinstance(last, list) else []
    texts = [t for m in messages for t in _texts_of(m.get("content"))]
    result = json.dumps(results[0].get("content")) if results else None
    tools = [str(t.get("name")) for t in call.body.get("tools") or []]
    await _held(request, result)
    turn = plan(call, texts, result, tools)
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
               "model": call.body.get("model", "claude-fake"), "stop_sequence": None, "usage": usage}
    stop = "tool_use" if turn.tool else "end_turn"
    if turn.tool:
        block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": turn.tool[0],
                 "input": turn.arguments if turn.arguments is not None else
                 {"command": turn.tool[1], "description": "scripted tool call"}}
    if not call.body.get("stream"):
        content = [block] if turn.tool else [{"type": "text", "text": turn.text}]
        return web.json_response({**message, "stop_reason": stop, "content": content})
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None}})]
    if turn.tool:
        events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {**block, "input": {}}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                       "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})]
    else:
        events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": piece}})
                   for piece in _pieces(turn.text, turn.chunks)]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
    return await _sse(request, events, turn.delay, "content_block_delta")


async def _responses(request: web.Request, call: Call) -> web.StreamResponse:
    items = call.body.get("input") or []
    users = [i for i in items if i.get("role") == "user"]
    texts = [t for i in users for t in _texts_of(i.get("content")) if "<environment_context>" not in t]
    since_user = items[max((n for n, i in enumerate(items) if i.get("role") == "user"), default=-1) + 1:]
    outputs = [i for i in since_user if i.get("type") == "function_call_output"]  # codex may add items after it
    result = str(outputs[-1].get("output")) if outputs else None
    tools = [str(t.get("name")) for t in call.body.get("tools") or [] if t.get("name")]
    namespaces = {f"{t['name']}__{inner.get('name')}": (str(t["name"]), str(inner.get("name")))
                  for t in call.body.get("tools") or [] if t.get("type") == "namespace"
                  for inner in t.get("tools") or []}  # codex offers MCP tools as a namespace of functions
    await _held(request, result)
    turn = plan(call, texts, result, tools + list(namespaces))
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    if turn.tool:
        name, command = turn.tool
        # codex's default session mode is read-only: a real model asks to leave the sandbox for a write
        escalated = {"sandbox_permissions": "require_escalated", "justification": "scripted tool call"}
        arguments = json.dumps(turn.arguments if turn.arguments is not None else
                               {"cmd": command, **(escalated if turn.escalated else {})} if name == "exec_command" else
                               {"command": ["bash", "-lc", command]} if name == "shell" else {"command": command})
        item: dict[str, Any] = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}", "status": "completed",
                                "call_id": f"call_{uuid.uuid4().hex[:20]}", "name": name, "arguments": arguments}
        if name in namespaces:
            item.update(namespace=namespaces[name][0], name=namespaces[name][1])
        deltas: list[tuple[str | None, Any]] = []
    else:
        item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
        deltas = [("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                  "output_index": 0, "content_index": 0, "delta": piece})
                  for piece in _pieces(turn.text, turn.chunks)]
    done = {"id": response_id, "object": "response", "status": "completed", "model": call.body.get("model"),
            "output": [item], "usage": usage}
    if not call.body.get("stream"):
        return web.json_response(done)
    started = {**item, "status": "in_progress"} | ({} if turn.tool else {"content": []})
    return await _sse(request, [
        ("response.created", {"type": "response.created", "response": {**done, "status": "in_progress",
                                                                       "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": started}),
        *deltas,
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ], turn.delay, "response.output_text.delta")


async def _gemini(request: web.Request, call: Call) -> web.StreamResponse:
    config = call.body.get("generationConfig") or {}
    contents = call.body.get("contents") or []
    if config.get("responseMimeType") == "application/json":  # gemini-cli's helper calls: none with --model set
        call.answer = "{}"
        return web.json_response(_gemini_answer([{"text": call.answer}], call))
    users = [c for c in contents if c.get("role") == "user"]
    texts = [str(p["text"]) for c in users for p in c.get("parts", []) if str(p.get("text", "")).strip()]
    last_parts = users[-1].get("parts", []) if users else []
    responses = [p["functionResponse"] for p in last_parts if "functionResponse" in p]
    result = json.dumps(responses[0].get("response")) if responses else None
    tools = [str(d.get("name")) for t in call.body.get("tools") or [] for d in t.get("functionDeclarations") or []]
    await _held(request, result)
    turn = plan(call, texts, result, tools)
    if turn.tool:
        args = turn.arguments if turn.arguments is not None else {
            "command": turn.tool[1], "description": "scripted tool call"}
        answers = [_gemini_answer([{"functionCall": {"name": turn.tool[0], "args": args}}], call)]
    else:
        answers = [_gemini_answer([{"text": piece}], call, last=i == turn.chunks - 1)
                   for i, piece in enumerate(_pieces(turn.text, turn.chunks))]
    if not request.path.endswith(":streamGenerateContent"):
        return web.json_response(answers[-1])
    return await _sse(request, [(None, answer) for answer in answers], turn.delay)


def _gemini_answer(parts: list[dict[str, Any]], call: Call, last: bool = True) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    answer: dict[str, Any] = {"candidates": [candidate],
                              "modelVersion": call.path.rsplit("/", 1)[-1].split(":")[0]}
    if last:
        candidate["finishReason"] = "STOP"
        answer["usageMetadata"] = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    return answer

