"""Runs the fake chat platforms of tests/fakes in one process for P5; prints the channel profiles as JSON.

Usage: `python -m bench.fakes_host` — one JSON line on stdout ({"channels": [...], "env": {...}}),
then it serves until its standard input closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any


async def _serve() -> None:
    from tests.fakes.discord_server import DiscordFakeServer
    from tests.fakes.slack_server import FakeSlack
    from tests.fakes.telegram_server import FakeTelegram
    from tests.fakes.whatsapp_server import FakeWhatsApp

    async with contextlib.AsyncExitStack() as stack:
        telegram, discord, slack, whatsapp = FakeTelegram(), DiscordFakeServer(), FakeSlack(), FakeWhatsApp()
        for server in (telegram, discord, slack, whatsapp):
            await stack.enter_async_context(server)
        channels: list[dict[str, Any]] = [
            {"id": "tg", "type": "telegram", "token_env": "BENCH_TG_TOKEN", "base_url": f"{telegram.url}/bot",
             "base_file_url": f"{telegram.url}/file/bot", "mode": "polling"},
            {"id": "dc", "type": "discord", "token_env": "BENCH_DC_TOKEN", "api_base_url": discord.api_base_url,
             "gateway_url": discord.gateway_url},
            {"id": "sl", "type": "slack", "mode": "socket", "bot_token_env": "BENCH_SL_BOT",
             "app_token_env": "BENCH_SL_APP", "signing_secret_env": "BENCH_SL_SECRET",
             "api_base_url": f"{slack.url}/api/", "http_port": 0},
            {"id": "wa", "type": "whatsapp", "token_env": "BENCH_WA_TOKEN", "phone_number_id": whatsapp.phone_number_id,
             "app_secret_env": "BENCH_WA_SECRET", "verify_token_env": "BENCH_WA_VERIFY",
             "api_base_url": whatsapp.api_base_url, "webhook_port": 0},
        ]
        env = {"BENCH_TG_TOKEN": telegram.token, "BENCH_DC_TOKEN": discord.token, "BENCH_SL_BOT": slack.bot_token,
               "BENCH_SL_APP": slack.app_token, "BENCH_SL_SECRET": slack.signing_secret,
               "BENCH_WA_TOKEN": whatsapp.token, "BENCH_WA_SECRET": whatsapp.app_secret,
               "BENCH_WA_VERIFY": whatsapp.verify_token}
        print(json.dumps({"channels": channels, "env": env}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_serve())
