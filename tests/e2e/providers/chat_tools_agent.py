"""A script agent that uses the chat tools the way an agent CLI does: over MCP, with its turn's token.

Reads SWITCHYARD_CHAT_TOOLS_URL / SWITCHYARD_CHAT_TOOLS_TOKEN (what a generic provider gets), calls
send_message once per `CHAT_TOOLS_SENDS` (default 3), then prints its final answer. With `CHAT_TOOLS_GATE` set,
it waits after `CHAT_TOOLS_GATE_AFTER` messages until that file exists (a test kills the gateway meanwhile).
With `CHAT_TOOLS_ASK` set, it asks that question first and puts the answer in its final one. With
`CHAT_TOOLS_REMIND` set (a `when`), it first sets a reminder then with the text `CHAT_TOOLS_REMIND_TEXT`.
"""

import asyncio
import os
import sys
import time

from orchestrator.chattools.client import connected
from orchestrator.chattools.server import ToolEndpoint


async def main() -> None:
    prompt = sys.stdin.read().strip()
    endpoint = ToolEndpoint(os.environ["SWITCHYARD_CHAT_TOOLS_URL"], os.environ["SWITCHYARD_CHAT_TOOLS_TOKEN"])
    answer = ""
    async with connected(endpoint) as chat:
        if os.environ.get("CHAT_TOOLS_REMIND"):
            answer += " (remind: " + await chat.call("remind", when=os.environ["CHAT_TOOLS_REMIND"],
                                                     text=os.environ.get("CHAT_TOOLS_REMIND_TEXT", "ping")) + ")"
        if os.environ.get("CHAT_TOOLS_ASK"):
            answer += " (asked: " + await chat.call("ask", question=os.environ["CHAT_TOOLS_ASK"]) + ")"
        gate, after = os.environ.get("CHAT_TOOLS_GATE"), int(os.environ.get("CHAT_TOOLS_GATE_AFTER", "0"))
        for n in range(1, int(os.environ.get("CHAT_TOOLS_SENDS", "3")) + 1):
            await chat.call("send_message", text=f"progress {n}")
            while gate and n == after and not os.path.exists(gate):
                time.sleep(0.02)
    print(f"final answer to {prompt}{answer}")


asyncio.run(main())
