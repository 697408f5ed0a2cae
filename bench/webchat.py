"""The web chat's weight and a message's round trip through it (issue 36): `python -m bench.webchat`.

Starts `switchyard run` on a scratch home with the embedded default's web profile (the built-in echo provider),
signs in as a browser would (the printed link, then the session cookie), and measures
- the page's weight: the bytes of `/`, `chat.js` and `chat.css` as served (no compression, no CDN);
- a message's round trip: from the POST of `/api/send` until the agent's answer arrives on the conversation's
  WebSocket, one message at a time (median and 95th percentile).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from bench.process import GatewayProcess, wait_for

LINK = re.compile(r"chat: (http://\S+)")


async def measure(link: str, messages: int) -> dict[str, float]:
    base = link.split("?", 1)[0].rstrip("/")
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        weight = 0
        for path in ("/?t=" + link.split("?t=", 1)[1], "/static/chat.js", "/static/chat.css"):
            async with session.get(base + path) as response:
                weight += len(await response.read())
        async with session.get(base + "/api/me") as response:
            conversation = (await response.json())["conversations"][-1]["id"]
        headers = {"Origin": base, "X-Switchyard-Chat": "1"}
        times = []
        async with session.ws_connect(f"{base}/ws?c={conversation}", headers={"Origin": base}) as ws:
            while json.loads((await ws.receive()).data)["kind"] != "synced":
                pass
            for number in range(messages):
                started = time.perf_counter()
                async with session.post(f"{base}/api/send", headers=headers, json={
                        "conversation": conversation, "text": f"ping {number}", "id": uuid.uuid4().hex}) as sent:
                    assert sent.status == 200, await sent.text()
                while True:
                    entry = json.loads((await ws.receive()).data)
                    if entry.get("from") == "agent" and f"ping {number}" in entry.get("text", ""):
                        break
                times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"page_bytes": weight, "messages": messages, "median_ms": statistics.median(times),
            "p95_ms": times[int(len(times) * 0.95) - 1], "min_ms": times[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-web-") as folder:
        root = Path(folder) / "home"
        root.mkdir()
        (root / "settings.yaml").write_text("channels:\n  - {id: web, type: web, port: 0}\n")
        with GatewayProcess(root, plugins="") as gateway:
            link = wait_for(lambda: LINK.findall(gateway.log.read_text()), 30, "the chat link")[-1]
            figures = asyncio.run(measure(link, args.messages))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
